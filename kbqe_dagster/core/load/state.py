"""The load state file: every BigQuery load job kbqe planned, and where it stands
(DESIGN.md §4). The model, its JSON form and its transitions; the I/O is done elsewhere.

The state file lives in the staging area (``_kbqe/load_state.json``, a name that never parses
as a staging file name). A job is recorded (``planned``) *before* it is submitted, so a crash
at any point leaves a job id that the next poll can resubmit safely — BigQuery answers 409
Conflict for an id it already has. Lifecycle of one record::

    planned ──submit──▶ submitted ──done ok──▶ succeeded (after its avro files are deleted)
       │                    │
       └────────────────────┴──done with error──▶ failed ──▶ planned again under a new id
                                                            (retry_count < max) or quarantined

Files of ``planned``/``submitted``/``failed`` records are *pending*: selection never puts them
into another job. Quarantined files are set aside (with their table and error) until an
operator releases them; the table's asset check fails meanwhile, other tables keep loading.

A corrupt or unreadable state is never replaced by an empty one: a forgotten running job
plus resubmitted files means duplicates. :func:`read_state` raises :class:`StateFileError`
with the safe recovery path; :func:`plan_state_write` keeps the previous version as
``load_state.json.bak``. The lifecycle decisions live in ``core/load/lifecycle.py``.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from kbqe_dagster.core.errors import LoadError, StateFileError
from kbqe_dagster.core.load.selection import PlannedLoadJob

STATE_FILE = "_kbqe/load_state.json"
STATE_BACKUP = "_kbqe/load_state.json.bak"
STATE_VERSION = 1


class JobStatus(StrEnum):
    PLANNED = "planned"  # recorded, maybe not yet submitted
    SUBMITTED = "submitted"  # BigQuery has (or had) the job
    SUCCEEDED = "succeeded"  # loaded, and its avro files deleted
    FAILED = "failed"  # the current attempt failed; retry or quarantine comes next
    QUARANTINED = "quarantined"  # gave up; files set aside for an operator


PENDING_STATUSES = frozenset({JobStatus.PLANNED, JobStatus.SUBMITTED, JobStatus.FAILED})


@dataclass(frozen=True)
class LoadJobRecord:
    """One load of a fixed set of files; ``job_id`` is the current attempt's id and
    ``attempt_ids`` every id this load has had, oldest first (the current one last)."""

    job_id: str
    dataset: str
    table: str
    schema_id: int
    files: tuple[str, ...]
    created_at: datetime
    updated_at: datetime
    done_files: tuple[str, ...] = ()
    records: int | None = None
    status: JobStatus = JobStatus.PLANNED
    retry_count: int = 0
    attempt_ids: tuple[str, ...] = ()
    submitted_at: datetime | None = None
    last_error: str | None = None

    @property
    def is_pending(self) -> bool:
        return self.status in PENDING_STATUSES

    @property
    def table_id(self) -> tuple[str, str]:
        return (self.dataset, self.table)


@dataclass(frozen=True)
class QuarantinedFile:
    file: str
    dataset: str
    table: str
    job_id: str
    error: str
    quarantined_at: datetime


@dataclass(frozen=True)
class LoadState:
    jobs: tuple[LoadJobRecord, ...] = ()
    quarantined: tuple[QuarantinedFile, ...] = field(default=())

    def job(self, job_id: str) -> LoadJobRecord:
        for job in self.jobs:
            if job.job_id == job_id:
                return job
        raise LoadError(f"load job {job_id} is not in the load state")

    def pending_jobs(self) -> tuple[LoadJobRecord, ...]:
        return tuple(j for j in self.jobs if j.is_pending)

    def pending_files(self) -> frozenset[str]:
        return frozenset(f for j in self.jobs if j.is_pending for f in j.files)

    def quarantined_files(self) -> frozenset[str]:
        return frozenset(q.file for q in self.quarantined)

    def quarantined_tables(self) -> frozenset[tuple[str, str]]:
        return frozenset((q.dataset, q.table) for q in self.quarantined)


# --- transitions ---------------------------------------------------------------------------
def record_planned(state: LoadState, job: PlannedLoadJob, job_id: str, now: datetime) -> LoadState:
    """Add a planned job; write the state before submitting it."""
    known_ids = {i for j in state.jobs for i in (j.job_id, *j.attempt_ids)}
    if job_id in known_ids:
        raise LoadError(f"load job id {job_id} is already in the load state")
    overlap = state.pending_files() & set(job.files)
    if overlap:
        raise LoadError(
            f"load job {job_id} for {job.dataset}.{job.table} would load "
            f"{len(overlap)} file(s) already in a pending job, e.g. {min(overlap)}"
        )
    record = LoadJobRecord(
        job_id=job_id,
        dataset=job.dataset,
        table=job.table,
        schema_id=job.schema_id,
        files=job.files,
        done_files=job.done_files,
        records=job.records,
        created_at=now,
        updated_at=now,
        attempt_ids=(job_id,),
    )
    return replace(state, jobs=state.jobs + (record,))


def _update(state: LoadState, job_id: str, **changes: Any) -> LoadState:
    state.job(job_id)  # raises for an unknown id
    return replace(
        state,
        jobs=tuple(replace(j, **changes) if j.job_id == job_id else j for j in state.jobs),
    )


def mark_submitted(state: LoadState, job_id: str, now: datetime) -> LoadState:
    """BigQuery accepted the job, or answered 409 (it already had it)."""
    submitted_at = state.job(job_id).submitted_at or now
    return _update(
        state, job_id, status=JobStatus.SUBMITTED, submitted_at=submitted_at, updated_at=now
    )


def mark_succeeded(state: LoadState, job_id: str, now: datetime) -> LoadState:
    """Only after the job's avro files are deleted: marking first and crashing before the
    delete would leave loaded files with no pending job — selected and loaded again."""
    return _update(state, job_id, status=JobStatus.SUCCEEDED, updated_at=now, last_error=None)


def mark_failed(state: LoadState, job_id: str, now: datetime, error: str) -> LoadState:
    return _update(state, job_id, status=JobStatus.FAILED, updated_at=now, last_error=error)


def retry_job(
    state: LoadState, job_id: str, new_job_id: str, now: datetime, error: str | None = None
) -> LoadState:
    """The same files again under a new id (an id that failed cannot be reused)."""
    job = state.job(job_id)
    if any(new_job_id in (j.job_id, *j.attempt_ids) for j in state.jobs):
        raise LoadError(f"retry id {new_job_id} for load job {job_id} is already used")
    retried = replace(
        job,
        job_id=new_job_id,
        status=JobStatus.PLANNED,
        retry_count=job.retry_count + 1,
        attempt_ids=job.attempt_ids + (new_job_id,),
        submitted_at=None,
        updated_at=now,
        last_error=error or job.last_error,
    )
    return replace(state, jobs=tuple(retried if j is job else j for j in state.jobs))


def quarantine_job(state: LoadState, job_id: str, now: datetime, error: str) -> LoadState:
    """Give up on a job: its files are set aside; other tables keep loading."""
    job = state.job(job_id)
    already = state.quarantined_files()
    added = tuple(
        QuarantinedFile(f, job.dataset, job.table, job_id, error, now)
        for f in job.files
        if f not in already
    )
    updated = _update(state, job_id, status=JobStatus.QUARANTINED, updated_at=now, last_error=error)
    return replace(updated, quarantined=state.quarantined + added)


def release_quarantine(state: LoadState, files: Iterable[str]) -> LoadState:
    """Operator: make quarantined files loadable again (after fixing the cause)."""
    released = set(files)
    return replace(state, quarantined=tuple(q for q in state.quarantined if q.file not in released))


def prune(state: LoadState, now: datetime, keep_finished_for: timedelta) -> LoadState:
    """Drop succeeded jobs, and quarantined jobs whose files were all released, that finished
    more than ``keep_finished_for`` ago; the state file stays small."""
    cutoff = now - keep_finished_for
    held = state.quarantined_files()

    def keep(job: LoadJobRecord) -> bool:
        if job.updated_at >= cutoff or job.is_pending:
            return True
        if job.status is JobStatus.QUARANTINED:
            return any(f in held for f in job.files)
        return False

    return replace(state, jobs=tuple(j for j in state.jobs if keep(j)))


# --- JSON ----------------------------------------------------------------------------------
def encode_state(state: LoadState) -> bytes:
    doc = {
        "kbqe_load_state": STATE_VERSION,
        "jobs": [_job_to_json(j) for j in state.jobs],
        "quarantined": [
            {
                "file": q.file,
                "dataset": q.dataset,
                "table": q.table,
                "job_id": q.job_id,
                "error": q.error,
                "quarantined_at": q.quarantined_at.isoformat(),
            }
            for q in state.quarantined
        ],
    }
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def _job_to_json(job: LoadJobRecord) -> dict[str, Any]:
    return {
        "job_id": job.job_id,
        "dataset": job.dataset,
        "table": job.table,
        "schema_id": job.schema_id,
        "files": list(job.files),
        "done_files": list(job.done_files),
        "records": job.records,
        "status": job.status.value,
        "retry_count": job.retry_count,
        "attempt_ids": list(job.attempt_ids),
        "created_at": job.created_at.isoformat(),
        "updated_at": job.updated_at.isoformat(),
        "submitted_at": job.submitted_at.isoformat() if job.submitted_at else None,
        "last_error": job.last_error,
    }


def decode_state(content: bytes, source: str = STATE_FILE) -> LoadState:
    """Parse a state file; :class:`StateFileError` naming ``source`` and the problem."""
    try:
        doc = json.loads(content)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise StateFileError(f"load state {source} is not valid JSON: {exc}") from exc
    if not isinstance(doc, dict) or "kbqe_load_state" not in doc:
        raise StateFileError(f"load state {source} is not a kbqe load state (no version field)")
    if doc["kbqe_load_state"] != STATE_VERSION:
        raise StateFileError(
            f"load state {source} has version {doc['kbqe_load_state']!r}; this kbqe_dagster "
            f"reads version {STATE_VERSION} (written by a newer release? upgrade, do not delete)"
        )
    try:
        jobs = tuple(_job_from_json(j) for j in _list(doc["jobs"]))
        quarantined = tuple(
            QuarantinedFile(
                _str(q["file"]),
                _str(q["dataset"]),
                _str(q["table"]),
                _str(q["job_id"]),
                _str(q["error"]),
                _time(q["quarantined_at"]),
            )
            for q in _list(doc["quarantined"])
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise StateFileError(f"load state {source} has a malformed entry: {exc!r}") from exc
    return LoadState(jobs, quarantined)


def _str(value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r}")
    return value


def _time(value: Any) -> datetime:
    parsed = datetime.fromisoformat(_str(value))
    if parsed.tzinfo is None:
        raise ValueError(f"timestamp {value!r} has no time zone")
    return parsed


def _list(value: Any) -> list[Any]:
    if not isinstance(value, list):
        raise TypeError(f"expected a list, got {value!r}")
    return value


def _int(value: Any) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"expected an integer, got {value!r}")
    return value


def _job_from_json(j: dict[str, Any]) -> LoadJobRecord:
    submitted = j["submitted_at"]
    return LoadJobRecord(
        job_id=_str(j["job_id"]),
        dataset=_str(j["dataset"]),
        table=_str(j["table"]),
        schema_id=_int(j["schema_id"]),
        files=tuple(_str(f) for f in _list(j["files"])),
        done_files=tuple(_str(f) for f in _list(j["done_files"])),
        records=None if j["records"] is None else _int(j["records"]),
        status=JobStatus(j["status"]),
        retry_count=_int(j["retry_count"]),
        attempt_ids=tuple(_str(i) for i in _list(j["attempt_ids"])),
        created_at=_time(j["created_at"]),
        updated_at=_time(j["updated_at"]),
        submitted_at=None if submitted is None else _time(submitted),
        last_error=None if j["last_error"] is None else _str(j["last_error"]),
    )


def read_state(current: bytes | None, backup: bytes | None = None) -> LoadState:
    """The load state from the contents of the state file and its backup (``None`` = absent).

    Neither file → a fresh staging area: empty state. Anything else unreadable raises
    :class:`StateFileError` with the safe recovery path; it never falls back to empty.
    """
    if current is None and backup is None:
        return LoadState()
    if current is None:
        raise StateFileError(
            f"load state {STATE_FILE} is missing but its backup {STATE_BACKUP} exists. "
            + _recovery_path(backup)
        )
    try:
        return decode_state(current, STATE_FILE)
    except StateFileError as exc:
        raise StateFileError(f"{exc}. {_recovery_path(backup)}") from exc


def _recovery_path(backup: bytes | None) -> str:
    stop = (
        "Loading is stopped: starting from an empty state could forget a running load job "
        "and load its files twice. Safe recovery: "
    )
    manual = (
        "wait until BigQuery lists no running kbqe load job (ids start with the configured "
        "prefix), delete the staged avro files that are source URIs of every succeeded kbqe "
        f"job, then delete {STATE_FILE} to start empty."
    )
    if backup is not None:
        try:
            decode_state(backup, STATE_BACKUP)
        except StateFileError as exc:
            return f"{stop}the backup is unusable too ({exc}); {manual}"
        return (
            f"{stop}copy {STATE_BACKUP} (the previous version) over {STATE_FILE}; the next "
            "poll re-checks every job it lists and resubmits none BigQuery already has. "
            f"If that is not possible: {manual}"
        )
    return f"{stop}no backup exists; {manual}"


@dataclass(frozen=True)
class StateWrite:
    path: str
    content: bytes


def plan_state_write(new: LoadState, previous: bytes | None) -> tuple[StateWrite, ...]:
    """The writes that replace the state, in order: the previous content to the backup,
    then the new state. Nothing when the content is unchanged."""
    content = encode_state(new)
    if previous == content:
        return ()
    backup = (StateWrite(STATE_BACKUP, previous),) if previous is not None else ()
    return backup + (StateWrite(STATE_FILE, content),)
