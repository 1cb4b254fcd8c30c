"""Which due topics share one stage run, and the run's key: the fleet decisions of
``kafka_backlog_sensor`` (defs/staging/sensors.py) and ``kbqe run --until-idle``, pure.

A fleet holds hundreds of topics, most of them small. One run (one Spark job, one Dagster run)
per small topic would spend its time starting runs, not staging; so topics due at the same tick
share a run, up to ``stage_runs.max_topics_per_run`` topics and ``stage_runs.max_messages_per_run``
messages of backlog together. A topic whose backlog alone reaches that budget runs alone, so a
hot topic keeps its own run and its partitions their parallel ranges (each range is a Spark
task whatever run it belongs to).

Grouping is safe because the writer guard is per **range**, not per run: a range commits
through create-only done files (core/protocol/commit.py), so two runs over the same range commit it
once, whatever topics each run holds. The sensor still skips a topic while any stage run that
holds it is in flight (no wasted second writer), and ``dagster.yaml`` bounds how many stage runs
execute at once (tag ``kbqe/stage``).

A single-topic run keeps the run key, run config and tags it always had
(:func:`~kbqe_dagster.core.stage_runs.due.stage_run_key`), so runs launched by hand and the
run history of a topic read as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kbqe_dagster.core.config.sections import StageRunSettings
from kbqe_dagster.core.stage_runs.due import from_offsets, stage_run_key


@dataclass(frozen=True)
class DueTopic:
    """A topic whose stage run is due (core/stage_runs/due.py ``stage_due``)."""

    topic: str
    next_offsets: Mapping[int, int]
    lag: int
    reason: str


@dataclass(frozen=True)
class StageGroup:
    """The topics of one stage run, by name."""

    topics: tuple[DueTopic, ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(t.topic for t in self.topics)

    @property
    def lag(self) -> int:
        return sum(t.lag for t in self.topics)

    @property
    def group_id(self) -> str:
        """A digest of the topics and the offsets each starts from: equal for the same run
        asked twice, different as soon as one topic starts elsewhere."""
        text = "\n".join(f"{t.topic}|{from_offsets(t.next_offsets)}" for t in self.topics)
        return hashlib.sha256(text.encode()).hexdigest()[:20]

    def run_key(self, earlier_runs: int) -> str:
        """A single topic's key as ever; a group's: its digest and its earlier runs."""
        if len(self.topics) == 1:
            only = self.topics[0]
            return stage_run_key(only.topic, only.next_offsets, earlier_runs)
        return f"group|{self.group_id}|{earlier_runs}"

    @property
    def reason(self) -> str:
        if len(self.topics) == 1:
            return self.topics[0].reason
        return f"{len(self.topics)} topics due, backlog {self.lag} together"


def group_due_topics(due: Iterable[DueTopic], settings: StageRunSettings) -> list[StageGroup]:
    """Due topics packed into runs: hot topics (backlog >= the run budget) alone, the others
    by name into runs of at most ``max_topics_per_run`` topics and ``max_messages_per_run``
    messages of backlog together (a run always takes at least one topic)."""
    hot: list[DueTopic] = []
    small: list[DueTopic] = []
    for topic in sorted(due, key=lambda t: t.topic):
        (hot if topic.lag >= settings.max_messages_per_run else small).append(topic)
    groups = [StageGroup((topic,)) for topic in hot]
    current: list[DueTopic] = []
    for topic in small:
        full = len(current) >= settings.max_topics_per_run or (
            sum(t.lag for t in current) + topic.lag > settings.max_messages_per_run
        )
        if current and full:
            groups.append(StageGroup(tuple(current)))
            current = []
        current.append(topic)
    if current:
        groups.append(StageGroup(tuple(current)))
    return groups


TOPICS_SEPARATOR = ","
"""Between topic names in the ``kbqe/topics`` tag (Kafka topic names never hold a comma)."""


def join_topics(topics: Sequence[str]) -> str:
    return TOPICS_SEPARATOR.join(topics)


def split_topics(tag: str | None) -> tuple[str, ...]:
    return tuple(t for t in (tag or "").split(TOPICS_SEPARATOR) if t)


def yielded_topics(
    mine: int, topics: Iterable[str], in_flight: Iterable[tuple[int, Iterable[str]]]
) -> frozenset[str]:
    """Of ``topics`` (a run's, ``mine`` its order of creation), those an older run in flight
    holds: this run leaves them alone. One run prepares and stages a topic at a time, because
    a run's preparation deletes avro files that have no done file (DESIGN.md §3) and must not
    take another run's upload in flight for a crash leftover. The oldest run wins, so two runs
    that see each other never both stage a topic and never both drop it; the per-range
    create-only commit stays the guard against zombies of runs no longer in flight."""
    wanted = set(topics)
    return frozenset(
        topic for order, held in in_flight if order < mine for topic in held if topic in wanted
    )
