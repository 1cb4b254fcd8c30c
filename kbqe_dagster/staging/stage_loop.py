"""The stage loop: one long run that keeps staging a set of topics every ~second (the topics
that may write a ``delivery: storage_write`` table, whose rows are appended as each range
commits — their freshness is how often ranges are staged).

A stage run pays its start-up (a process, the code, a SparkSession) once per run; the loop
pays it once per loop run and then, each round, only what the round needs:

* an **idle round** (every partition's high watermark equals the position staged up to) is
  one watermarks request (``watermarks_of``: one metadata request plus one ListOffsets per
  bound for every partition) and no listing, no Spark job;
* a **busy round** stages the topics with something new through :func:`~kbqe_dagster.staging.
  job.run_stage_group` (their preparation, one Spark job), reusing the watermarks read.

The positions come from the previous round's summaries, not from the staging area: the loop
is the only writer of its topics while it runs (defs/staging/claims.py), and whatever it
cannot vouch for (the first round, a range that committed nothing, a new partition) makes the
topic busy again, so its preparation reads the staging area. ``should_stop`` is asked between
rounds, never mid-range; a range cut by a kill is rolled forward by the next run's preparation
(core/protocol/delivery.py).

No dagster here: defs/staging/loop_run.py wires it into a run (its termination, its events); the
latency benchmark calls :func:`run_stage_loop` in-process.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.protocol.offsets import RangePlan, Watermarks
from kbqe_dagster.resources.kafka.cluster import watermarks_of
from kbqe_dagster.staging.context import RangeResult, StageContext
from kbqe_dagster.staging.job import StageSummary, run_stage_group
from kbqe_dagster.staging.prepare import Preparation
from kbqe_dagster.staging.range_sink import TableDelivery

log = logging.getLogger(__name__)

TopicPartition = tuple[str, int]
Marks = Mapping[TopicPartition, Watermarks]

TERMINATED = "terminated"
MAX_RUN_S = "max_run_s"
CONFIG_CHANGED = "config_changed"


@dataclass(frozen=True)
class LoopSettings:
    """How a loop run paces itself."""

    interval_s: float = 1.0
    """Minimum time between the starts of two rounds (a topic's ``staging.loop_interval``)."""
    max_run_s: float = 3600.0
    """The run ends by itself after this (its sensor relaunches it: a deploy is picked up, any
    leak bounded). No round starts after it."""
    report_every_s: float = 30.0
    """How often the Dagster wiring flushes the rounds' events (not read by the loop itself)."""


@dataclass(frozen=True)
class LoopRound:
    number: int
    started_at: float
    """``time.time()`` at the round's start."""
    seconds: float
    summaries: tuple[StageSummary, ...]
    """One per topic staged by the round (empty: an idle round), as run_stage_group returns."""
    marks: Marks = field(default_factory=dict)
    """The watermarks the round read (every partition of the loop's topics Kafka holds)."""
    positions: Mapping[TopicPartition, int] = field(default_factory=dict)
    """Where each partition is staged up to after the round, as far as the loop knows (a
    partition absent: its topic is prepared again next round)."""

    def lag(self, topic: str) -> dict[int, int]:
        """Messages of ``topic`` per partition in Kafka at the round's start and not staged
        after it (a partition whose position is unknown counts from its low watermark)."""
        return {
            p: max(mark.high - self.positions.get((t, p), mark.low), 0)
            for (t, p), mark in sorted(self.marks.items())
            if t == topic
        }

    @property
    def idle(self) -> bool:
        """Nothing was due: no preparation, no Spark job (a busy round whose topics Kafka no
        longer holds has no summary either, but it is rare enough to count as idle here)."""
        return not self.summaries


@dataclass(frozen=True)
class LoopOutcome:
    rounds: int
    idle_rounds: int
    """Rounds that found nothing to stage: no preparation, no Spark job."""
    stopped_because: str
    """``terminated``, ``max_run_s``, ``config_changed``, or whatever ``should_stop`` said."""
    summaries: tuple[StageSummary, ...]
    """Everything the run staged, round after round (for its final materialization)."""
    idle_seconds: float = 0.0
    """Time spent in idle rounds (their fixed cost: divide by ``idle_rounds``)."""
    busy_seconds: float = 0.0
    """Time spent in busy rounds."""


StageFn = Callable[..., tuple[StageSummary, ...]]
MarksFn = Callable[[StageContext, Sequence[str]], Marks]


def read_marks(ctx: StageContext, topics: Sequence[str]) -> Marks:
    """Every partition's watermarks of ``topics`` in one request (absent: a topic Kafka does
    not hold)."""
    return {tp: Watermarks(w.low, w.high) for tp, w in watermarks_of(ctx.kafka, topics).items()}


def staged_positions(summaries: Iterable[StageSummary]) -> dict[TopicPartition, int]:
    """The offset each partition is staged up to (exclusive) after a round, as far as the
    round's summaries vouch for it: the end of its last committed range, or its resume
    offset when nothing was planned. A partition whose planned ranges committed nothing is
    absent (unknown: the next round prepares its topic again)."""
    positions: dict[TopicPartition, int] = {}
    for summary in summaries:
        planned = {(r.topic, r.partition) for r in summary.preparation.plan.ranges}
        for p in summary.preparation.plan.partitions:
            if (p.topic, p.partition) not in planned:
                positions[(p.topic, p.partition)] = p.resume_offset
        for result in summary.results:
            if result.committed_last is not None:
                tp = (result.topic, result.partition)
                positions[tp] = max(positions.get(tp, 0), result.committed_last + 1)
    return positions


def due_topics(
    topics: Sequence[str], marks: Marks, positions: Mapping[TopicPartition, int]
) -> list[str]:
    """The topics with a partition whose high watermark is not the position staged up to (or
    whose position is unknown). A topic Kafka does not hold has no watermarks: not due (its
    next appearance makes it due, its partitions being unknown)."""
    due = {tp[0] for tp, mark in marks.items() if positions.get(tp) != mark.high}
    return [t for t in topics if t in due]


def run_stage_loop(
    spark_context,
    ctx: StageContext,
    topics: Sequence[str],
    settings: LoopSettings,
    *,
    should_stop: Callable[[], str | None],
    on_round: Callable[[LoopRound], None] = lambda r: None,
    stage: StageFn = run_stage_group,
    marks_of: MarksFn = read_marks,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> LoopOutcome:
    """Stage ``topics`` round after round until ``should_stop()`` names a reason (asked before
    every round) or ``settings.max_run_s`` has passed; ``on_round`` sees every round, idle or
    busy. A failed range raises from :func:`run_stage_group` (the others are committed; the
    run fails and its sensor relaunches it), after ``on_round`` saw every earlier round.

    ``stage``, ``marks_of``, ``clock`` and ``sleep`` are seams for tests."""
    topics = list(dict.fromkeys(topics))
    started = clock()
    positions: dict[TopicPartition, int] = {}
    summaries: list[StageSummary] = []
    rounds = idle_rounds = 0
    idle_seconds = busy_seconds = 0.0
    next_start = started
    while True:
        wait = max(next_start - clock(), 0.0)
        if clock() + wait - started >= settings.max_run_s:
            reason = MAX_RUN_S
            break
        if wait:
            sleep(wait)
        # Asked after the wait, right before the round: a termination ends the loop within
        # one round, never mid-range.
        reason = should_stop()
        if reason is not None:
            break
        round_start = clock()
        next_start = round_start + settings.interval_s
        wall_start = time.time()
        marks = marks_of(ctx, topics)
        due = due_topics(topics, marks, positions)
        staged: tuple[StageSummary, ...] = ()
        if due:
            staged = stage(
                spark_context, ctx, due, marks={tp: m for tp, m in marks.items() if tp[0] in due}
            )
            positions.update(staged_positions(staged))
            summaries.extend(staged)
        rounds += 1
        seconds = clock() - round_start
        if due:
            busy_seconds += seconds
            log.info(
                "stage loop round %d: %d record(s) of %s in %.3fs",
                rounds,
                sum(s.records for s in staged),
                ", ".join(due),
                seconds,
            )
        else:
            idle_rounds += 1
            idle_seconds += seconds
            log.debug("stage loop round %d: idle in %.3fs", rounds, seconds)
        on_round(LoopRound(rounds, wall_start, seconds, staged, marks, dict(positions)))
    log.info(
        "stage loop of %s stopped (%s) after %d round(s), %d idle (%.3fs idle, %.3fs busy)",
        ", ".join(topics),
        reason,
        rounds,
        idle_rounds,
        idle_seconds,
        busy_seconds,
    )
    return LoopOutcome(rounds, idle_rounds, reason, tuple(summaries), idle_seconds, busy_seconds)


def fold_rounds(summaries: Iterable[StageSummary]) -> tuple[StageSummary, ...]:
    """The summaries of many rounds as one per topic, for what a loop run reports every
    ``report_every_s`` and at its end: a partition's consecutive committed ranges become one
    range (and their Storage Write deliveries to a table, one delivery per contiguous run of
    stream rows), so the events and metadata grow with the partitions, not with the rounds.
    Counts are summed; ``seconds`` is the time the rounds spent staging."""
    by_topic: dict[str, list[StageSummary]] = {}
    for summary in summaries:
        by_topic.setdefault(summary.topic, []).append(summary)
    return tuple(_fold_topic(topic, mine) for topic, mine in by_topic.items())


def _fold_topic(topic: str, summaries: list[StageSummary]) -> StageSummary:
    results: list[RangeResult] = []
    for result in sorted(
        (r for s in summaries for r in s.results), key=lambda r: (r.partition, r.start)
    ):
        last = results[-1] if results else None
        if (
            last is not None
            and last.partition == result.partition
            and last.committed_last is not None
            and result.committed_last is not None
            and result.start == last.committed_last + 1
        ):
            results[-1] = _fold_results(last, result)
        else:
            results.append(result)
    preps = [s.preparation for s in summaries]
    prep = Preparation(
        rolled_forward=tuple(n for p in preps for n in p.rolled_forward),
        orphans_deleted=tuple(n for p in preps for n in p.orphans_deleted),
        # Listed again by every round that prepares the topic: each name once.
        unrecognized=tuple(dict.fromkeys(n for p in preps for n in p.unrecognized)),
        # Only what the metadata reads of a plan: the partitions that lost offsets.
        plan=RangePlan((), tuple(part for p in preps for part in p.plan.partitions if part.lost)),
        missing=preps[-1].missing,
        open_intents=tuple(dict.fromkeys(i for p in preps for i in p.open_intents)),
    )
    return StageSummary(
        topic,
        prep,
        tuple(results),
        sum(s.seconds for s in summaries),
        tuple(f for s in summaries for f in s.failures),
    )


def _fold_results(a: RangeResult, b: RangeResult) -> RangeResult:
    """Two consecutive committed ranges of one partition as one."""
    return replace(
        a,
        planned_last=b.planned_last,
        committed_last=b.committed_last,
        messages=a.messages + b.messages,
        records=a.records + b.records,
        files=a.files + b.files,
        bytes_written=a.bytes_written + b.bytes_written,
        dead_letters=_sum(a.dead_letters, b.dead_letters),
        skipped=_sum(a.skipped, b.skipped),
        conflict=a.conflict or b.conflict,
        seconds=a.seconds + b.seconds,
        bytes_by_dataset=_sum(a.bytes_by_dataset, b.bytes_by_dataset),
        tombstones=a.tombstones + b.tombstones,
        stage_path="+".join(
            sorted({*a.stage_path.split("+"), *b.stage_path.split("+")}, reverse=True)
        ),
        kernel_handbacks=_sum(a.kernel_handbacks, b.kernel_handbacks),
        reader="+".join(sorted({*a.reader.split("+"), *b.reader.split("+")}, reverse=True)),
        delivered=_fold_deliveries(a.delivered + b.delivered),
    )


def _fold_deliveries(deliveries: tuple[TableDelivery, ...]) -> tuple[TableDelivery, ...]:
    """Deliveries of consecutive ranges: one per table and contiguous run of stream rows."""
    out: list[TableDelivery] = []
    for d in deliveries:
        i = next(
            (
                i
                for i, o in enumerate(out)
                if (o.dataset, o.table, o.stream) == (d.dataset, d.table, d.stream)
                and d.first_row == o.first_row + o.rows
            ),
            None,
        )
        if i is None:
            out.append(d)
            continue
        o = out[i]
        out[i] = replace(
            o,
            rows=o.rows + d.rows,
            records=o.records + d.records,
            refused=o.refused + d.refused,
            bytes=o.bytes + d.bytes,
            days=tuple(sorted(_sum(dict(o.days), dict(d.days)).items())),
            requests=o.requests + d.requests,
            skipped_requests=o.skipped_requests + d.skipped_requests,
        )
    return tuple(out)


def _sum(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    total = Counter(a)
    total.update(b)
    return dict(total)


def loop_topics(config: PipelineConfig) -> list[str]:
    """The topics the stage loop stages under the daemon: those that may write a ``delivery:
    storage_write`` table (their rows are appended as each range commits, so staging often is
    what makes them fresh)."""
    return [t for t in config.topic_names if config.topic_may_deliver_by_storage_write(t)]


def loop_interval_s(config: PipelineConfig, topics: Iterable[str]) -> float:
    """The shortest ``staging.loop_interval`` of ``topics`` (one loop paces them all)."""
    return min(
        (config.topic(t).staging.loop_interval.total_seconds() for t in topics),
        default=LoopSettings.interval_s,
    )


def warm_up(spark_context, ctx: StageContext) -> float:
    """One Spark job of a task per slot that unpickles the stage context (importing its
    stager chooser and sink) and the stage task's module, so the loop's first busy round
    does not pay Spark's first job and the executors' imports (about 5 s on the local
    stack). Returns its seconds."""
    started = time.monotonic()
    slots = max(int(spark_context.defaultParallelism), 1)
    spark_context.parallelize(range(slots), slots).map(lambda _: _warm(ctx)).collect()
    return time.monotonic() - started


def _warm(ctx: StageContext) -> int:
    """Runs on an executor: what a stage task imports first."""
    import kbqe_dagster.staging.task  # noqa: F401 - the import is the point

    return 0 if ctx.stager_for is None else 1
