"""A ``stage_loop_job`` run: the ``staging`` asset staged round after round
(staging/stage_loop.py ``run_stage_loop``) inside one Dagster run, and what the run tells Dagster.

Before it loops, it warms Spark up, then waits for the older stage runs in flight holding its
topics to end (defs/staging/claims.py): a loop run launched behind a looping one is its warm
**standby** (core/stage_runs/loop_plan.py), which takes over within a poll
(``STANDBY_POLL_S``) and a round of the other's end. It records where it is on itself
(``kbqe/loop_state``: ``warm`` while it stands by, ``looping``), for the loop sensor.

When it stops, between rounds, never mid-range:

* terminated (Dagster's terminate: the run's status is CANCELING, and the run worker, which runs
  the step itself, gets an interrupt, deferred here until the round ends) -> the run ends as
  Dagster ends a terminated run, with its events recorded;
* ``max_run_s`` -> success; ``stage_loop_sensor`` relaunches it (a deploy's code is picked up,
  any leak bounded);
* ``config_changed``: the sensor of a code location reloaded with another pipeline file added
  the ``kbqe/stop`` tag to the run -> success; the sensor relaunches it with the new pipeline.

What it reports: every ``report_every_s``, the rounds since the last report folded
(staging/stage_loop.py ``fold_rounds``) into the deliveries' events (defs/staging/deliveries.py:
materializations of each table and event day, the ``rows_loaded`` check) and one lag
observation per topic on ``kafka/<topic>``; at the end, the ``staging`` materialization of the
whole run with ``rounds``, ``idle_rounds`` and ``stopped_because``.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.stage_runs.loop_plan import LOOPING, WARM
from kbqe_dagster.defs.keys import LOOP_STATE_TAG, STOP_TAG, Destinations
from kbqe_dagster.defs.staging.claims import yielded_to_older_runs
from kbqe_dagster.defs.staging.deliveries import delivery_events
from kbqe_dagster.defs.staging.metadata import group_metadata
from kbqe_dagster.defs.staging.sensors import lag_observation
from kbqe_dagster.staging.backlog import PartitionBacklog, TopicBacklog
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.stage_loop import (
    MAX_RUN_S,
    TERMINATED,
    LoopOutcome,
    LoopRound,
    LoopSettings,
    fold_rounds,
    loop_interval_s,
    run_stage_loop,
    warm_up,
)

log = logging.getLogger(__name__)

STOPPING = (dg.DagsterRunStatus.CANCELING, dg.DagsterRunStatus.CANCELED)
ENDED = (dg.DagsterRunStatus.FAILURE, dg.DagsterRunStatus.SUCCESS)
"""A run recorded as ended while its loop still runs: its run worker was taken for dead (the
code server saw it die, or ``stage_loop_sensor`` found it silent) while this process lives
on. It stops after its round, so that it never loops beside the run that takes over."""


class LoopStop:
    """``should_stop`` of a loop run: an interrupt received (Dagster's terminate), the run's
    status CANCELING (or ended: see :data:`ENDED`), or a ``kbqe/stop`` tag on the run. The run storage is read at most every
    ``check_every_s`` (a round may be a tenth of a second)."""

    def __init__(
        self,
        instance: dg.DagsterInstance,
        run_id: str,
        check_every_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.instance, self.run_id, self.check_every_s, self.clock = (
            instance,
            run_id,
            check_every_s,
            clock,
        )
        self.interrupted = False
        self._next_check = 0.0

    def __call__(self) -> str | None:
        if self.interrupted:
            return TERMINATED
        now = self.clock()
        if now < self._next_check:
            return None
        self._next_check = now + self.check_every_s
        run = self.instance.get_run_by_id(self.run_id)
        if run is None:
            return None
        if run.status in STOPPING or run.status in ENDED:
            return TERMINATED
        return run.tags.get(STOP_TAG)


REPEAT_WINDOW_S = 3.0
"""Interrupts this soon after the first are the same stop request: a terminal's Ctrl-C reaches
every process of ``dagster dev``'s group, and the run worker forwards it to the step once
more."""


@contextmanager
def interrupts_between_rounds(
    stop: LoopStop, clock: Callable[[], float] = time.monotonic
) -> Iterator[None]:
    """Dagster terminates a run by interrupting its step process (SIGINT), which would cut a
    range anywhere (PySpark's own handler raises KeyboardInterrupt): here an interrupt only
    tells ``stop``, so the loop ends after its round. One more than ``REPEAT_WINDOW_S`` later
    interrupts at once, as before. Python takes signals in the main thread only: elsewhere (a
    test's thread) this does nothing and the status check stops the loop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.getsignal(signal.SIGINT)
    first: list[float] = []

    def defer(signo, frame) -> None:
        if not first:
            first.append(clock())
            log.warning("stage loop: interrupted; ending after this round")
            stop.interrupted = True
            return
        if clock() - first[0] < REPEAT_WINDOW_S:
            return
        signal.signal(signal.SIGINT, previous)
        if callable(previous):
            previous(signo, frame)
        else:
            raise KeyboardInterrupt

    signal.signal(signal.SIGINT, defer)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class LoopReport:
    """``on_round`` of a loop run: keeps the rounds, and every ``report_every_s`` logs their
    folded events (and the topics' lag) to Dagster."""

    def __init__(
        self,
        context: dg.AssetExecutionContext,
        destinations: Destinations,
        topics: Sequence[str],
        report_every_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.context, self.destinations, self.topics = context, destinations, topics
        self.report_every_s, self.clock = report_every_s, clock
        self.pending: list[LoopRound] = []
        self.last_report = clock()
        self.idle = [0, 0.0]  # rounds, seconds: the fixed cost of a round, for the metadata
        self.busy = [0, 0.0]

    def __call__(self, rnd: LoopRound) -> None:
        self.pending.append(rnd)
        totals = self.idle if rnd.idle else self.busy
        totals[0] += 1
        totals[1] += rnd.seconds
        if self.clock() - self.last_report >= self.report_every_s:
            self.flush()

    def flush(self) -> None:
        self.last_report = self.clock()
        if not self.pending:
            return
        rounds, self.pending = self.pending, []
        folded = fold_rounds(s for r in rounds for s in r.summaries)
        for event in delivery_events(folded, self.destinations):
            self.context.log_event(event)
        last = rounds[-1]
        for topic in self.topics:
            backlog = _backlog(last, topic)
            if backlog is not None:
                self.context.log_event(lag_observation(backlog))
        idle = sum(1 for r in rounds if r.idle)
        self.context.log.info(
            "stage loop: %d round(s) (%d idle) since the last report: %d record(s) staged; "
            "rounds take %.3fs idle, %.3fs busy on average",
            len(rounds),
            idle,
            sum(s.records for s in folded),
            _mean(self.idle),
            _mean(self.busy),
        )

    def metadata(self) -> dict:
        return {
            "idle_round_seconds": round(_mean(self.idle), 4),
            "busy_round_seconds": round(_mean(self.busy), 4),
        }


def _mean(totals: list) -> float:
    return totals[1] / totals[0] if totals[0] else 0.0


def _backlog(rnd: LoopRound, topic: str) -> TopicBacklog | None:
    """A topic's lag after a round, as the backlog sensor observes it (no oldest time)."""
    lag = rnd.lag(topic)
    if not lag:
        return None  # Kafka does not hold the topic (the backlog sensor says it is missing)
    partitions = []
    for p, behind in lag.items():
        mark = rnd.marks[(topic, p)]
        partitions.append(PartitionBacklog(p, mark.low, mark.high, mark.high - behind, behind))
    return TopicBacklog(topic, tuple(partitions), None)


STANDBY_POLL_S = 0.25
"""How often a standby asks the run storage whether the run it follows has ended (one query of
the runs in flight): the takeover's share of a loop run's end."""


def wait_for_older_runs(
    context: dg.AssetExecutionContext,
    topics: Sequence[str],
    should_stop: Callable[[], str | None],
    max_wait_s: float,
    poll_s: float = STANDBY_POLL_S,
    on_wait: Callable[[], None] = lambda: None,
    heartbeat_s: float = LoopSettings.report_every_s,
) -> str | None:
    """Wait until no older stage run in flight holds any of ``topics`` (one run prepares a
    topic at a time: defs/staging/claims.py): the run before it in a loop run's standby, or a
    run launched by hand. ``on_wait`` is called once, when the wait begins; a line is logged
    every ``heartbeat_s`` (a standby waits for up to an hour, and ``stage_loop_sensor`` takes
    a loop run silent for ``SILENT_LOOP_S`` for dead). Returns why the wait ended the run
    instead (``should_stop``'s reason, or ``max_run_s``)."""
    started = time.monotonic()
    deadline = started + max_wait_s
    warned = False
    beat = started + heartbeat_s
    while yielded := yielded_to_older_runs(context.instance, context.run.run_id, topics):
        if not warned:
            context.log.info(
                "stage loop: standing by, warm, until the older stage run(s) in flight holding "
                "%s end",
                ", ".join(sorted(yielded)),
            )
            on_wait()
            warned = True
        if time.monotonic() >= beat:
            beat = time.monotonic() + heartbeat_s
            context.log.info("stage loop: standing by for %.0fs", time.monotonic() - started)
        reason = should_stop()
        if reason is not None:
            return reason
        if time.monotonic() >= deadline:
            return MAX_RUN_S
        time.sleep(poll_s)
    # Asked once more: a run that is no longer in flight itself (recorded as ended while its
    # process lives on: a worker taken for dead) finds no older run either, and must not loop.
    reason = should_stop()
    if reason is not None:
        return reason
    if warned:
        context.log.info("stage loop: taking over %s", ", ".join(topics))
    return None


def _set_state(context: dg.AssetExecutionContext, state: str) -> None:
    """Record the loop run's state on it (``kbqe/loop_state``, read by the loop sensor)."""
    if context.instance.has_run(context.run.run_id):
        context.instance.add_run_tags(context.run.run_id, {LOOP_STATE_TAG: state})


class FirstRound:
    """``on_round`` of a loop run: the report, and one line when the first round is done (the
    moment the run's topics are fresh: what a warm-up or a takeover is measured to)."""

    def __init__(self, context: dg.AssetExecutionContext, report: LoopReport) -> None:
        self.context, self.report, self.started = context, report, time.monotonic()

    def __call__(self, rnd: LoopRound) -> None:
        self.report(rnd)
        if rnd.number == 1:
            self.context.log.info(
                "stage loop: first round done %.2fs after it began (%.2fs long)",
                time.monotonic() - self.started,
                rnd.seconds,
            )


def stage_loop(
    context: dg.AssetExecutionContext,
    pipeline_config: PipelineConfig,
    topics: Sequence[str],
    ctx: StageContext,
    spark_context,
    *,
    max_run_s: float,
    report_every_s: float,
) -> dg.MaterializeResult:
    """Run the stage loop of ``topics`` in this run, until it stops; its final materialization."""
    settings = LoopSettings(
        interval_s=loop_interval_s(pipeline_config, topics),
        max_run_s=max_run_s,
        report_every_s=report_every_s,
    )
    stop = LoopStop(context.instance, context.run.run_id)
    report = LoopReport(
        context, Destinations.from_config(pipeline_config), topics, settings.report_every_s
    )
    context.log.info(
        "stage loop of %s: a round every %.3gs, for at most %.0fs",
        ", ".join(topics),
        settings.interval_s,
        settings.max_run_s,
    )
    # Warm before standing by: a standby takes over with its SparkSession up and the stage
    # code imported on its executors, so the run it follows ending costs a round, not a start.
    context.log.info("stage loop: Spark warmed up in %.1fs", warm_up(spark_context, ctx))
    waited = wait_for_older_runs(
        context,
        topics,
        stop,
        settings.max_run_s,
        on_wait=lambda: _set_state(context, WARM),
        heartbeat_s=settings.report_every_s,
    )
    if waited is not None:
        outcome = LoopOutcome(0, 0, waited, ())
    else:
        _set_state(context, LOOPING)
        first = FirstRound(context, report)
        with interrupts_between_rounds(stop):
            try:
                outcome = run_stage_loop(
                    spark_context, ctx, topics, settings, should_stop=stop, on_round=first
                )
            finally:
                report.flush()  # what committed is reported, even when a range failed
    context.log.info(
        "stage loop of %s stopped (%s) after %d round(s), %d idle",
        ", ".join(topics),
        outcome.stopped_because,
        outcome.rounds,
        outcome.idle_rounds,
    )
    return dg.MaterializeResult(
        metadata={
            **group_metadata(tuple(topics), fold_rounds(outcome.summaries)),
            "rounds": outcome.rounds,
            "idle_rounds": outcome.idle_rounds,
            "stopped_because": outcome.stopped_because,
            "loop_interval_s": settings.interval_s,
            **report.metadata(),
        }
    )
