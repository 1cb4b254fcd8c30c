"""One definition of what waits for a load (core/load/pending.py), over one listing."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from kbqe_dagster.core.load.pending import PendingState, freshness_limit_s, staging_view
from kbqe_dagster.core.load.state import JobStatus, LoadJobRecord, LoadState, QuarantinedFile
from kbqe_dagster.core.protocol.naming import of_topic

NOW = datetime(2024, 11, 19, 12, 0, tzinfo=UTC)


@dataclass(frozen=True)
class Listed:
    name: str
    size: int
    updated: datetime


def avro(first: int, table: str = "orders", age_s: float = 60, topic: str = "t") -> list[Listed]:
    stem = f"{topic}.0.sales.{table}.1.{first}"
    at = NOW - timedelta(seconds=age_s)
    return [Listed(f"{stem}.avro", 100, at), Listed(f"{stem}.{first + 9}.done", 10, at)]


def test_committed_files_are_loadable_in_a_job_or_quarantined_and_the_rest_not_pending() -> None:
    files = [
        *avro(0, age_s=300),
        *avro(10, age_s=200),
        *avro(20, age_s=900),
        Listed("t.0.sales.orders.1.30.avro", 100, NOW - timedelta(hours=5)),
    ]  # uncommitted
    job = LoadJobRecord(
        "j1",
        "sales",
        "orders",
        1,
        ("t.0.sales.orders.1.10.avro",),
        NOW,
        NOW,
        status=JobStatus.SUBMITTED,
    )
    quarantined = QuarantinedFile("t.0.sales.orders.1.20.avro", "sales", "orders", "j0", "bad", NOW)
    view = staging_view(files, LoadState((job,), (quarantined,)), NOW)
    states = {p.state: (p.files, p.oldest_age_s) for p in view.pending}
    assert states == {
        PendingState.LOADABLE: (1, 300.0),
        PendingState.IN_LOAD_JOB: (1, 200.0),
        PendingState.QUARANTINED: (1, 900.0),
    }
    assert view.uncommitted_files == 1
    # The freshness judged by the check, the health and the sensor: quarantine left out.
    assert (view.waiting_files, view.waiting_bytes, view.oldest_pending_age_s) == (2, 200, 300.0)
    assert view.quarantined_files == 1


def test_nothing_waiting_has_no_age() -> None:
    view = staging_view([], LoadState(), NOW)
    assert view.oldest_pending_age_s is None and view.waiting_files == 0


def test_freshness_is_three_load_cadences() -> None:
    assert freshness_limit_s(timedelta(minutes=5)) == 900


def test_a_topic_listing_keeps_exactly_the_topic_and_reports_foreign_names() -> None:
    names = [f.name for f in avro(0, topic="com.acme") + avro(0, topic="com.acme.sub")]
    ours, unrecognized = of_topic([*names, "com.acme.notes.txt"], "com.acme")
    assert ours == [n for n in names if n.startswith("com.acme.0.")]
    assert unrecognized == ["com.acme.notes.txt"]
