"""The runner's :class:`~kbqe_dagster.runner.until_idle.Pipeline` on Dagster: the jobs of
``definitions.py`` — ``stage_job``, ``load_job``, ``poll_load_jobs_job`` — executed in this
process with the run config and tags their sensor and schedules give them, recorded in a
Dagster instance so the UI shows them like the daemon's runs.

The instance is ``$DAGSTER_HOME``, else the local one ``kbqe demo`` and ``kbqe dev`` use.
The definitions read ``KBQE_ENV``, ``KBQE_PIPELINE_CONFIG`` and ``KBQE_STAGING_URL`` exactly as
for the daemon. The load ops keep their pool (``bigquery_load``, one slot): in-process
execution claims it too, so a daemon's load run and this one never coordinate at the same
time. Two stage runs of one topic stay safe by construction (create-only done files). Small
topics share a stage run as the sensor groups them (``stage_runs``, core/stage_runs/groups.py).

After the last round, :meth:`InProcessPipeline.completeness` calls the function
``completeness_sensor`` calls (``defs/completeness/declare.py``): it writes the kept state, and
the ``day_complete`` evaluations of the days it declared are recorded on this instance, as the
daemon records a sensor's.

Each run is tagged with the runner's host and pid. No daemon monitors in-process runs, so a
runner killed mid-run leaves its run in flight; the next runner on that host marks such runs
failed and frees their pool slot (:func:`fail_abandoned_runs`).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.stage_runs import report_keys as stage_report
from kbqe_dagster.core.stage_runs.groups import DueTopic, StageGroup
from kbqe_dagster.defs.completeness.declare import declare_complete_days
from kbqe_dagster.defs.keys import STAGING_KEY
from kbqe_dagster.defs.staging.jobs import stage_group_run_config, stage_tags
from kbqe_dagster.operations.load_plan import load_plan
from kbqe_dagster.operations.snapshot import read_load_state
from kbqe_dagster.processes import pid_alive
from kbqe_dagster.resources.kafka.clients import TopicMissing
from kbqe_dagster.resources.kafka.cluster import watermarks_of
from kbqe_dagster.runner.after_load import JobRun
from kbqe_dagster.runner.report import LoadOutcome, StageOutcome, TableCompleteness, TableLoad
from kbqe_dagster.runner.until_idle import Backlog, LoadSide
from kbqe_dagster.staging.backlog import fleet_backlog

log = logging.getLogger(__name__)

LAUNCHED_BY_TAG = "kbqe/launched_by"
LAUNCHED_BY = "kbqe run --until-idle"
RUNNER_HOST_TAG = "kbqe/runner_host"
RUNNER_PID_TAG = "kbqe/runner_pid"
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
    dg.DagsterRunStatus.CANCELING,
]
QUIET_LOGGERS = {"console": {"config": {"log_level": "CRITICAL"}}}
"""The runs' console logger without ``--verbose``: their full logs (a failed step's traceback
included) are in the instance, for the UI; the terminal gets the runner's progress lines and
one line per error."""
RESOURCES = ("pipeline", "staging", "kafka")
MAX_ERROR_CHARS = 500


@contextmanager
def in_process_pipeline(*, quiet: bool = True) -> Iterator[InProcessPipeline]:
    """The pipeline of the current environment on its Dagster instance, for one runner."""
    from kbqe_dagster.definitions import build_definitions

    defs = build_definitions()
    wanted = {name: defs.resources[name] for name in RESOURCES}
    with dagster_instance() as instance, dg.build_resources(wanted) as resources:
        fail_abandoned_runs(instance)
        yield InProcessPipeline(defs, instance, resources, quiet=quiet)


def fail_abandoned_runs(
    instance: dg.DagsterInstance,
    host: str | None = None,
    is_alive: Callable[[int], bool] | None = None,
) -> list[str]:
    """Mark failed the runs an earlier ``kbqe run --until-idle`` on this host left in flight
    when its process died (SIGKILL, a lost machine), and free the pool slots they hold.

    No daemon monitors in-process runs: such a run would stay "Started" in the UI, its tags
    would make the backlog sensor wait for it forever, and a load op killed mid-run would keep
    the one ``bigquery_load`` slot, stalling every later load. Returns the run ids failed."""
    host = host or socket.gethostname()
    is_alive = is_alive or pid_alive
    failed = []
    runs = instance.get_runs(
        filters=dg.RunsFilter(
            tags={LAUNCHED_BY_TAG: LAUNCHED_BY, RUNNER_HOST_TAG: host}, statuses=IN_FLIGHT
        )
    )
    for run in runs:
        pid = int(run.tags.get(RUNNER_PID_TAG, "0"))
        if pid <= 0 or is_alive(pid):
            continue
        message = f"abandoned: the `{LAUNCHED_BY}` process (pid {pid} on {host}) is gone"
        instance.report_run_failed(run, message)
        if instance.event_log_storage.supports_global_concurrency_limits:
            instance.event_log_storage.free_concurrency_slots_for_run(run.run_id)
        log.warning("run %s (%s) marked failed: %s", run.run_id, run.job_name, message)
        failed.append(run.run_id)
    return failed


def dagster_instance() -> dg.DagsterInstance:
    home = os.environ.get("DAGSTER_HOME")
    if not home:
        from kbqe_dagster.resources.environment import local_dagster_home

        home = str(local_dagster_home())
    return dg.DagsterInstance.from_config(home)


class InProcessPipeline:
    def __init__(
        self,
        defs: dg.Definitions,
        instance: dg.DagsterInstance,
        resources: Any,
        *,
        quiet: bool = True,
    ) -> None:
        self.defs = defs
        self.instance = instance
        self.quiet = quiet
        self.config: PipelineConfig = resources.pipeline.load()
        self._store = resources.staging.store()
        self._kafka = resources.kafka.settings()

    # --- observations ---------------------------------------------------------------------
    def backlogs(self, topics: Sequence[str]) -> dict[str, Backlog]:
        """Every topic's backlog in one pass (staging/backlog.py ``fleet_backlog``); no
        oldest time: a catch-up stages whatever its age."""
        found = fleet_backlog(
            self._store,
            self._kafka,
            {t: self.config.topic(t).staging.start_offset for t in topics},
            oldest_wanted=lambda backlog: False,
        )
        out = {}
        for topic, b in found.items():
            if isinstance(b, TopicMissing):  # not created yet, or deleted: nothing to stage
                out[topic] = Backlog(0, {}, missing=str(b))
                continue
            out[topic] = Backlog(b.lag, b.next_offsets)
        return out

    def load_side(self) -> LoadSide:
        state = read_load_state(self._store)
        plan = load_plan(self._store, self.config, state)
        return LoadSide(
            pending_jobs=tuple(j.job_id for j in plan.pending_jobs),
            loadable_files=sum(len(j.files) for j in plan.jobs) + plan.deferred_files,
            quarantined_tables=tuple(sorted(f"{d}.{t}" for d, t in state.quarantined_tables())),
        )

    def completeness(self) -> dict[str, TableCompleteness]:
        """The sensor's evaluation (one function for both), its declared days recorded on
        this instance."""
        declared = declare_complete_days(
            self.config,
            self._store,
            lambda topics: watermarks_of(self._kafka, topics),
            datetime.now(UTC),
            self.instance,
        )
        for event in declared.events:
            self.instance.report_runless_asset_event(event)
        return {
            name: TableCompleteness(t.to_json(), tuple(t.unit.key(p) for p in t.newly_complete))
            for name, t in declared.report.tables.items()
        }

    # --- the jobs -------------------------------------------------------------------------
    def stage(self, topics: Mapping[str, Backlog]) -> list[StageOutcome]:
        group = StageGroup(
            tuple(DueTopic(t, b.next_offsets, b.lag, f"backlog {b.lag}") for t, b in topics.items())
        )
        # The sensor's tags: its in-flight check sees this run, the UI filters by topic.
        tags = stage_tags(group, f"{LAUNCHED_BY}: {group.reason}")
        run = self.run_job("stage_job", stage_group_run_config(group.names), tags)
        return [stage_outcome(topic, run) for topic in group.names]

    def load(self) -> LoadOutcome:
        return load_outcome(self.run_job("load_job"))

    def poll(self) -> LoadOutcome:
        return load_outcome(self.run_job("poll_load_jobs_job"))

    def run_job(
        self,
        job_name: str,
        run_config: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> JobRun:
        return execute_job(self.defs, self.instance, job_name, run_config, tags, quiet=self.quiet)


def execute_job(
    defs: dg.Definitions,
    instance: dg.DagsterInstance,
    job_name: str,
    run_config: Mapping[str, Any] | None = None,
    tags: Mapping[str, str] | None = None,
    *,
    quiet: bool = True,
) -> JobRun:
    """Execute a job of ``defs`` in this process, recorded in ``instance``; never raises for
    a failed run (its :class:`JobRun` says why, in one line)."""
    config = dict(run_config or {})
    if quiet:
        config.setdefault("loggers", QUIET_LOGGERS)
    result = defs.resolve_job_def(job_name).execute_in_process(
        run_config=config,
        instance=instance,
        raise_on_error=False,
        tags={
            LAUNCHED_BY_TAG: LAUNCHED_BY,
            RUNNER_HOST_TAG: socket.gethostname(),
            RUNNER_PID_TAG: str(os.getpid()),
            **(tags or {}),
        },
    )
    return JobRun(
        job_name,
        result.run_id,
        result.success,
        None if result.success else _error(result),
        tuple(
            (
                tuple(e.materialization.asset_key.path),
                {k: v.value for k, v in e.materialization.metadata.items()},
            )
            for e in result.get_asset_materialization_events()
        ),
        tuple(
            f"{e.asset_key.to_user_string()}:{e.check_name}"
            for e in result.get_asset_check_evaluations()
            if not e.passed and e.severity == dg.AssetCheckSeverity.ERROR
        ),
    )


def stage_outcome(topic: str, run: JobRun) -> StageOutcome:
    """The totals of a stage run, from the ``staging`` materialization it reported (none
    when it failed before the end)."""
    staged = [md for key, md in run.materializations if key == tuple(STAGING_KEY.path)]
    if not staged:
        return StageOutcome(topic, run.run_id, run.ok, run.error)
    md = staged[0]
    # A grouped run reports each topic's share under by_topic (defs/staging/metadata.py).
    # A topic the run did not stage (left to an older run in flight) has no share.
    if stage_report.BY_TOPIC in md or stage_report.TOPICS in md:
        share = (md.get(stage_report.BY_TOPIC) or {}).get(topic)
        if share is None:
            return StageOutcome(topic, run.run_id, run.ok, run.error)
        md = share
    by_reason, skipped = (
        md.get(stage_report.DEAD_LETTERS_BY_REASON) or {},
        md.get(stage_report.SKIPPED_BY_REASON) or {},
    )
    # Keyed topics count tombstones themselves; append topics dead-letter or skip them.
    tombstones = md.get(stage_report.TOMBSTONES)
    if tombstones is None:
        tombstones = by_reason.get("tombstone", 0) + skipped.get("tombstone", 0)
    return StageOutcome(
        topic,
        run.run_id,
        run.ok,
        run.error,
        records=md.get(stage_report.ROWS, 0),
        messages=md.get(stage_report.MESSAGES, 0),
        dead_letters=md.get(stage_report.DEAD_LETTERS, 0),
        tombstones=tombstones,
        ranges=len(md.get(stage_report.RANGES) or ()),
        appended={
            table: (int(a.get("rows", 0)), int(a.get("bytes", 0)))
            for table, a in (md.get(stage_report.STORAGE_WRITE_BY_TABLE) or {}).items()
        },
    )


def load_outcome(run: JobRun) -> LoadOutcome:
    """Per table, the rows, job ids and offset ranges of the loads the run finished (one
    materialization per table and DAY partition each)."""
    rows: dict[str, int] = {}
    jobs: dict[str, dict[str, int]] = {}  # job id → its input bytes (once per job)
    # A file with records on several event days shows its offset range once per day.
    ranges: dict[str, dict[tuple[str, int, int, int], None]] = {}
    for _, md in run.materializations:
        table = md.get("table")
        if table is None:
            continue
        rows[table] = rows.get(table, 0) + (md.get("dagster/row_count") or 0)
        jobs.setdefault(table, {})[md["job_id"]] = md.get("job_input_bytes") or 0
        ranges.setdefault(table, {}).update(
            ((r["topic"], r["partition"], r["first"], r["last"]), None)
            for r in md.get("offset_ranges") or ()
        )
    tables = {
        t: TableLoad(rows[t], tuple(jobs[t]), tuple(ranges[t]), sum(jobs[t].values())) for t in rows
    }
    return LoadOutcome(run.run_id, run.ok, run.error, tables)


def _error(result: dg.ExecuteInProcessResult) -> str:
    """The first failed step's own exception (under Dagster's wrapper), in one line."""
    for event in result.all_events:
        if event.is_step_failure and event.step_failure_data is not None:
            error = event.step_failure_data.error
            while error.cause is not None:
                error = error.cause
            return one_line_error(error.message, error.cls_name)
    return "the run failed; its logs are in the Dagster UI (Runs)"


def one_line_error(message: str, cls_name: str) -> str:
    """``kbqe_dagster.core.errors.StagingError: a:\n  b`` → ``StagingError: a: b``. A stage
    run's error lists its failed ranges on the lines after the first: they name the partition
    and offset, so they are kept, joined into the line."""
    text = " ".join(message.split()) or cls_name
    head, sep, rest = text.partition(": ")
    if sep and head.rsplit(".", 1)[-1] == cls_name:
        text = f"{cls_name}: {rest}"
    return text if len(text) <= MAX_ERROR_CHARS else text[: MAX_ERROR_CHARS - 1] + "…"
