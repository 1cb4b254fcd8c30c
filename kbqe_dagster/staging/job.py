"""One stage run of one topic on Spark: prepare on the driver, one task per offset range.

Spark is the unit of parallelism (DESIGN.md §8): every planned range becomes a partition of
an RDD whose task consumes exactly that range on an executor and commits it. The driver
never sees a message; tasks return small :class:`RangeResult` summaries.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field

from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.core.offsets import OffsetRange
from kbqe_dagster.staging.prepare import Preparation, prepare_topic
from kbqe_dagster.staging.task import RangeResult, StageContext, stage_range

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageSummary:
    topic: str
    preparation: Preparation
    results: tuple[RangeResult, ...]
    seconds: float
    failures: tuple[str, ...] = field(default_factory=tuple)

    @property
    def records(self) -> int:
        return sum(r.records for r in self.results)

    @property
    def messages(self) -> int:
        return sum(r.messages for r in self.results)

    @property
    def bytes_written(self) -> int:
        return sum(r.bytes_written for r in self.results)

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(name for r in self.results for name, _ in r.files)

    @property
    def dead_letters(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for r in self.results:
            total.update(r.dead_letters)
        return dict(total)

    @property
    def skipped(self) -> dict[str, int]:
        total: Counter[str] = Counter()
        for r in self.results:
            total.update(r.skipped)
        return dict(total)

    @property
    def stage_path(self) -> str:
        """Which stage path staged the ranges: ``native``, ``python`` or both (``native+python``)."""
        return "+".join(sorted({r.stage_path for r in self.results}, reverse=True)) or "none"

    @property
    def reader(self) -> str:
        """Which Kafka reader read the ranges: ``native`` (the kernel's own consumer),
        ``confluent-kafka`` or both."""
        return "+".join(sorted({r.reader for r in self.results}, reverse=True)) or "none"

    @property
    def kernel_handbacks(self) -> dict[str, int]:
        """Messages the native kernel handed to the Python path, by why."""
        total: Counter[str] = Counter()
        for r in self.results:
            total.update(r.kernel_handbacks)
        return dict(total)

    @property
    def tombstones(self) -> int:
        return sum(r.tombstones for r in self.results)

    @property
    def committed_ranges(self) -> tuple[str, ...]:
        return tuple(
            f"{r.topic}[{r.partition}] {r.start}..{r.committed_last}"
            for r in self.results
            if r.committed_last is not None
        )


def run_stage(spark_session, ctx: StageContext, *, max_messages_per_run: int,
              max_messages_per_range: int) -> StageSummary:
    """Stage everything planned for ``ctx.topic.name``; a failed range fails the run after
    every other range had its chance (their commits stand; the failed one is redone next run)."""
    started = time.monotonic()
    topic = ctx.topic.name
    store = ctx.staging.open()
    prep = prepare_topic(
        store, ctx.kafka, topic,
        max_messages_per_run=max_messages_per_run,
        max_messages_per_range=max_messages_per_range,
        start_policy=ctx.start_policy,
    )
    ranges = list(prep.plan.ranges)
    log.info("%s: %d orphan(s) deleted, %d done file(s) rolled forward, %d range(s) planned",
             topic, len(prep.orphans_deleted), len(prep.rolled_forward), len(ranges))
    if not ranges:
        return StageSummary(topic, prep, (), time.monotonic() - started)
    outcomes = (
        spark_session.sparkContext.parallelize(ranges, len(ranges))
        .map(lambda rng: _stage_or_report(ctx, rng))
        .collect()
    )
    results = tuple(o for o in outcomes if isinstance(o, RangeResult))
    failures = tuple(o for o in outcomes if isinstance(o, str))
    summary = StageSummary(topic, prep, results, time.monotonic() - started, failures)
    if failures:
        raise StagingError(
            f"{topic}: {len(failures)} of {len(ranges)} range(s) failed (the others are "
            "committed; the failed ones are redone by the next run):\n  " + "\n  ".join(failures)
        )
    return summary


def _stage_or_report(ctx: StageContext, rng: OffsetRange) -> RangeResult | str:
    """Runs on an executor. Errors come back as text naming the range, so one bad range does
    not hide the outcome of the others."""
    try:
        return stage_range(ctx, rng)
    except Exception as e:  # reported to the driver, which fails the run
        return f"{rng}: {type(e).__name__}: {e}"
