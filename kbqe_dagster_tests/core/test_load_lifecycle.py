"""Load job lifecycle: what the coordinator does for a recorded job and BigQuery's view of it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kbqe_dagster.core.load.lifecycle import (
    Action,
    ObservedJob,
    ObservedKind,
    SubmitOutcome,
    classify_submit,
    job_decision,
)
from kbqe_dagster.core.load.selection import PlannedLoadJob, make_job_id, plan_load_jobs
from kbqe_dagster.core.load.state import (
    JobStatus,
    LoadJobRecord,
    LoadState,
    mark_failed,
    mark_submitted,
    mark_succeeded,
    quarantine_job,
    record_planned,
    retry_job,
)

T0 = datetime(2024, 9, 13, 12, 0, tzinfo=UTC)
STUCK_AFTER = timedelta(hours=6)
UNKNOWN = ObservedJob(ObservedKind.UNKNOWN)
RUNNING = ObservedJob(ObservedKind.RUNNING)
PENDING = ObservedJob(ObservedKind.PENDING)
DONE_OK = ObservedJob(ObservedKind.DONE_OK)


def job(status: JobStatus = JobStatus.SUBMITTED, **changes) -> LoadJobRecord:
    fields = dict(
        job_id="kbqe_sales_orders_1",
        dataset="sales",
        table="orders",
        schema_id=3,
        files=("a.avro",),
        created_at=T0,
        updated_at=T0,
        status=status,
        submitted_at=T0 if status is JobStatus.SUBMITTED else None,
    )
    fields.update(changes)
    return LoadJobRecord(**fields)


def decide_now(
    record: LoadJobRecord,
    observed: ObservedJob,
    *,
    after=timedelta(minutes=2),
    max_retries: int = 2,
):
    return job_decision(
        record, observed, T0 + after, max_retries=max_retries, stuck_after=STUCK_AFTER
    )


@pytest.mark.parametrize("status", [JobStatus.PLANNED, JobStatus.SUBMITTED])
def test_a_job_bigquery_does_not_know_is_resubmitted_under_its_recorded_id(
    status: JobStatus,
) -> None:
    decision = decide_now(job(status), UNKNOWN)
    assert decision.action is Action.SUBMIT
    assert "kbqe_sales_orders_1" in decision.reason


@pytest.mark.parametrize(
    "code, outcome",
    [
        (200, SubmitOutcome.SUBMITTED),
        (409, SubmitOutcome.ALREADY_SUBMITTED),
        (None, SubmitOutcome.TRANSIENT),
        (429, SubmitOutcome.TRANSIENT),
        (503, SubmitOutcome.TRANSIENT),
        (400, SubmitOutcome.REJECTED),
        (403, SubmitOutcome.REJECTED),
    ],
)
def test_a_409_on_submit_means_already_submitted_not_failure(code, outcome) -> None:
    assert classify_submit(code) is outcome


@pytest.mark.parametrize("observed", [PENDING, RUNNING])
def test_a_running_job_is_waited_for(observed: ObservedJob) -> None:
    decision = decide_now(job(), observed)
    assert (decision.action, decision.mark_submitted) == (Action.WAIT, False)


def test_a_job_bigquery_knows_but_the_state_calls_planned_is_marked_submitted() -> None:
    decision = decide_now(job(JobStatus.PLANNED), RUNNING)
    assert (decision.action, decision.mark_submitted) == (Action.WAIT, True)


def test_a_job_running_past_the_limit_is_reported_not_resubmitted() -> None:
    decision = decide_now(job(), RUNNING, after=STUCK_AFTER + timedelta(minutes=1))
    assert decision.action is Action.REPORT_STUCK
    assert "running since 2024-09-13T12:00:00+00:00" in decision.reason


def test_a_succeeded_job_deletes_its_avro_files_before_being_marked() -> None:
    assert decide_now(job(), DONE_OK).action is Action.COMPLETE
    assert decide_now(job(JobStatus.PLANNED), DONE_OK).action is Action.COMPLETE


@pytest.mark.parametrize(
    "retry_count, action", [(0, Action.RETRY), (1, Action.RETRY), (2, Action.QUARANTINE)]
)
def test_a_failed_job_is_retried_then_quarantined(retry_count: int, action: Action) -> None:
    observed = ObservedJob(ObservedKind.DONE_ERROR, "Provided Schema does not match")
    decision = decide_now(job(retry_count=retry_count), observed, max_retries=2)
    assert decision.action is action
    assert "Provided Schema does not match" in decision.reason


def test_a_recorded_failure_leads_to_retry_whatever_bigquery_says() -> None:
    failed = job(JobStatus.FAILED, last_error="rejected: 400")
    assert decide_now(failed, UNKNOWN).action is Action.RETRY


@pytest.mark.parametrize("status", [JobStatus.SUCCEEDED, JobStatus.QUARANTINED])
def test_finished_jobs_need_nothing(status: JobStatus) -> None:
    assert decide_now(job(status), DONE_OK).action is Action.NONE


def test_a_failing_load_walks_from_plan_to_quarantine_and_leaves_selection() -> None:
    names = ["orders.0.sales.orders.3.0.avro", "orders.0.sales.orders.3.0.9.done"]
    (planned,) = plan_load_jobs(names)
    job_id = make_job_id(planned.dataset, planned.table, T0, token="a")
    state = record_planned(LoadState(), planned, job_id, T0)
    assert plan_load_jobs(names, pending=state.pending_files()) == ()

    error = ObservedJob(ObservedKind.DONE_ERROR, "bad avro")
    for attempt in range(3):
        current = state.pending_jobs()[0]
        assert decide_now(current, UNKNOWN).action is Action.SUBMIT
        state = mark_submitted(state, current.job_id, T0)
        decision = decide_now(state.job(current.job_id), error, max_retries=2)
        if decision.action is Action.RETRY:
            new_id = make_job_id(planned.dataset, planned.table, T0, token=f"r{attempt}")
            state = retry_job(state, current.job_id, new_id, T0, error.error)
    assert decision.action is Action.QUARANTINE
    state = quarantine_job(state, current.job_id, T0, decision.reason)

    final = state.job(current.job_id)
    assert (final.status, final.retry_count, len(final.attempt_ids)) == (
        JobStatus.QUARANTINED,
        2,
        3,
    )
    assert state.quarantined_files() == {"orders.0.sales.orders.3.0.avro"}
    assert (
        plan_load_jobs(names, pending=state.pending_files(), quarantined=state.quarantined_files())
        == ()
    )


def test_a_rejected_submission_counts_as_a_failed_attempt() -> None:
    state = record_planned(LoadState(), PlannedLoadJob("sales", "o", 1, ("x.avro",), ()), "j1", T0)
    assert classify_submit(400) is SubmitOutcome.REJECTED
    state = mark_failed(state, "j1", T0, "400 invalid")
    assert decide_now(state.job("j1"), UNKNOWN).action is Action.RETRY


def test_a_successful_load_ends_succeeded_with_nothing_pending() -> None:
    state = record_planned(LoadState(), PlannedLoadJob("sales", "o", 1, ("x.avro",), ()), "j1", T0)
    state = mark_submitted(state, "j1", T0)
    assert decide_now(state.job("j1"), DONE_OK).action is Action.COMPLETE
    state = mark_succeeded(state, "j1", T0 + timedelta(minutes=3))
    assert state.job("j1").status is JobStatus.SUCCEEDED
    assert state.pending_files() == frozenset()
