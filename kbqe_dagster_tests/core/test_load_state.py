"""The load state file: model, transitions, JSON round trip, corrupt state, backup writes."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from kbqe_dagster.core.errors import LoadError, StateFileError
from kbqe_dagster.core.load.selection import PlannedLoadJob
from kbqe_dagster.core.load.state import (
    STATE_BACKUP,
    STATE_FILE,
    JobStatus,
    LoadState,
    decode_state,
    encode_state,
    mark_failed,
    mark_submitted,
    mark_succeeded,
    plan_state_write,
    prune,
    quarantine_job,
    read_state,
    record_planned,
    release_quarantine,
    retry_job,
)
from kbqe_dagster.core.protocol.naming import parse_name

T0 = datetime(2024, 9, 13, 12, 0, tzinfo=UTC)


def planned(table: str = "orders", files: tuple[str, ...] = ("a.avro", "b.avro")):
    return PlannedLoadJob("sales", table, 3, files, tuple(f + ".done" for f in files), 42)


def busy_state() -> LoadState:
    """One job in every status, and a quarantined file."""
    state = LoadState()
    state = record_planned(state, planned("t1", ("p.avro",)), "job-planned", T0)
    state = record_planned(state, planned("t2", ("s.avro",)), "job-submitted", T0)
    state = mark_submitted(state, "job-submitted", T0 + timedelta(seconds=5))
    state = record_planned(state, planned("t3", ("ok.avro",)), "job-ok", T0)
    state = mark_succeeded(state, "job-ok", T0 + timedelta(minutes=3))
    state = record_planned(state, planned("t4", ("f.avro",)), "job-failed", T0)
    state = mark_failed(state, "job-failed", T0, "Error while reading data")
    state = record_planned(state, planned("t5", ("q.avro",)), "job-q1", T0)
    state = retry_job(state, "job-q1", "job-q2", T0, "first error")
    state = quarantine_job(state, "job-q2", T0 + timedelta(hours=1), "schema mismatch: é")
    return state


def test_a_state_survives_a_json_round_trip() -> None:
    state = busy_state()
    assert decode_state(encode_state(state)) == state
    assert {j.status for j in state.jobs} == set(JobStatus)


def test_the_json_form_is_versioned() -> None:
    doc = json.loads(encode_state(LoadState()))
    assert doc == {"kbqe_load_state": 1, "jobs": [], "quarantined": []}


def test_files_of_unfinished_jobs_are_pending() -> None:
    state = busy_state()
    assert state.pending_files() == {"p.avro", "s.avro", "f.avro"}
    assert state.quarantined_files() == {"q.avro"}
    assert state.quarantined_tables() == {("sales", "t5")}


def test_a_file_cannot_be_planned_into_two_pending_jobs() -> None:
    state = record_planned(LoadState(), planned(files=("a.avro", "b.avro")), "j1", T0)
    with pytest.raises(LoadError, match="b.avro"):
        record_planned(state, planned(files=("b.avro", "c.avro")), "j2", T0)


def test_a_job_id_is_never_reused() -> None:
    state = retry_job(record_planned(LoadState(), planned(), "j1", T0), "j1", "j2", T0)
    with pytest.raises(LoadError, match="j1"):
        record_planned(state, planned(files=("z.avro",)), "j1", T0)
    with pytest.raises(LoadError, match="j1"):
        retry_job(state, "j2", "j1", T0)


def test_a_retry_keeps_the_files_under_a_new_id_and_remembers_the_old_one() -> None:
    state = record_planned(LoadState(), planned(), "j1", T0)
    state = mark_submitted(state, "j1", T0)
    state = retry_job(state, "j1", "j2", T0 + timedelta(minutes=1), "boom")
    job = state.job("j2")
    assert (job.status, job.retry_count, job.attempt_ids) == (JobStatus.PLANNED, 1, ("j1", "j2"))
    assert (job.files, job.submitted_at, job.last_error) == (("a.avro", "b.avro"), None, "boom")
    with pytest.raises(LoadError, match="j1"):
        state.job("j1")


def test_quarantine_sets_files_aside_until_an_operator_releases_them() -> None:
    state = record_planned(LoadState(), planned(), "j1", T0)
    state = quarantine_job(state, "j1", T0, "bad")
    assert state.job("j1").status is JobStatus.QUARANTINED
    assert [(q.file, q.table, q.error) for q in state.quarantined] == [
        ("a.avro", "orders", "bad"),
        ("b.avro", "orders", "bad"),
    ]
    assert state.pending_files() == frozenset()
    assert release_quarantine(state, ["a.avro"]).quarantined_files() == {"b.avro"}


def test_pruning_drops_only_long_finished_jobs() -> None:
    state = busy_state()
    later = T0 + timedelta(days=2)
    kept = {j.job_id for j in prune(state, later, timedelta(days=1)).jobs}
    # succeeded: dropped; quarantined with files still held: kept; pending: kept.
    assert kept == {"job-planned", "job-submitted", "job-failed", "job-q2"}
    released = release_quarantine(state, ["q.avro"])
    assert "job-q2" not in {j.job_id for j in prune(released, later, timedelta(days=1)).jobs}
    assert prune(state, T0 + timedelta(minutes=5), timedelta(days=1)) == state


def test_marking_a_job_submitted_twice_keeps_the_first_submission_time() -> None:
    state = record_planned(LoadState(), planned(), "j1", T0)
    state = mark_submitted(state, "j1", T0 + timedelta(seconds=1))
    state = mark_submitted(state, "j1", T0 + timedelta(minutes=9))
    assert state.job("j1").submitted_at == T0 + timedelta(seconds=1)


VALID = encode_state(busy_state())


def corrupt_field(field: str, value) -> bytes:
    doc = json.loads(VALID)
    doc["jobs"][0][field] = value
    return json.dumps(doc).encode()


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"", "not valid JSON"),
        (b'{"kbqe_load_state": 1, "jobs": [', "not valid JSON"),
        (b"\xff\xfe", "not valid JSON"),
        (b"[]", "not a kbqe load state"),
        (b'{"jobs": []}', "not a kbqe load state"),
        (b'{"kbqe_load_state": 2, "jobs": [], "quarantined": []}', "newer release"),
        (b'{"kbqe_load_state": 1, "jobs": []}', "malformed entry"),
        (corrupt_field("status", "exploded"), "malformed entry"),
        (corrupt_field("files", "a.avro"), "malformed entry"),
        (corrupt_field("retry_count", "1"), "malformed entry"),
        (corrupt_field("created_at", "yesterday"), "malformed entry"),
        (corrupt_field("created_at", "2024-09-13T12:00:00"), "malformed entry"),
    ],
)
def test_a_corrupt_state_is_an_error_never_an_empty_state(content: bytes, problem: str) -> None:
    with pytest.raises(StateFileError, match=problem) as caught:
        read_state(content)
    message = str(caught.value)
    assert STATE_FILE in message
    assert "load its files twice" in message and "no backup exists" in message


def test_a_corrupt_state_with_a_good_backup_says_to_restore_the_backup() -> None:
    with pytest.raises(StateFileError, match=f"copy {STATE_BACKUP}.*over {STATE_FILE}"):
        read_state(b"garbage", VALID)


def test_a_corrupt_state_with_a_corrupt_backup_says_both_are_unusable() -> None:
    with pytest.raises(StateFileError, match="the backup is unusable too"):
        read_state(b"garbage", b"also garbage")


def test_a_missing_state_with_a_backup_is_an_error() -> None:
    with pytest.raises(StateFileError, match="missing but its backup"):
        read_state(None, VALID)


def test_a_fresh_staging_area_starts_with_an_empty_state() -> None:
    assert read_state(None, None) == LoadState()


def test_a_readable_state_is_read() -> None:
    assert read_state(VALID, b"whatever the backup holds") == busy_state()


def test_the_state_file_name_is_not_a_staging_file_name() -> None:
    assert parse_name(STATE_FILE) is None and parse_name(STATE_BACKUP) is None


def test_a_state_write_keeps_the_previous_version_as_backup_first() -> None:
    new = busy_state()
    writes = plan_state_write(new, b"previous content")
    assert [(w.path, w.content) for w in writes] == [
        (STATE_BACKUP, b"previous content"),
        (STATE_FILE, encode_state(new)),
    ]


def test_the_first_state_write_has_no_backup_and_an_unchanged_state_no_write() -> None:
    assert [w.path for w in plan_state_write(LoadState(), None)] == [STATE_FILE]
    assert plan_state_write(busy_state(), VALID) == ()
