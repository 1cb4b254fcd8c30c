"""Counters and histograms folded from the Dagster event log, one event at a time.

Three kinds of events feed them, each read through its metadata (plain values, already
unwrapped from Dagster's ``MetadataValue``):
- a materialization of ``staging`` is one stage run of one topic
  (``defs/staging/metadata.py`` ``stage_metadata``, its keys named in
  ``core/stage_runs/report_keys.py``): messages, records, bytes, files, orphans,
  dead letters and skips per reason, run seconds, and the rows and bytes appended through the
  Storage Write API per table (``storage_write_by_table``);
- an observation of ``staging`` with ``done_files_deleted`` is one retention run; one with
  ``leftovers_deleted`` is a load cycle that deleted late re-uploads under committed names;
- a materialization of a ``bigquery`` asset with a ``job_id`` is one (table, day) of a
  succeeded load job (``defs/bigquery/events.py``): rows, files, offset ranges, attempts.

A load job is reported once per day partition it wrote, so job-level figures are counted on
the job's first event and its files are de-duplicated by offset range across its events
(within one job every file comes from a different committed range). Jobs are remembered
only as long as the load state file may still list them (``keep_jobs_for``), which is what
:mod:`kbqe_dagster.observability.load_counts` needs to combine both sources without counting
a job twice; the totals themselves never forget.

Pure: no Dagster import, so the fold is tested with plain dictionaries.
"""

from __future__ import annotations

import bisect
import copy
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kbqe_dagster.core.stage_runs import report_keys as stage_report

STAGE_SECONDS_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
BATCH_MESSAGES_BUCKETS = (
    0.0,
    100.0,
    1_000.0,
    10_000.0,
    100_000.0,
    500_000.0,
    1_000_000.0,
    5_000_000.0,
    10_000_000.0,
)
UNKNOWN_DATASET = "unknown"
"""Dataset label of bytes from stage runs that did not report bytes per dataset (older runs)."""


@dataclass
class Histogram:
    """Observations counted into fixed upper bounds (Prometheus ``le`` buckets)."""

    bounds: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * (len(self.bounds) + 1)  # the last one is +Inf

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(self.bounds, value)] += 1
        self.total += value

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """``(upper bound, observations at or below it)``, ``inf`` last."""
        out, running = [], 0
        for bound, n in zip((*self.bounds, float("inf")), self.counts):
            running += n
            out.append((bound, running))
        return out


@dataclass
class TopicTotals:
    """Everything the stage runs of one topic reported."""

    runs: int = 0
    messages: int = 0
    records: int = 0
    bytes_written: int = 0
    files_written: int = 0
    orphans_deleted: int = 0
    tombstones: int = 0
    """Keyed topics: null values (Debezium's tombstones) counted, never staged."""
    dead_letters: Counter[str] = field(default_factory=Counter)
    skipped: Counter[str] = field(default_factory=Counter)
    run_seconds: Histogram = field(default_factory=lambda: Histogram(STAGE_SECONDS_BUCKETS))
    batch_messages: Histogram = field(default_factory=lambda: Histogram(BATCH_MESSAGES_BUCKETS))


@dataclass
class TableLoads:
    """Succeeded load jobs of one table, as reported on its asset."""

    jobs: int = 0
    attempts: int = 0
    """Submissions of those jobs: every attempt id was submitted once (409 = the same one)."""
    failed_attempts: int = 0
    """Attempts that failed and were retried under a new id before the job succeeded."""
    files_deleted: int = 0
    """Their avro files, deleted from the staging area once the job succeeded."""
    rows: int = 0
    bytes: int = 0
    """Input bytes of those jobs (the avro files loaded, free), counted once per job."""


@dataclass
class TableAppends:
    """What stage runs appended to one table through the Storage Write API (billed)."""

    rows: int = 0
    bytes: int = 0


@dataclass
class _Job:
    table: tuple[str, str]
    seen_at: float
    ranges: set[tuple[Any, ...]] = field(default_factory=set)
    files: int = 0


