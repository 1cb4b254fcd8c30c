"""Load job lifecycle decisions: given a recorded job and what BigQuery says about it, what
the load coordinator does next (DESIGN.md §4). Pure; the coordinator does the I/O and then
applies the matching transition of ``core/load/state.py``.

| recorded status        | BigQuery says          | action                                        |
|------------------------|------------------------|-----------------------------------------------|
| succeeded, quarantined | anything               | NONE                                          |
| failed                 | anything               | RETRY (retry_count < max) else QUARANTINE     |
| planned, submitted     | unknown                | SUBMIT under the recorded id (409 = it exists)|
| planned, submitted     | pending, running       | WAIT, or REPORT_STUCK past ``stuck_after``    |
| planned, submitted     | done_ok                | COMPLETE: delete the avro files, then succeed |
| planned, submitted     | done_error             | RETRY (retry_count < max) else QUARANTINE     |

``mark_submitted`` is set when BigQuery knows a job the state still calls ``planned`` (the
coordinator crashed between submitting and recording it). A stuck job is reported, never
crashed on and never resubmitted: BigQuery may still finish it, and a second job for the
same files would load them twice.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from kbqe_dagster.core.load.state import JobStatus, LoadJobRecord


class ObservedKind(StrEnum):
    UNKNOWN = "unknown"  # BigQuery has no job with this id (404)
    PENDING = "pending"
    RUNNING = "running"
    DONE_OK = "done_ok"
    DONE_ERROR = "done_error"


@dataclass(frozen=True)
class ObservedJob:
    """BigQuery's view of one job id; ``error`` is the job's error result when it failed."""

    kind: ObservedKind
    error: str | None = None


class Action(StrEnum):
    NONE = "none"
    SUBMIT = "submit"  # submit under the recorded id; then mark_submitted
    WAIT = "wait"
    REPORT_STUCK = "report_stuck"  # keep waiting, and tell an operator
    COMPLETE = "complete"  # delete the job's avro files, then mark_succeeded
    RETRY = "retry"  # retry_job with a new id, then submit it
    QUARANTINE = "quarantine"  # quarantine_job


@dataclass(frozen=True)
class JobDecision:
    action: Action
    reason: str
    mark_submitted: bool = False


def job_decision(
    job: LoadJobRecord,
    observed: ObservedJob,
    now: datetime,
    *,
    max_retries: int,
    stuck_after: timedelta,
) -> JobDecision:
    """The next step for ``job`` (see the module table)."""
    what = f"load job {job.job_id} ({job.dataset}.{job.table}, {len(job.files)} files)"
    if job.status in (JobStatus.SUCCEEDED, JobStatus.QUARANTINED):
        return JobDecision(Action.NONE, f"{what} is {job.status.value}")
    if job.status is JobStatus.FAILED:
        return _after_failure(job, job.last_error or "failed", max_retries, what)
    if observed.kind is ObservedKind.UNKNOWN:
        return JobDecision(
            Action.SUBMIT,
            f"BigQuery does not know {what}: submit it under its recorded id",
        )
    if observed.kind is ObservedKind.DONE_OK:
        return JobDecision(Action.COMPLETE, f"{what} succeeded: delete its avro files")
    if observed.kind is ObservedKind.DONE_ERROR:
        return _after_failure(job, observed.error or "unknown error", max_retries, what)
    mark = job.status is JobStatus.PLANNED
    since = job.submitted_at or job.created_at
    if now - since > stuck_after:
        return JobDecision(
            Action.REPORT_STUCK,
            f"{what} has been {observed.kind.value} since {since.isoformat()} "
            f"(over {stuck_after}); still waiting — check it in BigQuery",
            mark,
        )
    return JobDecision(Action.WAIT, f"{what} is {observed.kind.value}", mark)


def _after_failure(job: LoadJobRecord, error: str, max_retries: int, what: str) -> JobDecision:
    if job.retry_count < max_retries:
        return JobDecision(
            Action.RETRY,
            f"{what} failed (attempt {job.retry_count + 1} of {max_retries + 1}): {error}",
        )
    return JobDecision(
        Action.QUARANTINE,
        f"{what} failed {job.retry_count + 1} times, quarantining its files: {error}",
    )


class SubmitOutcome(StrEnum):
    SUBMITTED = "submitted"  # mark_submitted
    ALREADY_SUBMITTED = "already_submitted"  # 409: the id exists — mark_submitted, not a failure
    TRANSIENT = "transient"  # stay planned; the next poll resubmits the same id
    REJECTED = "rejected"  # mark_failed; retry or quarantine follows


def classify_submit(status_code: int | None) -> SubmitOutcome:
    """What a submission's HTTP status means; ``None``: no answer (timeout, connection)."""
    if status_code is not None and 200 <= status_code < 300:
        return SubmitOutcome.SUBMITTED
    if status_code == 409:
        return SubmitOutcome.ALREADY_SUBMITTED
    if status_code is None or status_code in (408, 429) or status_code >= 500:
        # The job may or may not exist now; resubmitting the same id is safe either way.
        return SubmitOutcome.TRANSIENT
    return SubmitOutcome.REJECTED
