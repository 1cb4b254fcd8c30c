"""Load job counters per table, from the two durable records of load jobs.

- The event log holds every job that **succeeded** on a declared table, forever (its
  materializations carry the job id and its number of attempts), but nothing about jobs still
  running, failing or given up.
- The load state file holds the jobs that are planned, submitted, failed or quarantined, and
  the finished ones for ``retention.keep_load_history``, then forgets them.

A counter computed from both at scrape time: every job of the state file that the event log
has not reported yet, plus everything the event log reported. A job moves from one side to
the other with the same figures (attempts = retries + 1), so the counters only grow — except
when quarantined files are released and their job later pruned, or a job of a table no
longer declared is pruned; Prometheus treats such a step down as a counter reset.

Pure: tested over plain load states and event totals.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass

from kbqe_dagster.core.load.state import JobStatus, LoadJobRecord, LoadState
from kbqe_dagster.observability.event_totals import EventTotals


@dataclass
class LoadCounts:
    submitted: int = 0
    """Load job attempts submitted to BigQuery (a resubmission of the same id counts once)."""
    failed: int = 0
    """Attempts BigQuery ran and failed (each is retried under a new id or quarantined)."""
    succeeded: int = 0
    files_deleted: int = 0
    """Avro files deleted from the staging area because their job succeeded."""
    rows: int = 0
    """Rows loaded, as reported on the tables' assets (BigQuery's job statistics)."""


def load_counts(totals: EventTotals, state: LoadState) -> dict[tuple[str, str], LoadCounts]:
    counts: dict[tuple[str, str], LoadCounts] = defaultdict(LoadCounts)
    for table, loads in totals.tables.items():
        c = counts[table]
        c.submitted += loads.attempts
        c.failed += loads.failed_attempts
        c.succeeded += loads.jobs
        c.files_deleted += loads.files_deleted
        c.rows += loads.rows
    reported = totals.recent_job_ids()
    for job in state.jobs:
        if job.status is JobStatus.SUCCEEDED and job.job_id in reported:
            continue
        c = counts[job.table_id]
        c.submitted += submitted_attempts(job)
        c.failed += failed_attempts(job)
        if job.status is JobStatus.SUCCEEDED:
            c.succeeded += 1
            c.files_deleted += len(job.files)
    return dict(counts)


def submitted_attempts(job: LoadJobRecord) -> int:
    """Every retry followed a submitted attempt; the current one counts once it left
    ``planned`` (a refused submission is a submission too)."""
    return job.retry_count + (0 if job.status is JobStatus.PLANNED else 1)


def failed_attempts(job: LoadJobRecord) -> int:
    current = job.status in (JobStatus.FAILED, JobStatus.QUARANTINED)
    return job.retry_count + (1 if current else 0)


def jobs_by_status(state: LoadState) -> Counter[tuple[str, str, str]]:
    """(dataset, table, status) → jobs in the state file now."""
    return Counter((j.dataset, j.table, j.status.value) for j in state.jobs)
