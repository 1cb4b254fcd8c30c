"""``kbqe load plan``: the jobs the next load cycle would submit, in order, submitting nothing.
One job per (table, schema id), lowest schema id first; files of pending jobs and quarantined
files are never planned; ``max_files_per_job`` leaves the rest for a later cycle."""

from __future__ import annotations

from pathlib import Path

from kbqe_dagster.core.load.state import STATE_FILE
from kbqe_dagster_tests.cli.conftest import Run
from kbqe_dagster_tests.cli.staging_area import (
    DEAD_P1,
    ORDERS_3_P0,
    ORDERS_3_P1,
    ORDERS_4_P1,
    PREFIX_TOPIC_ORDERS,
    VIEWS_P0,
    Area,
)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "pipeline.yaml"


def config_with(tmp_path: Path, **load: int) -> str:
    text = EXAMPLE.read_text()
    for key, value in load.items():
        text = text.replace(f"  {key}: ", f"  {key}: {value}  # was ", 1)
    path = tmp_path / "pipeline.yaml"
    path.write_text(text)
    return str(path)


def test_jobs_are_listed_in_submission_order_with_files_in_offset_order(
    run: Run, area: Area
) -> None:
    plan = run("load", "plan", "--staging", str(area.root), "--json").json()
    jobs = [{k: job[k] for k in ("dataset", "table", "schema_id", "files")} for job in plan["jobs"]]
    assert jobs == [
        {
            "dataset": "acme_sales",
            "table": "orders",
            "schema_id": 3,
            "files": [PREFIX_TOPIC_ORDERS, ORDERS_3_P0, ORDERS_3_P1],
        },
        {"dataset": "acme_sales", "table": "orders", "schema_id": 4, "files": [ORDERS_4_P1]},
        {
            "dataset": "kbqe_dead_letters",
            "table": "dead_letters",
            "schema_id": 0,
            "files": [DEAD_P1],
        },
    ]


def test_pending_jobs_and_quarantined_files_are_reported_not_planned(run: Run, area: Area) -> None:
    plan = run("load", "plan", "--staging", str(area.root), "--json").json()
    planned = {f for job in plan["jobs"] for f in job["files"]}
    assert VIEWS_P0 not in planned
    assert [(j["job_id"], j["status"], j["files"]) for j in plan["pending_jobs"]] == [
        ("kbqe_acme_web_page_views_1", "planned", [VIEWS_P0]),
    ]
    assert plan["quarantined_files"] == ["com.acme.events.0.acme_sales.orders.4.0.avro"]


def test_max_files_per_job_from_the_config_defers_the_rest(
    run: Run, area: Area, tmp_path: Path
) -> None:
    config = config_with(tmp_path, max_files_per_job=2)
    plan = run("load", "plan", "--staging", str(area.root), "--config", config, "--json").json()
    assert plan["jobs"][0]["files"] == [PREFIX_TOPIC_ORDERS, ORDERS_3_P0]
    assert (plan["deferred_files"], plan["max_files_per_job"]) == (1, 2)


def test_the_config_comes_from_the_environment_when_no_option_is_given(
    run: Run, area: Area, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.setenv("KBQE_PIPELINE_CONFIG", config_with(tmp_path, max_files_per_job=1))
    plan = run("load", "plan", "--staging", str(area.root), "--json").json()
    assert [len(job["files"]) for job in plan["jobs"]] == [1, 1, 1]


def test_the_dry_run_changes_nothing(run: Run, area: Area) -> None:
    before = {p.name: p.read_bytes() for p in area.root.rglob("*") if p.is_file()}
    assert run("load", "plan", "--staging", str(area.root)).code == 0
    after = {p.name: p.read_bytes() for p in area.root.rglob("*") if p.is_file()}
    assert after == before


def test_without_a_state_file_every_committed_file_is_planned(run: Run, area: Area) -> None:
    (area.root / STATE_FILE).unlink()
    plan = run("load", "plan", "--staging", str(area.root), "--json").json()
    assert [(j["table"], j["schema_id"], len(j["files"])) for j in plan["jobs"]] == [
        ("orders", 3, 3),
        ("orders", 4, 2),
        ("page_views", 5, 1),
        ("dead_letters", 0, 1),
    ]
    assert plan["pending_jobs"] == [] and plan["quarantined_files"] == []


def test_the_text_report_numbers_the_jobs(run: Run, area: Area) -> None:
    result = run("load", "plan", "--staging", str(area.root))
    assert result.code == 0
    assert "1. acme_sales.orders  schema id 3  3 file(s)" in result.out.splitlines()
    assert f"     {ORDERS_4_P1}" in result.out.splitlines()
