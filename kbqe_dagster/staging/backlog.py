"""How far behind a topic is: what Kafka holds beyond the committed done files.

Shared by the sensor that launches stage runs, the lag observations of ``kafka/<topic>``
and the CLI. Read-only: nothing is written or deleted here (the stage run's preparation does
that), so it is safe on every sensor tick.
"""

from __future__ import annotations

from dataclasses import dataclass

from kbqe_dagster.core.offsets import StartPolicy, Watermarks, plan_ranges, recover
from kbqe_dagster.resources.kafka import KafkaSettings, oldest_timestamp_ms, watermarks
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


def topic_backlog(
    store: StagingStore,
    kafka: KafkaSettings,
    topic: str,
    start_policy: StartPolicy = StartPolicy.EARLIEST,
    with_oldest: bool = True,
) -> TopicBacklog:
    names, _ = topic_file_names(store, topic)
    marks = {(w.topic, w.partition): Watermarks(w.low, w.high) for w in watermarks(kafka, topic)}
    plan = plan_ranges(
        recover(names), marks, max_messages_per_run=_UNBOUNDED,
        max_messages_per_range=_UNBOUNDED, start_policy=start_policy,
    )
    partitions = []
    for p in plan.partitions:
        mark = marks[(p.topic, p.partition)]
        partitions.append(
            PartitionBacklog(p.partition, mark.low, mark.high, p.resume_offset, p.planned_messages)
        )
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
