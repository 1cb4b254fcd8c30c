"""Load job counters from the load state file and the event log together: a job counts
once, with the same figures on either side, so the counters only grow through its life."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from kbqe_dagster.core.load.selection import PlannedLoadJob
from kbqe_dagster.core.load.state import (
    LoadState,
    mark_failed,
    mark_submitted,
    mark_succeeded,
    prune,
    quarantine_job,
    record_planned,
    release_quarantine,
    retry_job,
)
from kbqe_dagster.observability.event_totals import EventTotals
from kbqe_dagster.observability.load_counts import LoadCounts, jobs_by_status, load_counts

T0 = datetime(2024, 9, 13, 12, 0, tzinfo=UTC)
TABLE = ("acme_sales", "orders")
FILES = (
    "com.acme.events.0.acme_sales.orders.3.0.avro",
    "com.acme.events.1.acme_sales.orders.3.0.avro",
)
DONE = (
    "com.acme.events.0.acme_sales.orders.3.0.9.done",
    "com.acme.events.1.acme_sales.orders.3.0.4.done",
)
JOB = PlannedLoadJob("acme_sales", "orders", 3, FILES, DONE, 15)


def as_tuple(c: LoadCounts) -> tuple[int, int, int, int]:
    return (c.submitted, c.failed, c.succeeded, c.files_deleted)


def counts(totals: EventTotals, state: LoadState) -> tuple[int, int, int, int]:
    return as_tuple(load_counts(totals, state).get(TABLE, LoadCounts()))


def reported(totals: EventTotals, job_id: str, attempts: int) -> None:
    """What the load op reports for a succeeded job: one event per day partition."""
    for day_files in (FILES[:1], FILES):
        totals.add_load(
            {
                "job_id": job_id,
                "table": "acme_sales.orders",
                "attempts": attempts,
                "files": len(day_files),
                "dagster/row_count": 5,
                "offset_ranges": [
                    {
                        "topic": "com.acme.events",
                        "partition": i,
                        "first": 0,
                        "last": 9 if i == 0 else 4,
                    }
                    for i in range(len(day_files))
                ],
            },
            T0.timestamp(),
        )


def test_a_job_retried_once_counts_two_submissions_one_failure_and_its_files_once() -> None:
    totals, steps = EventTotals(), []
    s = record_planned(LoadState(), JOB, "kbqe_1", T0)
    steps.append(counts(totals, s))
    s = mark_submitted(s, "kbqe_1", T0)
    steps.append(counts(totals, s))
    s = mark_failed(s, "kbqe_1", T0, "Provided Schema does not match Table")
    steps.append(counts(totals, s))
    s = retry_job(s, "kbqe_1", "kbqe_2", T0)
    steps.append(counts(totals, s))
    s = mark_submitted(s, "kbqe_2", T0)
    steps.append(counts(totals, s))
    s = mark_succeeded(s, "kbqe_2", T0)
    steps.append(counts(totals, s))
    reported(totals, "kbqe_2", attempts=2)  # the op reports right after the state write
    steps.append(counts(totals, s))
    s = prune(s, T0 + timedelta(days=8), keep_finished_for=timedelta(days=7))
    assert s.jobs == ()
    steps.append(counts(totals, s))

    assert steps == [
        (0, 0, 0, 0),  # planned: not submitted yet
        (1, 0, 0, 0),
        (1, 1, 0, 0),
        (1, 1, 0, 0),  # retried under a new id, not submitted yet
        (2, 1, 0, 0),
        (2, 1, 1, 2),  # succeeded, files deleted, not in the event log yet
        (2, 1, 1, 2),  # in both: counted once
        (2, 1, 1, 2),  # forgotten by the state file: the event log still has it
    ]


def test_rows_come_from_the_event_log() -> None:
    totals = EventTotals()
    reported(totals, "kbqe_1", attempts=1)

    assert load_counts(totals, LoadState())[TABLE].rows == 10


def test_a_quarantined_job_counts_its_failed_attempt_until_released_and_pruned() -> None:
    s = mark_failed(
        mark_submitted(record_planned(LoadState(), JOB, "kbqe_1", T0), "kbqe_1", T0),
        "kbqe_1",
        T0,
        "Access Denied",
    )
    s = quarantine_job(s, "kbqe_1", T0, "Access Denied")
    assert counts(EventTotals(), s) == (1, 1, 0, 0)

    # Documented: once released and pruned, the job leaves both records (a counter reset).
    s = prune(release_quarantine(s, FILES), T0 + timedelta(days=8), timedelta(days=7))
    assert counts(EventTotals(), s) == (0, 0, 0, 0)


def test_jobs_are_counted_by_table_and_status() -> None:
    s = record_planned(LoadState(), JOB, "kbqe_1", T0)
    views = PlannedLoadJob("acme_web", "page_views", 5, ("v.avro",), ("v.done",), None)
    s = mark_submitted(record_planned(s, views, "kbqe_2", T0), "kbqe_2", T0)

    assert jobs_by_status(s) == {
        ("acme_sales", "orders", "planned"): 1,
        ("acme_web", "page_views", "submitted"): 1,
    }
