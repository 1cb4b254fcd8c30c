"""``kbqe staging status``: next offsets and committed ranges from done files (Scala-era empty
ones included), pending files with bytes and age, loadable files per table, strange names."""

from __future__ import annotations

from pathlib import Path

from kbqe_dagster_tests.cli.conftest import Run
from kbqe_dagster_tests.cli.staging_area import (
    AGE_SECONDS,
    DEAD_P1,
    IN_FLIGHT_P1,
    ORDERS_3_P1,
    ORDERS_4_P1,
    UNRECOGNIZED,
    Area,
)

T = "com.acme.events"


def status(run: Run, area: Area) -> dict:
    return run("staging", "status", "--staging", str(area.root), "--json").json()


def test_every_partition_with_done_files_reports_its_next_offset_and_committed_ranges(
    run: Run, area: Area
) -> None:
    partitions = status(run, area)["partitions"]
    summary = [
        (p["topic"], p["partition"], p["next_offset"], p["committed_ranges"], p["holes"])
        for p in partitions
    ]
    assert summary == [
        ("com.acme", 0, 10, [[0, 9]], []),
        (T, 0, 300, [[0, 299]], []),
        (T, 1, 50, [[0, 49]], []),
        (T, 2, 10, [[0, 9], [20, 29]], [[10, 19]]),
        (T, 3, 30, [[0, 29]], []),
    ]
    assert all(type(p["partition"]) is int and type(p["next_offset"]) is int for p in partitions)


def test_pending_files_bytes_and_oldest_age_are_counted_per_partition(run: Run, area: Area) -> None:
    by_tp = {(p["topic"], p["partition"]): p for p in status(run, area)["partitions"]}
    p1 = by_tp[(T, 1)]
    assert p1["pending_files"] == 3  # two orders files and the dead letters; not the in-flight one
    assert p1["pending_bytes"] == sum(
        (area.root / n).stat().st_size for n in (ORDERS_3_P1, ORDERS_4_P1, DEAD_P1)
    )
    assert p1["uncommitted_files"] == 1
    assert p1["done_files"] == 3
    assert AGE_SECONDS <= p1["oldest_pending_age_seconds"] < AGE_SECONDS + 120
    assert by_tp[(T, 0)]["pending_files"] == 3
    assert by_tp[(T, 3)]["pending_files"] == 0
    assert by_tp[(T, 3)]["oldest_pending_age_seconds"] is None


def test_tables_report_only_loadable_files_apart_from_pending_and_quarantined(
    run: Run, area: Area
) -> None:
    tables = {(t["dataset"], t["table"]): t for t in status(run, area)["tables"]}
    assert sorted(tables) == [
        ("acme_sales", "orders"),
        ("acme_web", "page_views"),
        ("kbqe_dead_letters", "dead_letters"),
    ]
    orders = tables[("acme_sales", "orders")]
    # Committed orders files: p0 schema 3 and 4 (4 quarantined), p1 schema 3 and 4, com.acme.
    assert (orders["loadable_files"], orders["schema_ids"], orders["quarantined_files"]) == (
        4,
        [3, 4],
        1,
    )
    views = tables[("acme_web", "page_views")]
    assert (views["loadable_files"], views["files_in_pending_jobs"]) == (0, 1)
    assert tables[("kbqe_dead_letters", "dead_letters")]["schema_ids"] == [0]


def test_unrecognized_and_uncommitted_names_are_listed_not_fatal(run: Run, area: Area) -> None:
    report = status(run, area)
    assert report["unrecognized"] == sorted(UNRECOGNIZED)
    assert report["uncommitted"] == [IN_FLIGHT_P1]
    assert report["load_state"] == {"pending_jobs": 1, "quarantined_files": 1}


def test_the_text_report_shows_partitions_tables_and_the_hole(run: Run, area: Area) -> None:
    result = run("staging", "status", "--staging", str(area.root))
    assert result.code == 0
    lines = result.out.splitlines()
    assert any(line.split()[:4] == [T, "2", "10", "0..9,"] for line in lines)
    assert f"{T}[2]: uncommitted hole(s) 10..19 — the next stage run redoes them first" in lines
    assert any(line.split()[:2] == ["acme_sales.orders", "4"] for line in lines)
    assert "  README.txt" in lines


def test_an_empty_staging_directory_has_no_partitions(run: Run, tmp_path: Path) -> None:
    report = run("staging", "status", "--staging", str(tmp_path), "--json").json()
    assert (report["partitions"], report["tables"], report["unrecognized"]) == ([], [], [])


def test_the_location_comes_from_the_environment_when_no_option_is_given(
    run: Run, area: Area, monkeypatch
) -> None:
    monkeypatch.setenv("KBQE_STAGING_URL", str(area.root))
    report = run("staging", "status", "--json").json()
    assert report["staging"] == str(area.root)
    assert [p["next_offset"] for p in report["partitions"]] == [10, 300, 50, 10, 30]


def test_a_storage_write_intent_without_its_done_file_is_listed_for_its_partition(
    run: Run, tmp_path: Path
) -> None:
    (tmp_path / f"{T}.5.fast.clicks.7.0.9.intent").write_text("{}")
    (tmp_path / f"{T}.5.fast.clicks.7.0.9.done").write_text("")
    (tmp_path / f"{T}.5.fast.clicks.7.10.19.intent").write_text("{}")  # open
    report = run("staging", "status", "--staging", str(tmp_path), "--json").json()
    (partition,) = report["partitions"]
    assert partition["open_intents"] == [f"{T}.5.fast.clicks.7.10.19.intent"]
    assert report["unrecognized"] == [] and partition["pending_files"] == 0
    text = run("staging", "status", "--staging", str(tmp_path)).out
    assert f"{T}[5]: Storage Write intent {T}.5.fast.clicks.7.10.19.intent has no done file" in text
