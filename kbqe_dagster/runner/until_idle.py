"""The loop of ``kbqe run --until-idle`` and when it stops.

A round: stage every topic that has a backlog (small topics share a run, as the sensor groups
them: core/stage_runs/groups.py ``stage_runs``), run a load cycle if
anything is loadable or pending, poll until no load job is pending, then run the after-load
steps. A round that staged nothing, loaded nothing and whose steps ask for nothing more
proves the pipeline idle: the run ends, ``ok`` unless something failed or is quarantined.
Nothing waits for ``allowed_latency`` or the load cadence: a catch-up stages everything now.

Stops early, with a one-line reason:
- a load or poll run fails, polling outlasts ``poll_timeout_s``, or a step reports an error;
- after ``max_rounds`` rounds without becoming idle (the reason says what is left).

A configured topic Kafka does not hold (not created yet, or deleted) is skipped with a one-line
reason and reported ``missing`` in the topic's totals; it fails nothing.

A stage run that fails, or succeeds without committing a range while its topic has a backlog
(no progress: another run would do the same), fails that topic only; the others are staged
and loaded to the end, then the run exits non-zero naming it. A grouped run that fails does
not say which topic failed: its topics are staged one run each from the next round on, and
only a topic whose own run fails is failed (the ranges the grouped run committed stand).
Quarantined files (the load coordinator gave up on them) make the run fail too, once
everything else is loaded.

After the last round, whatever ended it, completeness is evaluated once, as
``completeness_sensor`` evaluates it (one function for both): complete days are declared, late
records counted, the kept state written. A run from cron thus keeps completeness without the
daemon. An evaluation that fails (Kafka unreachable) fails the run, unless it already failed.

No Dagster here: the loop drives a :class:`Pipeline` (``in_process.py`` executes the jobs).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kbqe_dagster.core.errors import KbqeError
from kbqe_dagster.core.stage_runs.groups import DueTopic, StageGroup, group_due_topics
from kbqe_dagster.runner.after_load import AfterLoadContext, AfterLoadStep, JobRun
from kbqe_dagster.runner.after_load_steps import AFTER_LOAD_STEPS
from kbqe_dagster.runner.report import (
    LoadOutcome,
    StageOutcome,
    TableCompleteness,
    TableLoad,
    TopicTotals,
    UntilIdleReport,
)

if TYPE_CHECKING:  # annotations only: `kbqe --help` must not import the config model
    from kbqe_dagster.core.config.pipeline import PipelineConfig

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Backlog:
    """What Kafka holds beyond a topic's committed done files."""

    lag: int
    next_offsets: Mapping[int, int]
    missing: str | None = None
    """Why there is nothing to stage when Kafka does not hold the topic (not created yet, or
    deleted): a state the run reports, not a failure."""

    def offsets(self) -> str:
        return ",".join(f"{p}={o}" for p, o in sorted(self.next_offsets.items()))


@dataclass(frozen=True)
class LoadSide:
    """The load state and the staging listing, as the next load cycle would see them."""

    pending_jobs: tuple[str, ...] = ()
    loadable_files: int = 0
    quarantined_tables: tuple[str, ...] = ()

    @property
    def busy(self) -> bool:
        return bool(self.pending_jobs or self.loadable_files)


