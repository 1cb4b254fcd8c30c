"""Kafka: watermarks for planning and lag, and a consumer that reads exactly one offset range.

No consumer group membership and no offset commits: offsets live in done files (DESIGN.md
§3). The consumer uses ``assign`` with an explicit start offset and ``read_committed`` so
aborted transactional messages are never staged.

Connection settings (SASL/SSL included) travel to Spark executors inside
:class:`KafkaSettings`; its ``repr`` hides secrets so it can be logged.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Protocol, Sequence

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition
from confluent_kafka.admin import AdminClient

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.errors import KbqeError

log = logging.getLogger(__name__)

CLIENT_LOG = logging.getLogger("kbqe_dagster.kafka")
"""Where librdkafka's own lines go (a broker not answering yet, a retried connection): the
logger every Kafka client of the package uses, which the console shows only from ERROR
(cli/logs.py), instead of librdkafka printing ``%4|...`` straight to stderr. In a process
without logging set up (a Spark python worker, a fault-suite child) they go nowhere, as a
library's logs should: a read that fails raises an error naming topic, partition, offset."""
CLIENT_LOG.addHandler(logging.NullHandler())

# librdkafka settings whose values may hold secrets (sasl.password, ssl.key.password,
# sasl.oauthbearer.config with a client secret, ...): redacted in repr.
_SECRET_HINTS = ("password", "secret", "key", "token", "credentials", "oauthbearer", "jaas")


class KafkaReadError(KbqeError):
    """Kafka could not be read; the message names topic/partition/offset."""


@dataclass(frozen=True)
class KafkaSettings:
    """Bootstrap servers plus any librdkafka client setting (``security.protocol``,
    ``sasl.mechanism``, ``sasl.username``, ``sasl.password``, ``ssl.ca.location``, ...)."""

    bootstrap_servers: str
    client_config: Mapping[str, str] = field(default_factory=dict)

    def config(self, **overrides: object) -> dict:
        conf = {"bootstrap.servers": self.bootstrap_servers, "logger": CLIENT_LOG,
                **self.client_config}
        conf.update(overrides)
        return conf

    def __repr__(self) -> str:
        shown = {
            k: ("***" if any(h in k.lower() for h in _SECRET_HINTS) else v)
            for k, v in self.client_config.items()
        }
        return f"KafkaSettings(bootstrap_servers={self.bootstrap_servers!r}, client_config={shown})"


@dataclass(frozen=True)
class PartitionWatermarks:
    topic: str
    partition: int
    low: int
    high: int


# Consumer tuning a pipeline's client_config may override (bench/bench_stage.py measures it):
# - librdkafka (>= 2.4) waits fetch.queue.backoff.ms (1 s by default) before refetching a
#   partition whose local queue passed its threshold, and a reader that drains its queue as
#   fast as a stage task does would wait out that second again and again. At 0 the broker
#   thread spins instead (clock, lock and poll calls without end) and took a third of a stage
#   task's CPU on two cores. At 20 ms, about the time a stage task takes to drain the queue
#   below, the next fetch is under way before the task runs dry, and nothing spins: 27 % less
#   CPU per range than at 0, at the same or better wall time.
# - 4 MiB per partition per fetch (1 MiB by default): a quarter of the fetch round trips.
# - The prefetch queue (64 MB by default) is most of a stage worker's memory. 4 MB, one fetch,
#   keeps a task fed (make bench: the same msg/s as 16 MB) for about 30 MB less per worker.
CONSUMER_TUNING = {
    "fetch.queue.backoff.ms": 20,
    "max.partition.fetch.bytes": 4 * 1024 * 1024,
    "queued.max.messages.kbytes": 4_096,
}


POLL_SECONDS = 0.25
"""How long one consume() of a range reader waits (see :meth:`RangeReader.batches`)."""


def consumer_config(settings: KafkaSettings) -> dict:
    """The range consumer's settings (both the confluent-kafka and the native consumer's)."""
    # group.id is required by librdkafka even for assign(); nothing is ever committed to it.
    conf = settings.config(
        **{
            "group.id": "kbqe-stage",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        }
    )
    for key, value in CONSUMER_TUNING.items():
        conf.setdefault(key, value)
    return conf


def _consumer(settings: KafkaSettings) -> Consumer:
    """A consumer with the range reader's settings, connected at once (see :func:`_admin`):
    a watermark query through a new client answers ~50 ms sooner."""
    return Consumer({"enable.sparse.connections": False, **consumer_config(settings)})


def _admin(settings: KafkaSettings) -> AdminClient:
    """An admin client for one or two metadata or offset requests. librdkafka's sparse
    connections make a new client's first metadata request wait about 50 ms for a broker
    connection it only starts on demand; connecting to the bootstrap brokers at once answers
    in 2 ms (a stage run's preparation and every sensor tick ask through a new client)."""
    conf = settings.config()
    conf.setdefault("enable.sparse.connections", False)
    return AdminClient(conf)


