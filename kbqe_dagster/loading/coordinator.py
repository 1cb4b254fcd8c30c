"""The load coordinator: staging area → BigQuery load jobs, exactly once (DESIGN.md §4).

One run (a load cycle, or a poll) does, in this order:

1. **Poll** every job the state file lists as pending: a job BigQuery does not know is
   submitted under its *recorded* id (a crash after recording, or a lost answer; a 409
   reply means BigQuery had it after all); a finished job's avro files are deleted — never
   its done files — and only then is the job marked succeeded; a failed job is retried under
   a new id (recorded before it is submitted) up to ``max_retries``, then quarantined; a job
   pending longer than ``stuck_after`` is reported, not resubmitted and not crashed on.
2. (cycle only) **List and plan**: loadable files (avro + done file, not pending, not
   quarantined) grouped per table and schema id, at most ``max_files_per_job`` per job. A
   file whose object is not the version its commit pinned is a **leftover** (a late
   writer re-created a name that was already loaded and deleted): it is deleted — exactly
   that version — counted and logged, never loaded. All planned jobs are written to the
   state file **before** the first is submitted.
3. (cycle only) **Poll the new jobs**: submits the jobs planned in step 2, and finishes
   those BigQuery already completed (the emulator runs a job while accepting it).

Listing comes after the first poll on purpose: a listing taken before it would still show
the avro files that poll deletes, and planning them again would load them twice.

Every step is a decision of ``core/load/lifecycle.py`` applied to ``core/load/state.py``;
this class does the I/O in the order that keeps any crash safe. One coordinator at a time:
the Dagster op runs in the singleton pool ``bigquery_load``.

Quarantine leaves the avro files where they are (selection skips them; their done files stay
too, so retention keeps the partition's chain intact until an operator acts) and writes a
note per job under ``_kbqe/quarantine/<dataset>.<table>/<job id>.json`` saying what failed
and how to release the files.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.config.table_layout import TableLayout
from kbqe_dagster.core.errors import ConfigError, KbqeError, StagingError
from kbqe_dagster.core.load.lifecycle import (
    Action,
    ObservedJob,
    ObservedKind,
    SubmitOutcome,
    job_decision,
)
from kbqe_dagster.core.load.notices import (
    KNOWN_SCHEMAS_FILE,
    decode_known,
    encode_known,
    schema_notices,
)
from kbqe_dagster.core.load.pending import staging_view
from kbqe_dagster.core.load.selection import (
    PlannedLoadJob,
    make_job_id,
    plan_load_jobs,
    without_leftovers,
)
from kbqe_dagster.core.load.state import (
    JobStatus,
    LoadJobRecord,
    LoadState,
    mark_failed,
    mark_submitted,
    mark_succeeded,
    prune,
    quarantine_job,
    record_planned,
    retry_job,
)
from kbqe_dagster.core.protocol.naming import parse_listing
from kbqe_dagster.core.record.partition_spec import (
    PartitionSpec,
    partition_column_problem,
    partitioning_refusal,
)
from kbqe_dagster.core.record.partitioning import Partitioning
from kbqe_dagster.core.record.table_options import (
    TableOptions,
    avro_columns,
    clustering_problems,
    table_update,
)
from kbqe_dagster.faults import crash_point
from kbqe_dagster.loading.evolution import TableEvolution
from kbqe_dagster.loading.feed_labels import check_feeds, record_feeds
from kbqe_dagster.loading.manifests import FileFacts, read_file_facts
from kbqe_dagster.loading.report import CompletedLoad, CycleReport, QuarantinedLoad
from kbqe_dagster.loading.state_file import StateFile
from kbqe_dagster.resources.bigquery import BigQueryLoads, JobReport, LoadRequest
from kbqe_dagster.resources.staging_store import StagingStore, StoredFile

log = logging.getLogger(__name__)
NOTICE_LOG = logging.getLogger("kbqe_dagster.notices")
"""Where each schema and table notice goes as one JSON document (the structured log line for
log shippers); the console shows its one-line text instead (cli/logs.py)."""

QUARANTINE_PREFIX = "_kbqe/quarantine/"
DELETE_THREADS = 16
DEFAULT_STUCK_AFTER = timedelta(hours=1)


def utc_now() -> datetime:
    return datetime.now(UTC)


class LoadCoordinator:
    """Plans, submits and follows the load jobs of one staging area."""

    def __init__(
        self,
        store: StagingStore,
        bigquery: BigQueryLoads,
        config: PipelineConfig,
        *,
        now: Callable[[], datetime] = utc_now,
        stuck_after: timedelta = DEFAULT_STUCK_AFTER,
    ) -> None:
        self.store = store
        self.bigquery = bigquery
        self.config = config
        self.settings = config.load
        self.now = now
        self.stuck_after = stuck_after
        self.state_file = StateFile(store)
        self._sizes: dict[str, int] = {}
        self._listed: list[StoredFile] = []
        self._datasets_ready: set[str] = set()
        self._evolution = TableEvolution(
            store,
            bigquery,
            lambda dataset, table: self.config.table_layout(dataset, table).column_descriptions,
        )
        self._options_kept: dict[tuple[str, str], bool] = {}  # table -> existed at its read
        self._refused: dict[tuple[str, str], str] = {}  # table -> why its loads are refused
        self._fresh_ids: set[str] = set()  # ids this run recorded: their first submission
        self._facts: dict[str, FileFacts] = {}  # read while planning, reused when finishing

    # --- entry points -----------------------------------------------------------------------
    def run_cycle(self) -> CycleReport:
        """Poll, plan new jobs from the staging listing, submit them and poll again."""
        report = CycleReport()
        state = self.state_file.read()
        state = self._poll(state, report)
        state = self._plan(state, report)
        state = self._poll(state, report, only=set(self._fresh_ids))
        self._measure_backlog(state, report)
        return self._finish(state, report)

    def poll(self) -> CycleReport:
        """Only follow the recorded jobs (the poll schedule): nothing new is planned."""
        report = CycleReport()
        state = self._poll(self.state_file.read(), report)
        return self._finish(state, report)

    def _finish(self, state: LoadState, report: CycleReport) -> CycleReport:
        state = prune(state, self.now(), self.config.retention.keep_load_history)
        self._save(state)
        self._notice_schema_changes(report)
        report.pending_after = len(state.pending_jobs())
        report.quarantined_tables = state.quarantined_tables()
        report.state_writes = self.state_file.writes
        log.info("load coordinator: %s", report.summary())
        return report

    def _notice_schema_changes(self, report: CycleReport) -> None:
        """Compare each table a finished job loaded with its remembered columns; notices go
        to the report (the load op turns them into asset events and webhook posts). After
        the state is saved: a notice never holds a load back, and one lost to a crash here
        is given by the next finished load of that table."""
        jobs: dict[tuple[str, str], list[CompletedLoad]] = {}
        for completed in report.completed:
            jobs.setdefault(completed.table_id, []).append(completed)
        if not jobs:
            return
        try:
            content = self.store.read_bytes(KNOWN_SCHEMAS_FILE)
        except StagingError:
            content = None
        known = decode_known(content)
        changed = False
        for (dataset, table), finished in sorted(jobs.items()):
            current = self.bigquery.table_columns(dataset, table)
            if current is None:
                continue
            name = f"{dataset}.{table}"
            before = known.get(name)
            planned = min(c.job.created_at for c in finished)
            created = current.created is None or current.created >= planned
            for notice in schema_notices(
                name, before, current.columns, created=created, job_id=finished[-1].job.job_id
            ):
                report.notices.append(notice)
                document = notice.to_json()
                log.info("schema notice: %s", document["text"])
                NOTICE_LOG.info("schema notice: %s", json.dumps(document))
            if before != current.columns:
                known[name] = current.columns
                changed = True
        if changed:
            self.store.put_bytes(KNOWN_SCHEMAS_FILE, encode_known(known))

    def _save(self, state: LoadState) -> None:
        self.state_file.save(state)

    # --- planning ---------------------------------------------------------------------------
    def _plan(self, state: LoadState, report: CycleReport) -> LoadState:
        files = self.store.list()
        self._listed = files
        self._sizes = {f.name: f.size for f in files}
        planned = plan_load_jobs(
            parse_listing(f.name for f in files),
            pending=state.pending_files(),
            quarantined=state.quarantined_files(),
            max_files_per_job=self.settings.max_files_per_job,
        )
        if not planned:
            return state
        facts = read_file_facts(self.store, [d for job in planned for d in job.done_files])
        self._facts.update(facts)
        planned = self._without_leftovers(planned, facts, files, report)
        now = self.now()
        for job in planned:
            counts = [facts[f].records if f in facts else None for f in job.files]
            records = None if None in counts else sum(c for c in counts if c is not None)
            job = replace(job, records=records)
            job_id = self._new_job_id(job.dataset, job.table, now)
            state = record_planned(state, job, job_id, now)
            self._fresh_ids.add(job_id)
            report.planned.append(state.job(job_id))
        if planned:
            # The recorded ids are what makes resubmission safe: they reach the staging area
            # before BigQuery hears of any of them.
            self._save(state)
        return state

    def _without_leftovers(
        self,
        planned: list[PlannedLoadJob],
        facts: dict[str, FileFacts],
        files: list[StoredFile],
        report: CycleReport,
    ) -> list[PlannedLoadJob]:
        """The planned jobs without their leftovers, which are deleted here.

        Avro uploads are create-only, so the pinned object under a committed name can never
        be replaced, only deleted after its load; what is there instead was created after
        that by a writer that lost the range. Deleting exactly the listed version leaves any
        other object alone.
        """
        current = {f.name: f.version for f in files}
        kept, leftovers = without_leftovers(
            planned, {name: f.version for name, f in facts.items()}, current
        )
        for avro in leftovers:
            version = current.get(avro)
            deleted = version is not None and self.store.delete_version(avro, version)
            log.warning(
                "leftover %s: object version %s is not the version %s its commit pinned "
                "(a late writer re-uploaded a loaded file); %s, not loaded",
                self.store.uri(avro),
                version,
                facts[avro].version,
                "deleted" if deleted else "already gone",
            )
            if deleted:
                report.leftovers_deleted.append(avro)
        gone = set(leftovers)
        self._listed = [f for f in self._listed if f.name not in gone]
        return kept

    def _measure_backlog(self, state: LoadState, report: CycleReport) -> None:
        """What still waits after this cycle (core/load/pending.py) in the listing of its start,
        less the files its completed jobs loaded."""
        loaded = {f for c in report.completed for f in c.job.files}
        view = staging_view((f for f in self._listed if f.name not in loaded), state, self.now())
        report.unloaded_files = view.waiting_files
        report.oldest_unloaded_age_s = view.oldest_pending_age_s or 0.0

    def _new_job_id(self, dataset: str, table: str, now: datetime) -> str:
        return make_job_id(dataset, table, now, prefix=self.settings.job_id_prefix)

    # --- following jobs ---------------------------------------------------------------------
    def _poll(
        self, state: LoadState, report: CycleReport, only: set[str] | None = None
    ) -> LoadState:
        """Advance every pending job, or only the ids in ``only``."""
        for job in state.pending_jobs():
            if only is None or job.job_id in only:
                state = self._advance(state, job.job_id, report)
        return state

    def _advance(self, state: LoadState, job_id: str, report: CycleReport) -> LoadState:
        """Drive one job as far as it goes now: at most a submit per attempt, or a finish."""
        for _ in range(self.settings.max_retries + 4):
            job = state.job(job_id)
            observed = self._observe(job)
            decision = job_decision(
                job,
                observed.observed,
                self.now(),
                max_retries=self.settings.max_retries,
                stuck_after=self.stuck_after,
            )
            if decision.mark_submitted:
                state = mark_submitted(state, job_id, self.now())
                self._save(state)
            action = decision.action
            if action in (Action.NONE, Action.WAIT):
                if action is Action.WAIT:
                    report.waiting.append(decision.reason)
                return state
            if action is Action.REPORT_STUCK:
                log.warning(decision.reason)
                report.stuck.append(decision.reason)
                return state
            if action is Action.COMPLETE:
                return self._complete(state, job, observed, report)
            # BigQuery's error for a job that ran; the recorded one for a refused submission.
            error = observed.observed.error or job.last_error or decision.reason
            if action is Action.QUARANTINE:
                return self._quarantine(state, job, error, decision.reason, report)
            if action is Action.RETRY:
                new_id = self._new_job_id(job.dataset, job.table, self.now())
                state = retry_job(state, job_id, new_id, self.now(), error)
                self._save(state)  # recorded before it is submitted, like a planned job
                self._fresh_ids.add(new_id)
                log.warning("%s; retrying as %s", decision.reason, new_id)
                report.retried.append((job_id, new_id, error))
                job_id = new_id
                continue
            state, progressed = self._submit(state, job, report)
            if not progressed:
                return state
        return state

    def _observe(self, job: LoadJobRecord) -> JobReport:
        if job.status in (JobStatus.PLANNED, JobStatus.SUBMITTED):
            return self.bigquery.job_report(job.job_id)
        return JobReport(ObservedJob(ObservedKind.UNKNOWN))  # job_decision() ignores it for others

    def _submit(
        self, state: LoadState, job: LoadJobRecord, report: CycleReport
    ) -> tuple[LoadState, bool]:
        """Submit ``job`` under its recorded id; ``True`` when its status moved on."""
        try:
            request = self._request(job)
        except KbqeError as error:  # e.g. an unreadable first file: a failure of this attempt
            state = mark_failed(state, job.job_id, self.now(), str(error))
            self._save(state)
            return state, True
        crash_point("load_before_submit")
        result = self.bigquery.submit_load(request)
        crash_point("load_after_submit")
        if job.job_id not in self._fresh_ids:
            report.resubmitted.append(job.job_id)  # recorded by an earlier run, unknown to BigQuery
        if result.outcome is SubmitOutcome.TRANSIENT:
            report.transient.append(job.job_id)
            return state, False  # still planned: the next poll submits the same id again
        if result.outcome is SubmitOutcome.REJECTED:
            state = mark_failed(state, job.job_id, self.now(), result.error or "rejected")
            self._save(state)
            return state, True
        if result.outcome is SubmitOutcome.ALREADY_SUBMITTED:
            report.already_submitted.append(job.job_id)
        report.submitted.append(job.job_id)
        state = mark_submitted(state, job.job_id, self.now())
        self._save(state)
        return state, True

    def _request(self, job: LoadJobRecord) -> LoadRequest:
        dataset, table = job.table_id
        check_feeds(self.bigquery, self.store.location.url, job)
        if self.settings.create_datasets and dataset not in self._datasets_ready:
            self.bigquery.ensure_dataset(dataset)
            self._datasets_ready.add(dataset)
        schema = self._evolution.prepare(job)  # the table takes the files' schema first
        layout = self.config.table_layout(dataset, table)
        exists = self._keep_options(dataset, table, layout)
        if exists is False and schema is not None:
            self._check_new_table_columns(dataset, table, layout, schema, job.files[0])
        expiration = layout.options.partition_expiration_days
        return LoadRequest.into(
            layout,
            job_id=job.job_id,
            dataset=dataset,
            table=table,
            source_uris=tuple(self.store.uri(f) for f in job.files),
            partition_expiration_days=expiration or None,
            avro_schema=schema,
        )

    def _check_new_table_columns(
        self, dataset: str, table: str, layout: TableLayout, schema: Any, first_file: str
    ) -> None:
        """Refuse a table's first load naming the column, rather than by BigQuery's error on
        the job, when its clustering or partition column does not fit the files' schema."""
        where = f"{dataset}.{table}"
        columns = avro_columns(schema)
        problems = {"clustering": clustering_problems(layout.clustering, columns, where)}
        if layout.user_partition_column:
            hourly = layout.partitioning is Partitioning.HOUR
            problem = partition_column_problem(layout.partition_column, columns, hourly, where)
            problems["partition_column"] = [problem] if problem else []
        named = [setting for setting, found in problems.items() if found]
        if named:
            raise ConfigError(
                f"{'; '.join(m for found in problems.values() for m in found)} in the schema of "
                f"{self.store.uri(first_file)} (tables.{where}.{'/'.join(named)} or its "
                "dataset.*)"
            )

    def _keep_options(self, dataset: str, table: str, layout: TableLayout) -> bool | None:
        """Whether ``dataset.table`` exists, from its metadata read once per run (the first job
        of the table) when its ``tables:`` entry states options or a partitioning other than
        DAY on the event date (None: not asked, no read); an existing table whose options
        differ from the layout's is updated. A table created by a load gets them from that
        load's configuration. A refused update is logged and tried again at the next run: it
        never holds the rows back. A table partitioned otherwise than the layout says is
        refused (core/record/partition_spec.py): its jobs fail naming it, its files stay."""
        wanted = layout.options
        default_partitioning = (
            layout.partitioning is Partitioning.DAY and not layout.user_partition_column
        )
        if wanted == TableOptions() and default_partitioning:
            return None
        key = (dataset, table)
        if key in self._options_kept:
            if key in self._refused:
                raise ConfigError(self._refused[key])
            return self._options_kept[key]
        current = self.bigquery.table_metadata(dataset, table)
        self._options_kept[key] = current is not None
        if current is None:
            return False
        refusal = partitioning_refusal(
            f"{dataset}.{table}",
            PartitionSpec(current.partition_type, current.partition_field),
            layout.partition_spec,
        )
        if refusal is not None:
            self._refused[key] = refusal
            log.error("%s", refusal)
            raise ConfigError(refusal)
        update = table_update(current, wanted)
        if update:
            try:
                self.bigquery.update_table_options(dataset, table, update)
            except Exception as error:  # noqa: BLE001 - reported; the load goes on
                log.warning(
                    "%s.%s: could not update %s (the next load tries again): %s",
                    dataset,
                    table,
                    "; ".join(update.changes),
                    error,
                )
            else:
                log.info("%s.%s: updated %s", dataset, table, "; ".join(update.changes))
        return True

    def _complete(
        self, state: LoadState, job: LoadJobRecord, stats: JobReport, report: CycleReport
    ) -> LoadState:
        # Read the manifests while the done files surely exist (retention may remove a done
        # file once its avro file is gone), unless this run read them while planning.
        missing = [d for f, d in zip(job.files, job.done_files) if f not in self._facts]
        if missing:
            self._facts.update(read_file_facts(self.store, missing))
        facts = {f: self._facts[f] for f in job.files if f in self._facts}
        sizes = [self._sizes.get(f) for f in job.files]
        input_bytes = None if None in sizes else sum(s for s in sizes if s is not None)
        # Up to 10,000 deletes per job: in parallel, like the manifest reads. An exception
        # leaves the job pending, and the next poll deletes what is left.
        with ThreadPoolExecutor(max_workers=min(DELETE_THREADS, len(job.files))) as pool:
            list(pool.map(self._delete_loaded, job.files))
        state = mark_succeeded(state, job.job_id, self.now())
        self._save(state)
        record_feeds(self.bigquery, self.store.location.url, job)
        completed = CompletedLoad(state.job(job.job_id), stats, facts, input_bytes)
        report.completed.append(completed)
        check = completed.rows_check
        if check.passed is False:
            log.error(
                "load job %s (%s.%s): %s rows loaded, %s records staged (%s)",
                job.job_id,
                job.dataset,
                job.table,
                check.loaded,
                check.expected,
                check.source,
            )
        return state

    def _delete_loaded(self, name: str) -> None:
        self.store.delete(name)
        crash_point("avro_deleted")

    def _quarantine(
        self, state: LoadState, job: LoadJobRecord, error: str, reason: str, report: CycleReport
    ) -> LoadState:
        state = quarantine_job(state, job.job_id, self.now(), error)
        note = f"{QUARANTINE_PREFIX}{job.dataset}.{job.table}/{job.job_id}.json"
        self.store.put_bytes(note, _quarantine_note(state.job(job.job_id), error, self.now()))
        self._save(state)
        log.error("%s (note: %s)", reason, self.store.uri(note))
        report.quarantined.append(QuarantinedLoad(state.job(job.job_id), error, note))
        return state


def _quarantine_note(job: LoadJobRecord, error: str, now: datetime) -> bytes:
    doc = {
        "dataset": job.dataset,
        "table": job.table,
        "schema_id": job.schema_id,
        "attempt_ids": list(job.attempt_ids),
        "error": error,
        "quarantined_at": now.isoformat(),
        "files": list(job.files),
        "release": (
            "The files stay in the staging area, skipped by the load planner, and hold back "
            "done-file retention of their partitions. Fix the cause (schema, table, "
            "permissions), then release them with `kbqe load release --table DATASET.TABLE "
            "--yes` (schedules paused) so the next cycle loads them again."
        ),
    }
    return (json.dumps(doc, indent=1) + "\n").encode()
