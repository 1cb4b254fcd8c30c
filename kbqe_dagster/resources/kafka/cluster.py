"""What a Kafka cluster holds, asked by the driver and the sensors: topic names and
partitions, the topics a pipeline's patterns take, watermarks for planning and lag (in a
bounded number of round trips for a fleet), and the time of the first unstaged message for
the latency trigger.

No consumer group membership and no offset commits: offsets live in done files (DESIGN.md
§3).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.resources.kafka.clients import (
    KafkaReadError,
    KafkaSettings,
    TopicMissing,
    connected_admin,
    connected_consumer,
    consumer_config,
)
from kbqe_dagster.resources.kafka.range_reader import read_range

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PartitionWatermarks:
    topic: str
    partition: int
    low: int
    high: int


def topic_partitions(settings: KafkaSettings, topic: str, timeout: float = 10.0) -> list[int]:
    """The partition numbers of ``topic``; :class:`TopicMissing` if Kafka does not hold it, a
    KafkaReadError if its metadata carries another error."""
    admin = connected_admin(settings)
    meta = admin.list_topics(topic=topic, timeout=timeout)
    info = meta.topics.get(topic)
    if info is None or (
        info.error is not None and info.error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART
    ):
        raise TopicMissing(topic)
    if info.error is not None:
        raise KafkaReadError(f"topic {topic!r} is not available: {info.error}")
    return sorted(info.partitions)


def list_topic_names(settings: KafkaSettings, timeout: float = 10.0) -> frozenset[str]:
    """The names of every topic of the cluster, in one metadata request (whatever their
    number). A topic whose metadata carries an error (being created, leader not elected yet,
    being deleted) is left out: it is found on the next call, once it can be read."""
    admin = connected_admin(settings)
    try:
        meta = admin.list_topics(timeout=timeout)
    except KafkaException as error:
        raise KafkaReadError(
            f"listing the topics of {settings.bootstrap_servers}: {error}"
        ) from error
    return frozenset(name for name, info in meta.topics.items() if info.error is None)


def discover_topics(
    config: PipelineConfig, settings: KafkaSettings, timeout: float = 10.0
) -> PipelineConfig:
    """``config`` with the topics its ``topic_patterns`` take from the cluster's listing
    (core/config/discovery.py). Without patterns, ``config`` itself and no request to Kafka."""
    if not config.topic_patterns:
        return config
    return config.discover(list_topic_names(settings, timeout))


def watermarks(
    settings: KafkaSettings, topic: str, timeout: float = 10.0
) -> list[PartitionWatermarks]:
    """Low and high watermark of every partition of ``topic``."""
    consumer = connected_consumer(settings)
    try:
        out = []
        for p in topic_partitions(settings, topic, timeout):
            low, high = _watermark_offsets(consumer, TopicPartition(topic, p), timeout)
            out.append(PartitionWatermarks(topic, p, low, high))
        return out
    finally:
        consumer.close()


# A partition's leadership moves in a broker restart or a rolling upgrade: for a few seconds
# the broker answers "not leader" (or the leader is unknown). Those answers are retried until
# the call's timeout, so a stage run or sensor tick at that moment waits instead of failing.
_LEADERSHIP_MOVING = frozenset(
    {
        KafkaError.NOT_LEADER_FOR_PARTITION,
        KafkaError.LEADER_NOT_AVAILABLE,
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._TRANSPORT,
        KafkaError._WAIT_COORD,
    }
)


def _watermark_offsets(consumer: Consumer, tp: TopicPartition, timeout: float) -> tuple[int, int]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            return consumer.get_watermark_offsets(tp, timeout=max(0.5, deadline - time.monotonic()))
        except KafkaException as error:
            code = error.args[0].code() if error.args else None
            if code not in _LEADERSHIP_MOVING or time.monotonic() + 0.5 > deadline:
                raise
            log.info("%s[%d]: %s; asking again", tp.topic, tp.partition, error.args[0].str())
            time.sleep(0.5)


def watermarks_of(
    settings: KafkaSettings, topics: Iterable[str], timeout: float = 10.0
) -> dict[tuple[str, int], PartitionWatermarks]:
    """Low and high watermarks of every partition of ``topics``, in a bounded number of broker
    round trips whatever the number of partitions: one metadata request, then one ListOffsets
    request per bound (earliest, latest) for all partitions together. The high watermark is
    read ``read_committed``, as the stage reader reads. Topics Kafka does not know are
    absent from the result."""
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import OffsetSpec

    wanted = set(topics)
    if not wanted:
        return {}
    admin = connected_admin(settings)
    try:
        meta = admin.list_topics(timeout=timeout)
    except KafkaException as error:
        raise KafkaReadError(
            f"listing the topics of {settings.bootstrap_servers}: {error}"
        ) from error
    tps = [
        TopicPartition(name, p)
        for name, info in sorted(meta.topics.items())
        if name in wanted and info.error is None
        for p in sorted(info.partitions)
    ]
    if not tps:
        return {}
    bounds = {}
    deadline = time.monotonic() + timeout
    for which, spec in (("low", OffsetSpec.earliest()), ("high", OffsetSpec.latest())):
        while which not in bounds:
            futures = admin.list_offsets(
                {tp: spec for tp in tps},
                isolation_level=IsolationLevel.READ_COMMITTED,
                request_timeout=max(0.5, deadline - time.monotonic()),
            )
            try:
                bounds[which] = {
                    (tp.topic, tp.partition): f.result().offset for tp, f in futures.items()
                }
            except KafkaException as e:
                # As _watermark_offsets: a leadership that moves (a broker restart, a topic
                # created a moment ago) is asked again until the call's timeout.
                code = e.args[0].code() if e.args else None
                if code not in _LEADERSHIP_MOVING or time.monotonic() + 0.5 > deadline:
                    raise KafkaReadError(
                        f"listing {which} offsets of {', '.join(sorted(wanted))}: {e}"
                    ) from e
                log.info("listing %s offsets: %s; asking again", which, e.args[0].str())
                time.sleep(0.5)
    return {
        tp: PartitionWatermarks(tp[0], tp[1], bounds["low"][tp], bounds["high"][tp])
        for tp in sorted(bounds["high"])
    }


def oldest_timestamp_ms(
    settings: KafkaSettings, topic: str, partition: int, offset: int, timeout: float = 5.0
) -> int | None:
    """The Kafka timestamp of the first readable message at or after ``offset`` (for the
    latency trigger), or None when there is none."""
    for msg in read_range(settings, topic, partition, offset, offset + 1, idle_timeout=timeout):
        ts_type, ts = msg.timestamp()
        return ts if ts_type != 0 and ts >= 0 else None
    return None


def first_timestamps_ms(
    settings: KafkaSettings, positions: Mapping[tuple[str, int], int], timeout: float = 5.0
) -> dict[tuple[str, int], int | None]:
    """The Kafka timestamp of the first readable message at or after each position, for the
    latency trigger of many partitions at once: one consumer with every partition assigned
    reads until it holds one message (or the end of the log) per partition, so its fetches
    ask each broker for all its partitions together — the round trips do not grow with the
    number of partitions. None for a partition with nothing readable within ``timeout``.

    A position below the log start (retention deleted the messages) reads from the log
    start: the oldest message still there is the oldest unstaged one."""
    if not positions:
        return {}
    conf = consumer_config(settings)
    conf.update({"auto.offset.reset": "earliest", "queued.max.messages.kbytes": 1024})
    consumer = Consumer(conf)
    found: dict[tuple[str, int], int | None] = {}
    try:
        consumer.assign([TopicPartition(t, p, o) for (t, p), o in positions.items()])
        deadline = time.monotonic() + timeout
        while len(found) < len(positions) and time.monotonic() < deadline:
            for msg in consumer.consume(num_messages=max(1, len(positions)), timeout=0.2):
                tp = (msg.topic(), msg.partition())
                if tp in found or tp not in positions:
                    continue
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise KafkaReadError(
                            f"reading the oldest unstaged message of {tp[0]}[{tp[1]}] from "
                            f"offset {positions[tp]}: {err.str()}"
                        )
                    found[tp] = None
                    continue
                ts_type, ts = msg.timestamp()
                found[tp] = ts if ts_type != 0 and ts >= 0 else None
                # One message is all this partition owes: stop fetching it.
                consumer.pause([TopicPartition(*tp)])
    except KafkaException as e:
        raise KafkaReadError(
            f"reading the oldest unstaged messages of {len(positions)} partition(s): {e}"
        ) from e
    finally:
        consumer.close()
    return {tp: found.get(tp) for tp in positions}


def latest_key(settings: KafkaSettings, topic: str, tail: int = 20, timeout: float = 10.0
               ) -> bytes | None:  # fmt: skip
    """The key of the most recent keyed message among the last ``tail`` of each partition of
    ``topic`` (by Kafka timestamp), or None when none has a key: what a keyed Debezium topic's
    key schema is read from when no registry holds it (JsonConverter keys carry theirs)."""
    latest: tuple[int, bytes] | None = None
    for mark in watermarks(settings, topic, timeout):
        start = max(mark.low, mark.high - tail)
        if start >= mark.high:
            continue
        for msg in read_range(settings, topic, mark.partition, start, mark.high,
                              idle_timeout=timeout):  # fmt: skip
            key = msg.key()
            ts_type, ts = msg.timestamp()
            if key and (latest is None or (ts if ts_type else 0) >= latest[0]):
                latest = (ts if ts_type else 0, key)
    return None if latest is None else latest[1]