@dataclass
class EventTotals:
    topics: dict[str, TopicTotals] = field(default_factory=dict)
    bytes_by_dataset: Counter[tuple[str, str]] = field(default_factory=Counter)
    """Bytes written by (topic, dataset)."""
    tables: dict[tuple[str, str], TableLoads] = field(default_factory=dict)
    appends: dict[tuple[str, str], TableAppends] = field(default_factory=dict)
    """Rows and bytes appended through the Storage Write API, by (dataset, table)."""
    done_files_deleted: int = 0
    leftovers_deleted: int = 0
    """Objects under committed names that were not the pinned version: deleted, not loaded."""
    events: int = 0
    """Events folded so far."""
    _jobs: dict[str, _Job] = field(default_factory=dict)

    # --- stage runs ------------------------------------------------------------------------
    def add_stage_run(self, meta: Mapping[str, Any]) -> None:
        by_topic = meta.get(stage_report.BY_TOPIC)
        if meta.get(stage_report.TOPIC) is None and isinstance(by_topic, Mapping):
            # A grouped run (core/stage_runs/groups.py): each topic counts as a run of its own.
            for topic, share in by_topic.items():
                if isinstance(share, Mapping):
                    self.add_stage_run({**share, stage_report.TOPIC: topic})
            return
        topic = str(meta.get(stage_report.TOPIC) or "unknown")
        t = self.topics.setdefault(topic, TopicTotals())
        t.runs += 1
        messages = _int(meta.get(stage_report.MESSAGES))
        t.messages += messages
        t.records += _int(meta.get(stage_report.ROWS))
        written = _int(meta.get(stage_report.BYTES_WRITTEN))
        t.bytes_written += written
        t.files_written += _int(meta.get(stage_report.FILES_WRITTEN))
        t.orphans_deleted += _int(meta.get(stage_report.ORPHANS_DELETED))
        t.tombstones += _int(meta.get(stage_report.TOMBSTONES))
        t.dead_letters.update(_counts(meta.get(stage_report.DEAD_LETTERS_BY_REASON)))
        t.skipped.update(_counts(meta.get(stage_report.SKIPPED_BY_REASON)))
        t.batch_messages.observe(messages)
        if meta.get(stage_report.SECONDS) is not None:
            t.run_seconds.observe(float(meta[stage_report.SECONDS]))
        by_dataset = _counts(meta.get(stage_report.BYTES_WRITTEN_BY_DATASET))
        if by_dataset:
            for dataset, n in by_dataset.items():
                self.bytes_by_dataset[(topic, dataset)] += n
        elif written:
            self.bytes_by_dataset[(topic, UNKNOWN_DATASET)] += written
        self._add_appends(meta.get(stage_report.STORAGE_WRITE_BY_TABLE))
        self.events += 1

    def _add_appends(self, by_table: Any) -> None:
        if not isinstance(by_table, Mapping):
            return  # runs recorded before Storage Write delivery: nothing appended
        for table, appended in by_table.items():
            if not isinstance(appended, Mapping) or "." not in str(table):
                continue
            dataset, _, name = str(table).partition(".")
            totals = self.appends.setdefault((dataset, name), TableAppends())
            totals.rows += _int(appended.get("rows"))
            totals.bytes += _int(appended.get("bytes"))

    # --- retention -------------------------------------------------------------------------
    def add_staging_observation(self, meta: Mapping[str, Any]) -> None:
        """Only retention runs and leftover deletions count; the observation sensor's
        snapshots carry no deletions."""
        if "done_files_deleted" in meta:
            self.done_files_deleted += _int(meta["done_files_deleted"])
            self.events += 1
        if "leftovers_deleted" in meta:
            self.leftovers_deleted += _int(meta["leftovers_deleted"])
            self.events += 1

    # --- loads -----------------------------------------------------------------------------
    def add_load(self, meta: Mapping[str, Any], timestamp: float) -> None:
        """One (table, day) of a succeeded load job; ignored without ``job_id``/``table``."""
        job_id, table = meta.get("job_id"), meta.get("table")
        if not job_id or not isinstance(table, str) or "." not in table:
            return
        dataset, _, name = table.partition(".")
        totals = self.tables.setdefault((dataset, name), TableLoads())
        job = self._jobs.get(str(job_id))
        if job is None:
            job = self._jobs[str(job_id)] = _Job((dataset, name), timestamp)
            attempts = max(1, _int(meta.get("attempts")) or 1)
            totals.jobs += 1
            totals.attempts += attempts
            totals.failed_attempts += attempts - 1
            totals.bytes += _int(meta.get("job_input_bytes"))  # the job's, on each of its days
        before = max(len(job.ranges), job.files)
        job.ranges.update(_ranges(meta.get("offset_ranges")))
        job.files = max(job.files, _int(meta.get("files")))
        totals.files_deleted += max(len(job.ranges), job.files) - before
        totals.rows += _int(meta.get("dagster/row_count"))
        self.events += 1

    def recent_job_ids(self) -> frozenset[str]:
        return frozenset(self._jobs)

    def forget(self, *, jobs_before: float, ranges_before: float) -> None:
        """Per-job memory only, never totals: drop jobs first seen before ``jobs_before``, and
        the offset ranges of jobs seen before ``ranges_before`` (all events of one job are
        written by one op run, so its ranges are complete long before)."""
        self._jobs = {k: j for k, j in self._jobs.items() if j.seen_at >= jobs_before}
        for job in self._jobs.values():
            if job.ranges and job.seen_at < ranges_before:
                job.files, job.ranges = max(job.files, len(job.ranges)), set()

    def snapshot(self) -> EventTotals:
        """An independent copy for readers while the fold goes on (job ids, not ranges)."""
        jobs, self._jobs = self._jobs, {}
        try:
            copied = copy.deepcopy(self)
        finally:
            self._jobs = jobs
        copied._jobs = {k: _Job(j.table, j.seen_at, files=j.files) for k, j in jobs.items()}
        return copied


def _int(value: Any) -> int:
    if isinstance(value, bool) or value is None:
        return 0
    try:
        return int(value)
    except (TypeError, ValueError):
        return 0


def _counts(value: Any) -> dict[str, int]:
    if not isinstance(value, Mapping):
        return {}
    return {str(k): _int(v) for k, v in value.items() if _int(v)}


def _ranges(value: Any) -> set[tuple[Any, ...]]:
    if not isinstance(value, Sequence) or isinstance(value, (str, bytes)):
        return set()
    out = set()
    for r in value:
        if isinstance(r, Mapping):
            out.add((r.get("topic"), r.get("partition"), r.get("first"), r.get("last")))
    return out