def topic_partitions(settings: KafkaSettings, topic: str, timeout: float = 10.0) -> list[int]:
    """The partition numbers of ``topic``; a KafkaReadError if it does not exist."""
    admin = _admin(settings)
    meta = admin.list_topics(topic=topic, timeout=timeout)
    info = meta.topics.get(topic)
    if info is None or info.error is not None:
        raise KafkaReadError(f"topic {topic!r} is not available: {info.error if info else 'missing'}")
    return sorted(info.partitions)


def list_topic_names(settings: KafkaSettings, timeout: float = 10.0) -> frozenset[str]:
    """The names of every topic of the cluster, in one metadata request (whatever their
    number). A topic whose metadata carries an error (being created, leader not elected yet,
    being deleted) is left out: it is found on the next call, once it can be read."""
    admin = _admin(settings)
    try:
        meta = admin.list_topics(timeout=timeout)
    except KafkaException as error:
        raise KafkaReadError(f"listing the topics of {settings.bootstrap_servers}: {error}") from error
    return frozenset(name for name, info in meta.topics.items() if info.error is None)


def discover_topics(config: PipelineConfig, settings: KafkaSettings,
                    timeout: float = 10.0) -> PipelineConfig:
    """``config`` with the topics its ``topic_patterns`` take from the cluster's listing
    (core/config/discovery.py). Without patterns, ``config`` itself and no request to Kafka."""
    if not config.topic_patterns:
        return config
    return config.discover(list_topic_names(settings, timeout))


def watermarks(settings: KafkaSettings, topic: str, timeout: float = 10.0) -> list[PartitionWatermarks]:
    """Low and high watermark of every partition of ``topic``."""
    consumer = _consumer(settings)
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
_LEADERSHIP_MOVING = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._TRANSPORT, KafkaError._WAIT_COORD,
})


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
    admin = _admin(settings)
    try:
        meta = admin.list_topics(timeout=timeout)
    except KafkaException as error:
        raise KafkaReadError(
            f"listing the topics of {settings.bootstrap_servers}: {error}") from error
    tps = [
        TopicPartition(name, p)
        for name, info in sorted(meta.topics.items())
        if name in wanted and info.error is None
        for p in sorted(info.partitions)
    ]
    if not tps:
        return {}
    bounds = {}
    for which, spec in (("low", OffsetSpec.earliest()), ("high", OffsetSpec.latest())):
        futures = admin.list_offsets(
            {tp: spec for tp in tps}, isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=timeout,
        )
        try:
            bounds[which] = {
                (tp.topic, tp.partition): f.result().offset for tp, f in futures.items()
            }
        except KafkaException as e:
            raise KafkaReadError(
                f"listing {which} offsets of {', '.join(sorted(wanted))}: {e}"
            ) from e
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
                            f"offset {positions[tp]}: {err.str()}")
                    found[tp] = None
                    continue
                ts_type, ts = msg.timestamp()
                found[tp] = ts if ts_type != 0 and ts >= 0 else None
                # One message is all this partition owes: stop fetching it.
                consumer.pause([TopicPartition(*tp)])
    except KafkaException as e:
        raise KafkaReadError(f"reading the oldest unstaged messages of {len(positions)} "
                             f"partition(s): {e}") from e
    finally:
        consumer.close()
    return {tp: found.get(tp) for tp in positions}


