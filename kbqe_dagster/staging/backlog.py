"""How far behind a topic is: what Kafka holds beyond the committed done files.

Shared by the sensor that launches stage runs, the lag observations of ``kafka/<topic>``,
the metrics and ``kbqe run``. Read-only: nothing is written or deleted here (the stage run's
preparation does that), so it is safe on every sensor tick. :func:`fleet_backlog` reads every
topic at once in a bounded number of calls (a fleet of hundreds of topics);
:func:`topic_backlog` one topic.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from kbqe_dagster.core.protocol.naming import parse_name
from kbqe_dagster.core.protocol.offsets import StartPolicy, Watermarks, plan_ranges, recover
from kbqe_dagster.resources.kafka.clients import (
    KafkaSettings,
    TopicMissing,
)
from kbqe_dagster.resources.kafka.cluster import (
    first_timestamps_ms,
    oldest_timestamp_ms,
    watermarks,
    watermarks_of,
)
from kbqe_dagster.resources.staging_store import StagingStore
from kbqe_dagster.staging.prepare import topic_file_names

_UNBOUNDED = 1 << 62


@dataclass(frozen=True)
class PartitionBacklog:
    partition: int
    low: int
    high: int
    next_offset: int
    lag: int


@dataclass(frozen=True)
class TopicBacklog:
    topic: str
    partitions: tuple[PartitionBacklog, ...]
    oldest_unstaged_ms: int | None  # Kafka timestamp of the oldest unstaged message

    @property
    def lag(self) -> int:
        return sum(p.lag for p in self.partitions)

    @property
    def next_offsets(self) -> dict[int, int]:
        return {p.partition: p.next_offset for p in self.partitions}


def _backlog_of(
    topic: str,
    names: Iterable[str],
    marks: Mapping[tuple[str, int], Watermarks],
    start_policy: StartPolicy,
) -> TopicBacklog:
    """Lag per partition from the topic's staging names and its watermarks (no oldest time)."""
    plan = plan_ranges(
        recover(names),
        marks,
        max_messages_per_run=_UNBOUNDED,
        max_messages_per_range=_UNBOUNDED,
        start_policy=start_policy,
    )
    partitions = []
    for p in plan.partitions:
        mark = marks[(p.topic, p.partition)]
        partitions.append(
            PartitionBacklog(p.partition, mark.low, mark.high, p.resume_offset, p.planned_messages)
        )
    return TopicBacklog(topic, tuple(partitions), None)


def topic_backlog(
    store: StagingStore,
    kafka: KafkaSettings,
    topic: str,
    start_policy: StartPolicy = StartPolicy.EARLIEST,
    with_oldest: bool = True,
) -> TopicBacklog:
    names, _ = topic_file_names(store, topic)
    marks = {(w.topic, w.partition): Watermarks(w.low, w.high) for w in watermarks(kafka, topic)}
    backlog = _backlog_of(topic, names, marks, start_policy)
    partitions = backlog.partitions
    oldest = None
    if with_oldest:
        stamps = [
            oldest_timestamp_ms(kafka, topic, p.partition, p.next_offset)
            for p in partitions
            if p.lag > 0
        ]
        known = [s for s in stamps if s is not None]
        oldest = min(known) if known else None
    return TopicBacklog(topic, tuple(partitions), oldest)


def staging_names_by_topic(store: StagingStore, topics: Iterable[str]) -> dict[str, list[str]]:
    """The staging names of each of ``topics`` from **one** listing of the staging area, under
    the topics' longest common prefix (a fleet discovered by ``shop\\..*`` lists ``shop.``).
    What a tick lists is the done files (retention keeps about one per partition) plus the
    avro files waiting for a load: it grows with the partitions and what is pending, not with
    the history."""
    wanted = set(topics)
    by_topic: dict[str, list[str]] = {t: [] for t in wanted}
    if not wanted:
        return by_topic
    for stored in store.list(os.path.commonprefix(sorted(wanted))):
        parsed = parse_name(stored.name)
        if parsed is not None and parsed.key.topic in wanted:
            by_topic[parsed.key.topic].append(stored.name)
    return by_topic


Wanted = Callable[[TopicBacklog], bool]


def fleet_backlog(
    store: StagingStore,
    kafka: KafkaSettings,
    topics: Mapping[str, StartPolicy],
    *,
    oldest_wanted: Wanted = lambda backlog: True,
) -> dict[str, TopicBacklog | TopicMissing]:
    """:func:`topic_backlog` of many topics in a bounded number of calls whatever their
    number: one staging listing, one metadata request plus one ListOffsets request per bound
    for every partition (``watermarks_of``), and one consumer reading one message per
    partition whose oldest unstaged time is wanted (``first_timestamps_ms``).

    ``oldest_wanted(backlog)`` says whether a topic's oldest unstaged time is needed (the
    sensor asks only for topics whose backlog is below the size trigger: a full batch is due
    whatever its age). A topic Kafka does not hold (not created yet, deleted) maps to a
    :class:`TopicMissing`, its reason: the other topics are read all the same."""
    names = staging_names_by_topic(store, topics)
    marks = {tp: Watermarks(w.low, w.high) for tp, w in watermarks_of(kafka, topics).items()}
    by_topic: dict[str, dict[tuple[str, int], Watermarks]] = defaultdict(dict)
    for tp, mark in marks.items():
        by_topic[tp[0]][tp] = mark
    out: dict[str, TopicBacklog | TopicMissing] = {}
    for topic, policy in topics.items():
        if topic not in by_topic:
            out[topic] = TopicMissing(topic)
            continue
        out[topic] = _backlog_of(topic, names[topic], by_topic[topic], policy)
    positions = {
        (topic, p.partition): p.next_offset
        for topic, backlog in out.items()
        if isinstance(backlog, TopicBacklog) and backlog.lag > 0 and oldest_wanted(backlog)
        for p in backlog.partitions
        if p.lag > 0
    }
    stamps = first_timestamps_ms(kafka, positions)
    oldest: dict[str, int] = {}
    for (topic, _), stamp in stamps.items():
        if stamp is not None:
            oldest[topic] = min(stamp, oldest.get(topic, stamp))
    for topic, stamp in oldest.items():
        backlog = out[topic]
        out[topic] = TopicBacklog(topic, backlog.partitions, stamp)
    return out
