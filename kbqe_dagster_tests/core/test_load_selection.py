"""Load selection: loadable files grouped into load jobs, and BigQuery job ids."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, timezone

import pytest

from kbqe_dagster.core.load.selection import (
    MAX_FILES_PER_JOB,
    loadable_files,
    make_job_id,
    plan_load_jobs,
)
from kbqe_dagster.core.protocol.commit import range_marker
from kbqe_dagster.core.protocol.offsets import OffsetRange

NOW = datetime(2024, 9, 13, 14, 36, 45, tzinfo=UTC)


def staged(
    first: int,
    *,
    last: int | None = None,
    partition: int = 0,
    table: str = "orders",
    schema: int = 1,
    dataset: str = "sales",
    topic: str = "orders",
) -> list[str]:
    stem = f"{topic}.{partition}.{dataset}.{table}.{schema}.{first}"
    return [f"{stem}.avro", f"{stem}.{first + 9 if last is None else last}.done"]


def test_nothing_to_load_plans_no_job() -> None:
    assert plan_load_jobs([]) == ()
    assert plan_load_jobs(["README.md", "_kbqe/load_state.json"]) == ()


def test_a_job_takes_the_10000_lowest_offsets_of_a_backlog() -> None:
    names = [n for i in range(10_123) for n in staged(i * 10, partition=i % 3)]
    (job,) = plan_load_jobs(names)
    assert len(job.files) == MAX_FILES_PER_JOB
    expected = sorted((i % 3, i * 10) for i in range(10_123))[:MAX_FILES_PER_JOB]
    assert [(int(f.split(".")[1]), int(f.split(".")[5])) for f in job.files] == expected


def test_each_schema_id_of_a_table_gets_its_own_job_lowest_first() -> None:
    names = staged(0, schema=12) + staged(10, schema=3) + staged(20, schema=7)
    jobs = plan_load_jobs(names)
    assert [(j.table, j.schema_id, len(j.files)) for j in jobs] == [
        ("orders", 3, 1),
        ("orders", 7, 1),
        ("orders", 12, 1),
    ]


def test_a_large_backlog_of_the_old_schema_does_not_starve_the_new_one() -> None:
    names = [n for i in range(30) for n in staged(i * 10, schema=1)] + staged(1000, schema=2)
    jobs = plan_load_jobs(names, max_files_per_job=10)
    assert [(j.schema_id, len(j.files)) for j in jobs] == [(1, 10), (2, 1)]


def test_two_schema_ids_in_one_range_both_load_matched_on_the_full_key() -> None:
    names = staged(0, schema=1) + staged(0, schema=2)
    jobs = plan_load_jobs(names)
    assert [(j.schema_id, j.files) for j in jobs] == [
        (1, ("orders.0.sales.orders.1.0.avro",)),
        (2, ("orders.0.sales.orders.2.0.avro",)),
    ]


def test_a_done_file_of_another_schema_id_does_not_make_an_avro_file_loadable() -> None:
    names = staged(0, schema=1) + ["orders.0.sales.orders.2.0.avro"]
    assert [a.name for a, _ in loadable_files(names)] == ["orders.0.sales.orders.1.0.avro"]


def test_an_avro_file_without_done_file_is_not_loadable() -> None:
    names = staged(0)[:1] + staged(10)
    (job,) = plan_load_jobs(names)
    assert job.files == ("orders.0.sales.orders.1.10.avro",)


def test_pending_and_quarantined_files_are_not_selected() -> None:
    names = staged(0) + staged(10) + staged(20)
    (job,) = plan_load_jobs(
        names,
        pending=frozenset({"orders.0.sales.orders.1.0.avro"}),
        quarantined=frozenset({"orders.0.sales.orders.1.20.avro"}),
    )
    assert job.files == ("orders.0.sales.orders.1.10.avro",)


def test_markers_are_never_loaded() -> None:
    marker = range_marker(OffsetRange("orders", 0, 0, 100)).name
    names = [marker, "orders.0._kbqe.range.0.0.avro"] + staged(100)
    assert [j.dataset for j in plan_load_jobs(names)] == ["sales"]


def test_dead_letter_files_are_loaded_like_any_table() -> None:
    names = staged(0) + staged(0, dataset="kbqe_ops", table="dead_letters", schema=0)
    jobs = plan_load_jobs(names)
    assert [(j.dataset, j.table) for j in jobs] == [
        ("kbqe_ops", "dead_letters"),
        ("sales", "orders"),
    ]


def test_jobs_carry_done_files_offsets_and_record_counts_when_known() -> None:
    names = staged(0, partition=1) + staged(10, partition=1, last=24)
    counts = {"orders.1.sales.orders.1.0.avro": 5, "orders.1.sales.orders.1.10.avro": 7}
    (job,) = plan_load_jobs(names, records=counts)
    assert job.records == 12
    assert job.done_files == (
        "orders.1.sales.orders.1.0.9.done",
        "orders.1.sales.orders.1.10.24.done",
    )
    assert job.offset_ranges == (("orders", 1, 0, 9), ("orders", 1, 10, 24))
    (partial,) = plan_load_jobs(names, records={"orders.1.sales.orders.1.0.avro": 5})
    assert partial.records is None
    assert plan_load_jobs(names)[0].records is None


@pytest.mark.parametrize("limit", [0, MAX_FILES_PER_JOB + 1])
def test_the_files_per_job_limit_stays_within_bigquery_bounds(limit: int) -> None:
    with pytest.raises(ValueError, match="max_files_per_job"):
        plan_load_jobs(staged(0), max_files_per_job=limit)


JOB_ID = re.compile(r"^[A-Za-z0-9_-]{1,1024}$")


def test_a_job_id_is_readable() -> None:
    job_id = make_job_id("sales", "orders", NOW, token="0123abcd")
    assert job_id == "kbqe_sales_orders_20240913143645_0123abcd"


def test_job_ids_are_in_utc_whatever_the_clock_zone() -> None:
    paris = NOW.astimezone(timezone(timedelta(hours=2)))
    assert make_job_id("d", "t", paris, token="x") == make_job_id("d", "t", NOW, token="x")


def test_job_ids_are_unique() -> None:
    ids = {make_job_id("sales", "orders", NOW) for _ in range(1000)}
    assert len(ids) == 1000
    assert all(JOB_ID.match(i) for i in ids)


@pytest.mark.parametrize(
    "prefix, dataset, table",
    [
        ("kbqe prod!", "sales", "orders"),
        ("kbqe", "sales", "commandes-été"),
        ("", "sales", "orders"),
        ("kbqe", "d" * 1024, "t" * 1024),
        ("kbqe", "sales", "t" * 2000),
    ],
)
def test_job_ids_keep_to_bigquery_rules(prefix: str, dataset: str, table: str) -> None:
    job_id = make_job_id(dataset, table, NOW, prefix=prefix)
    assert JOB_ID.match(job_id), job_id
    assert job_id.split("_")[-2] == "20240913143645"


def test_a_job_id_needs_an_aware_clock() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        make_job_id("sales", "orders", NOW.replace(tzinfo=None))


# --- pinned versions -------------------------------------------------------------------------
def test_files_that_are_not_their_pinned_version_leave_the_plan_as_leftovers() -> None:
    from kbqe_dagster.core.load.selection import PlannedLoadJob, without_leftovers

    job = PlannedLoadJob(
        "sales",
        "orders",
        5,
        ("t.0.sales.orders.5.0.avro", "t.0.sales.orders.5.10.avro", "t.1.sales.orders.5.0.avro"),
        (
            "t.0.sales.orders.5.0.9.done",
            "t.0.sales.orders.5.10.19.done",
            "t.1.sales.orders.5.0.9.done",
        ),
    )
    only = PlannedLoadJob(
        "sales", "refunds", 5, ("t.0.sales.refunds.5.0.avro",), ("t.0.sales.refunds.5.0.9.done",)
    )
    pinned = {
        "t.0.sales.orders.5.0.avro": "g1",
        "t.0.sales.orders.5.10.avro": "g2",
        "t.0.sales.refunds.5.0.avro": "g3",
    }  # t.1…: a Scala-era commit, no pin
    current = {
        "t.0.sales.orders.5.0.avro": "g1",
        "t.0.sales.orders.5.10.avro": "g9",
        "t.1.sales.orders.5.0.avro": "g7",
        "t.0.sales.refunds.5.0.avro": "g8",
    }

    kept, leftovers = without_leftovers([job, only], pinned, current)

    assert leftovers == ("t.0.sales.orders.5.10.avro", "t.0.sales.refunds.5.0.avro")
    assert [(k.table, k.files, k.done_files) for k in kept] == [
        (
            "orders",
            ("t.0.sales.orders.5.0.avro", "t.1.sales.orders.5.0.avro"),
            ("t.0.sales.orders.5.0.9.done", "t.1.sales.orders.5.0.9.done"),
        )
    ]