class RangeReader:
    """One offset range ``topic[partition]`` ``[start, end_exclusive)`` read in ``consume()``
    batches, for stage loops that take whole batches (the native stage kernel) as well as
    message by message (:func:`read_range`).

    The loop hands every message it does not stage itself to :meth:`accept`, which applies
    the range's rules (a partition-EOF event ends the read; a Kafka error raises; a message
    past the range ends it) and advances :attr:`position`; messages a loop stages without
    asking (the kernel) are reported with :meth:`staged_through`. Offsets may be missing
    (compaction, transaction markers, aborted records); the read ends when the position
    reaches ``end_exclusive`` or at the end of the readable log (read_committed stops at the
    last stable offset). :attr:`covered` is then the exclusive end the caller commits.
    """

    def __init__(self, settings: KafkaSettings, topic: str, partition: int, start: int,
                 end_exclusive: int, batch_size: int = 10_000, idle_timeout: float = 30.0) -> None:  # fmt: skip
        self.settings = settings
        self.topic = topic
        self.partition = partition
        self.end_exclusive = end_exclusive
        self.batch_size = batch_size
        self.idle_timeout = idle_timeout
        self.position = start
        self.finished = False  # a message at or past the end was seen
        self._eof = False
        self.kafka_ts_max: int | None = None
        """The largest Kafka timestamp (ms) among the last in-range message of each batch:
        how far the range got on Kafka time, for completeness (core/completeness/decision.py). One
        look per batch, whichever stage path takes the batch, so both paths commit the same
        value; exact for LogAppendTime (monotone), a lower bound for CreateTime."""

    @property
    def covered(self) -> int:
        """The exclusive end of what was read: the offset to commit up to."""
        return min(self.position, self.end_exclusive)

    def batches(self) -> Iterator[Sequence[Message]]:
        """The consumed batches, raw (events included), until the range is read."""
        source = self._open()
        try:
            waiting_since = time.monotonic()
            while self.position < self.end_exclusive and not self.finished:
                # consume() returns when it has num_messages or its timeout passes, whatever
                # events it holds: never ask for more than the range still holds, and wait in
                # short polls. A range with gaps (transaction markers, compaction) holds fewer
                # messages than offsets, so its last batch is short of `want` even with the
                # partition-EOF event in it; one long wait would hold every such range for the
                # whole idle timeout.
                want = max(1, min(self.batch_size, self.end_exclusive - self.position))
                msgs = source.consume(want, min(POLL_SECONDS, self.idle_timeout))
                if not len(msgs):
                    if time.monotonic() - waiting_since < self.idle_timeout:
                        continue
                    self.position = source.position(self.position)
                    log.warning("%s[%d]: no message within %.0fs at offset %d (end %d)",
                                self.topic, self.partition, self.idle_timeout, self.position,
                                self.end_exclusive)
                    break
                waiting_since = time.monotonic()
                self._eof = False
                self._note_time(msgs)
                yield msgs
                if self._eof and not self.finished and self.position < self.end_exclusive:
                    self.position = source.position(self.position)
                    break
        except KafkaException as e:
            raise KafkaReadError(
                f"reading {self.topic}[{self.partition}] near offset {self.position}: {e}"
            ) from e
        finally:
            source.close()

    def _open(self) -> _BatchSource:
        """The consumer the batches come from, assigned at :attr:`position`."""
        return _ConfluentSource(self.settings, self.topic, self.partition, self.position)

    def accept(self, msg: Message) -> bool:
        """Whether ``msg`` is a message of the range to stage (the position then moves past
        it); False for the partition-EOF event and for a message past the range, which
        ends the read (:attr:`finished`). Raises :class:`KafkaReadError` for a Kafka error."""
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                self._eof = True
                return False
            raise KafkaReadError(
                f"reading {self.topic}[{self.partition}] near offset {self.position}: {err.str()}"
            )
        offset = msg.offset()
        if offset >= self.end_exclusive:
            self.position = self.end_exclusive
            self.finished = True
            return False
        self.position = offset + 1
        return True

    def _note_time(self, msgs: list[Message]) -> None:
        for msg in reversed(msgs):
            if msg.error() is None and self.position <= msg.offset() < self.end_exclusive:
                ts_type, ts = msg.timestamp()
                known = ts_type != 0 and ts >= 0
                if known and (self.kafka_ts_max is None or ts > self.kafka_ts_max):
                    self.kafka_ts_max = ts
                return

    def staged_through(self, offset: int) -> None:
        """A batch loop staged every message up to ``offset`` itself."""
        self.position = offset + 1


def read_range(
    settings: KafkaSettings,
    topic: str,
    partition: int,
    start: int,
    end_exclusive: int,
    batch_size: int = 10_000,
    idle_timeout: float = 30.0,
    position_out: list[int] | None = None,
) -> Iterator[Message]:
    """Messages of ``topic[partition]`` with offsets in ``[start, end_exclusive)``, one by one
    (:class:`RangeReader`'s rules). The position reached is appended to ``position_out`` so
    the caller commits exactly what was covered."""
    reader = RangeReader(settings, topic, partition, start, end_exclusive, batch_size, idle_timeout)
    batches = reader.batches()
    try:
        for batch in batches:
            for msg in batch:
                if reader.accept(msg):
                    yield msg
                elif reader.finished:
                    break
    finally:
        batches.close()
        if position_out is not None:
            position_out.append(reader.covered)


class _BatchSource(Protocol):
    """What :meth:`RangeReader.batches` reads from: confluent-kafka's consumer here, the
    native stage kernel's consumer in resources/kafka_native.py."""

    def consume(self, count: int, timeout: float) -> Sequence[Message]: ...

    def position(self, fallback: int) -> int: ...

    def close(self) -> None: ...


class _ConfluentSource:
    def __init__(self, settings: KafkaSettings, topic: str, partition: int, start: int) -> None:
        self.topic, self.partition = topic, partition
        self.consumer = _consumer(settings)
        self.consumer.assign([TopicPartition(topic, partition, start)])

    def consume(self, count: int, timeout: float) -> list[Message]:
        return self.consumer.consume(num_messages=count, timeout=timeout)

    def position(self, fallback: int) -> int:
        """Where the consumer stands: past transaction markers and compacted gaps."""
        pos = self.consumer.position([TopicPartition(self.topic, self.partition)])[0].offset
        return pos if pos is not None and pos >= 0 else fallback

    def close(self) -> None:
        self.consumer.close()