class Pipeline(Protocol):
    """The pipeline's jobs and what the runner observes between them."""

    config: PipelineConfig

    def backlogs(self, topics: Sequence[str]) -> Mapping[str, Backlog]: ...

    def stage(self, topics: Mapping[str, Backlog]) -> Sequence[StageOutcome]:
        """One stage run of every topic of ``topics``; an outcome per topic, in order."""
        ...

    def load(self) -> LoadOutcome: ...

    def poll(self) -> LoadOutcome: ...

    def load_side(self) -> LoadSide: ...

    def completeness(self) -> Mapping[str, TableCompleteness]:
        """Evaluate completeness now, write the kept state and record the newly declared
        days: per table, the verdict."""
        ...

    def run_job(
        self,
        job_name: str,
        run_config: Mapping | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> JobRun: ...


@dataclass(frozen=True)
class Limits:
    max_rounds: int = 100
    """Rounds before giving up: each round makes progress or the run is idle, so reaching
    this means data keeps arriving faster than it is caught up, or something loops."""
    poll_timeout_s: float = 900.0
    """How long one round waits for its load jobs to finish."""
    first_poll_s: float = 0.5
    max_poll_s: float = 5.0


class _Stop(Exception):
    """Ends the loop with a reason (not an error of the code: a state of the pipeline)."""


def run_until_idle(
    pipeline: Pipeline,
    topics: Sequence[str],
    *,
    limits: Limits = Limits(),
    after_load_steps: Sequence[AfterLoadStep] | None = None,
    progress: Callable[[str], None] = log.info,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> UntilIdleReport:
    """Stage, load and run the after-load steps (default :data:`AFTER_LOAD_STEPS`) until
    idle; the report's ``error`` is ``None`` only when everything is staged and loaded."""
    steps = tuple(AFTER_LOAD_STEPS if after_load_steps is None else after_load_steps)
    loop = _Loop(pipeline, tuple(topics), limits, steps, progress, sleep, clock)
    return loop.run()


class _Loop:
    def __init__(
        self,
        pipeline: Pipeline,
        topics: tuple[str, ...],
        limits: Limits,
        steps: tuple[AfterLoadStep, ...],
        progress: Callable[[str], None],
        sleep: Callable[[float], None],
        clock: Callable[[], float],
    ) -> None:
        self.pipeline = pipeline
        self.topics = topics
        self.limits = limits
        self.steps = steps
        self.progress = progress
        self.sleep = sleep
        self.clock = clock
        self.report = UntilIdleReport({t: TopicTotals() for t in topics})
        self.failed_topics: dict[str, str] = {}
        self.solo: set[str] = set()
        """Topics of a grouped run that failed: staged one run each from then on."""

    def run(self) -> UntilIdleReport:
        try:
            self._rounds()
        except (_Stop, KbqeError) as stop:
            self.report.error = _one_line(str(stop))
        self._completeness()
        return self.report

    def _rounds(self) -> None:
        for number in range(1, self.limits.max_rounds + 1):
            self.report.rounds = number
            staged = self._stage(number)
            loaded, load_ran = self._load(number)
            more = self._after_load(number, loaded)
            if not (staged or load_ran or more):
                self.progress(f"round {number}: idle")
                self._finish()
                return
        raise _Stop(self._not_idle())

    # --- stage ----------------------------------------------------------------------------
    def _stage(self, number: int) -> bool:
        staged = False
        wanted = [t for t in self.topics if t not in self.failed_topics]
        backlogs = self.pipeline.backlogs(wanted) if wanted else {}
        self._note_missing(number, backlogs)
        due = [
            DueTopic(t, b.next_offsets, b.lag, f"backlog {b.lag}")
            for t in wanted
            if (b := backlogs[t]).lag > 0
        ]
        grouped = group_due_topics(
            [d for d in due if d.topic not in self.solo], self.pipeline.config.stage_runs
        )
        alone = [StageGroup((d,)) for d in due if d.topic in self.solo]
        for group in grouped + alone:
            outcomes = self.pipeline.stage({t: backlogs[t] for t in group.names})
            if len(group.topics) > 1 and not any(o.ok for o in outcomes):
                self.solo.update(group.names)
                staged = True  # the next round stages them one by one
                self.progress(
                    f"round {number}: stage run {outcomes[0].run_id} of "
                    f"{len(group.topics)} topics failed ({outcomes[0].error}); "
                    "their next runs stage them one by one"
                )
                continue
            for outcome in outcomes:
                staged = self._staged(number, outcome, backlogs[outcome.topic]) or staged
        return staged

    def _note_missing(self, number: int, backlogs: Mapping[str, Backlog]) -> None:
        """Report a topic Kafka does not hold once, when first seen missing (and again if it
        comes back and goes again); the report keeps its latest state."""
        for topic, backlog in backlogs.items():
            totals = self.report.topics.setdefault(topic, TopicTotals())
            if backlog.missing is not None and totals.missing is None:
                self.progress(f"round {number}: skipped: {backlog.missing}")
            totals.missing = backlog.missing

    def _staged(self, number: int, outcome: StageOutcome, backlog: Backlog) -> bool:
        """Report one topic's outcome; whether it made progress."""
        topic = outcome.topic
        self.report.add_stage(outcome)
        if outcome.ok and outcome.ranges > 0:
            self.progress(
                f"round {number}: {topic}: staged {outcome.records} record(s) from "
                f"{outcome.messages} message(s), {outcome.dead_letters} dead-lettered, "
                f"{outcome.ranges} range(s) (run {outcome.run_id})"
            )
            return True
        self.failed_topics[topic] = (
            f"{topic}: stage run {outcome.run_id} failed: {outcome.error}"
            if not outcome.ok
            else f"{topic}: stage run {outcome.run_id} committed no offset range although "
            f"{backlog.lag} message(s) wait from offsets {backlog.offsets()}"
        )
        self.progress(f"round {number}: {self.failed_topics[topic]}")
        return False

    # --- load -----------------------------------------------------------------------------
    def _load(self, number: int) -> tuple[dict[str, TableLoad], bool]:
        side = self.pipeline.load_side()
        if not side.busy:
            return {}, False
        loaded: dict[str, TableLoad] = {}
        self._loaded(number, "load cycle", self.pipeline.load(), loaded)
        started, delay = self.clock(), self.limits.first_poll_s
        side = self.pipeline.load_side()
        while side.pending_jobs:
            if self.clock() - started >= self.limits.poll_timeout_s:
                raise _Stop(
                    f"{len(side.pending_jobs)} load job(s) still pending after "
                    f"{self.limits.poll_timeout_s:.0f}s: {', '.join(side.pending_jobs[:3])}"
                    " (`kbqe load plan` lists them; the poll_load_jobs schedule follows them)"
                )
            self.sleep(delay)
            delay = min(delay * 2, self.limits.max_poll_s)
            self._loaded(number, "poll", self.pipeline.poll(), loaded)
            side = self.pipeline.load_side()
        return loaded, True

    def _loaded(
        self, number: int, what: str, outcome: LoadOutcome, loaded: dict[str, TableLoad]
    ) -> None:
        self.report.add_load(outcome)
        if not outcome.ok:
            raise _Stop(f"{what} run {outcome.run_id} failed: {outcome.error}")
        for name, load in outcome.tables.items():
            before = loaded.get(name, TableLoad(0, (), ()))
            loaded[name] = TableLoad(
                before.rows + load.rows,
                before.job_ids + load.job_ids,
                before.offset_ranges + load.offset_ranges,
            )
        if outcome.tables:
            rows = sum(t.rows for t in outcome.tables.values())
            self.progress(
                f"round {number}: {what}: {rows} row(s) into "
                f"{', '.join(sorted(outcome.tables))} (run {outcome.run_id})"
            )

    # --- after-load steps -----------------------------------------------------------------
    def _after_load(self, number: int, loaded: Mapping[str, TableLoad]) -> bool:
        more = False
        context = AfterLoadContext(
            number, self.pipeline.config, dict(loaded), self.pipeline.run_job
        )
        for step in self.steps:
            result = step(context)
            self.report.run_ids.extend(result.run_ids)
            for name, merge in result.tables.items():
                self.report.table(name).add_merge(merge.keys_merged, merge.bytes_processed)
            if result.error is not None:
                raise _Stop(f"{_name(step)}: {result.error}")
            more = more or result.pending
        return more

    # --- the end --------------------------------------------------------------------------
    def _completeness(self) -> None:
        """Whatever ended the rounds, what they loaded is loaded: its days are declared and
        its late records counted now, not left to a daemon that may not exist."""
        try:
            tables = self.pipeline.completeness()
        except KbqeError as error:
            reason = f"completeness not evaluated: {_one_line(str(error))}"
            self.progress(reason)
            self.report.error = self.report.error or reason
            return
        self.report.completeness = dict(tables)
        for name, table in sorted(tables.items()):
            days = ", ".join(table.newly_complete)
            declared = f"; declared {days}" if days else ""
            self.progress(
                f"completeness: {name}: newest complete "
                f"{table.newest_complete or 'none'}{declared}; "
                f"{table.late_after_complete} late after complete"
            )

    def _finish(self) -> None:
        quarantined = self.pipeline.load_side().quarantined_tables
        self.report.quarantined_tables = quarantined
        if self.failed_topics:
            first, *others = self.failed_topics.values()
            self.report.error = first + (f" (and {len(others)} more topic(s))" if others else "")
        elif quarantined:
            self.report.error = (
                f"quarantined files in {', '.join(quarantined)}: loading them failed too "
                "often (`kbqe load plan` lists them; `kbqe load release` retries them)"
            )

    def _not_idle(self) -> str:
        wanted = [t for t in self.topics if t not in self.failed_topics]
        backlogs = self.pipeline.backlogs(wanted) if wanted else {}
        left = [f"{t} lag {backlogs[t].lag}" for t in wanted if backlogs[t].lag > 0]
        side = self.pipeline.load_side()
        if side.loadable_files:
            left.append(f"{side.loadable_files} loadable file(s)")
        if side.pending_jobs:
            left.append(f"{len(side.pending_jobs)} pending load job(s)")
        return (
            f"not idle after {self.limits.max_rounds} round(s): "
            f"{', '.join(left) or 'an after-load step still has work'} "
            "(data arrives faster than it is caught up? raise --max-rounds)"
        )


def _name(step: AfterLoadStep) -> str:
    return getattr(step, "__name__", type(step).__name__)


def _one_line(message: str) -> str:
    lines = message.strip().splitlines()
    return lines[0] if lines else "(no message)"
