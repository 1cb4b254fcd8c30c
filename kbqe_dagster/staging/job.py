"""One stage run on Spark — of one topic, or of a group of topics (core/stage_runs/groups.py):
prepare on the driver, one task per offset range.

Spark is the unit of parallelism (DESIGN.md §8): every planned range becomes a partition of
an RDD whose task consumes exactly that range on an executor and commits it. A grouped run
puts the ranges of all its topics into one RDD, so a fleet of small topics costs one Spark
job, not one per topic; each range still commits alone (create-only done files), so nothing
about exactly-once depends on which topics share a run. The driver never sees a message;
tasks return small :class:`RangeResult` summaries.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.core.protocol.delivery import pinned_tables
from kbqe_dagster.core.protocol.offsets import OffsetRange, Watermarks
from kbqe_dagster.resources.kafka.clients import TopicMissing
from kbqe_dagster.resources.kafka.cluster import watermarks_of
from kbqe_dagster.staging.context import RangeResult, StageContext
from kbqe_dagster.staging.prepare import Preparation, prepare_topic
from kbqe_dagster.staging.task import stage_range

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


def run_stage(
    spark_context, ctx: StageContext, *, max_messages_per_run: int, max_messages_per_range: int
) -> StageSummary:
    """Stage everything planned for ``ctx.topic.name``; a failed range fails the run after
    every other range had its chance (their commits stand; the failed one is redone next run)."""
    started = time.monotonic()
    topic = ctx.topic.name
    store = ctx.staging.open()
    prep = prepare_topic(
        store,
        ctx.kafka,
        topic,
        max_messages_per_run=max_messages_per_run,
        max_messages_per_range=max_messages_per_range,
        start_policy=ctx.start_policy,
        **_deliveries(ctx, topic),
    )
    ctx = _pinned(ctx, [prep])
    ranges = list(prep.plan.ranges)
    log.info(
        "%s: %d orphan(s) deleted, %d done file(s) rolled forward, %d range(s) planned",
        topic,
        len(prep.orphans_deleted),
        len(prep.rolled_forward),
        len(ranges),
    )
    if not ranges:
        return StageSummary(topic, prep, (), time.monotonic() - started)
    outcomes = (
        spark_context.parallelize(ranges, len(ranges))
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


def run_stage_group(
    spark_context,
    ctx: StageContext,
    topics: Sequence[str],
    *,
    marks: Mapping[tuple[str, int], Watermarks] | None = None,
) -> tuple[StageSummary, ...]:
    """Stage everything planned for each of ``topics`` in **one** Spark job: one summary per
    topic staged, in order. ``ctx.topic_name`` is ignored (each range is staged with its own
    topic's settings). The watermarks of all topics are read in one request; each topic is
    then prepared as in :func:`run_stage` (its own listing, roll forward, orphans, plan, with
    its own ``staging.max_messages_per_run`` and ``max_messages_per_range``).

    A topic Kafka does not hold (not created yet, or deleted since the tick) is skipped with a
    warning naming it and has no summary; the other topics are staged. A failed range fails the
    run after every other range of every topic had its chance (their commits stand; the failed
    one is redone next run).

    ``marks``: the topics' watermarks when the caller read them already (the stage loop,
    staging/stage_loop.py, reads them to tell an idle round from a busy one)."""
    started = time.monotonic()
    store = ctx.staging.open()
    if marks is None:
        marks = {
            tp: Watermarks(w.low, w.high) for tp, w in watermarks_of(ctx.kafka, topics).items()
        }
    by_topic: dict[str, dict[tuple[str, int], Watermarks]] = {}
    for tp, mark in marks.items():
        by_topic.setdefault(tp[0], {})[tp] = mark
    preps: dict[str, Preparation] = {}
    failures: list[str] = []
    for topic in dict.fromkeys(topics):
        if topic not in by_topic:
            log.warning("not staged: %s", TopicMissing(topic))
            continue
        settings = replace(ctx, topic_name=topic).topic
        preps[topic] = prepare_topic(
            store,
            ctx.kafka,
            topic,
            max_messages_per_run=settings.staging.max_messages_per_run,
            max_messages_per_range=settings.staging.max_messages_per_range,
            start_policy=settings.staging.start_offset,
            marks=by_topic[topic],
            **_deliveries(ctx, topic),
        )
    ctx = _pinned(ctx, preps.values())
    ranges = [rng for prep in preps.values() for rng in prep.plan.ranges]
    log.info("%d topic(s), %d range(s) planned in one Spark job", len(preps), len(ranges))
    outcomes = (
        (
            spark_context.parallelize(ranges, len(ranges))
            .map(lambda rng: _stage_or_report(replace(ctx, topic_name=rng.topic), rng))
            .collect()
        )
        if ranges
        else []
    )
    seconds = time.monotonic() - started
    summaries = []
    for topic, prep in preps.items():
        mine = [o for rng, o in zip(ranges, outcomes) if rng.topic == topic]
        failed = tuple(o for o in mine if isinstance(o, str))
        failures.extend(failed)
        summaries.append(
            StageSummary(
                topic, prep, tuple(o for o in mine if isinstance(o, RangeResult)), seconds, failed
            )
        )
    if failures:
        raise StagingError(
            f"{len(failures)} failure(s) in a stage run of {len(topics)} topic(s) (the other "
            "ranges are committed; the failed ones are redone by the next run):\n  "
            + "\n  ".join(failures)
        )
    return tuple(summaries)


def _pinned(ctx: StageContext, preps: Iterable[Preparation]) -> StageContext:
    """``ctx`` whose sink delivers the tables of the open Storage Write intents this run
    restages as those intents say (``pinned_tables``), whatever the pipeline file says now:
    a table switched between ``storage_write`` and ``load`` switches at a range boundary."""
    intents = tuple(i for prep in preps for i in prep.open_intents)
    if not intents:
        return ctx
    pinning = getattr(ctx.sink, "pinning", None)
    if pinning is None:
        raise StagingError(
            f"open Storage Write intent(s) {', '.join(i.name for i in intents[:5])}: their "
            "ranges must be restaged through the Storage Write API (rows of them may be in "
            "the table already), but this stage run has no delivery sink (no Storage Write "
            "settings: resources/environment.py builds them)"
        )
    return replace(ctx, sink=pinning(pinned_tables(intents)))


def _deliveries(ctx: StageContext, topic: str) -> dict:
    """Preparation options of a topic that may write a ``delivery: storage_write`` table: one
    range per partition (core/protocol/delivery.py); none for any other topic."""
    if ctx.pipeline.topic_may_deliver_by_storage_write(topic):
        return {"one_range_per_partition": True}
    return {}


def _stage_or_report(ctx: StageContext, rng: OffsetRange) -> RangeResult | str:
    """Runs on an executor. Errors come back as text naming the range, so one bad range does
    not hide the outcome of the others."""
    try:
        return stage_range(ctx, rng)
    except Exception as e:  # reported to the driver, which fails the run
        return f"{rng}: {type(e).__name__}: {e}"
