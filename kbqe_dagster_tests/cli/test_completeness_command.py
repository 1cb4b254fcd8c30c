"""``kbqe completeness``: one JSON document per run with each table's newest complete day and
what holds the next one back; ``--day`` turns the answer into an exit code. Kafka's
watermarks are faked at the boundary; the staging area is real files on disk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kbqe_dagster.cli import completeness as command
from kbqe_dagster_tests.cli.conftest import Run
from kbqe_dagster_tests.operations import completeness_area as area


@pytest.fixture
def staged(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    area.build(tmp_path / "staging")
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(yaml.safe_dump(area.PIPELINE))
    monkeypatch.setattr(command, "watermark_reader", lambda args: area.watermarks())
    monkeypatch.setattr(command, "now", lambda: area.NOW)
    return ["--staging", str(tmp_path / "staging"), "--config", str(pipeline)]


def test_json_is_one_document_per_table_with_the_newest_complete_day(run: Run, staged):
    result = run("completeness", "--json", *staged)
    assert result.code == 0, result.err
    doc = json.loads(result.out)  # exactly one document on stdout
    table = doc["tables"]["shop.orders"]
    assert {
        k: table[k] for k in ("partitioning", "basis", "newest_complete", "late_after_complete")
    } == {
        "partitioning": "day",
        "basis": "mixed",
        "newest_complete": "2026-11-22",
        "late_after_complete": 0,
    }
    assert table["held_back_by"] == [
        {
            "topic": "orders",
            "partition": 1,
            "behind_messages": 20,
            "behind_seconds": 43500.0,
            "loaded_offset": 10,
            "staged_offset": 20,
            "high_watermark": 30,
            "waiting_for": "load",
        }
    ]


def test_table_option_limits_the_report_and_text_names_the_holder(run: Run, staged):
    result = run("completeness", "--table", "shop.orders", *staged)
    assert result.code == 0, result.err
    assert "2026-11-22" in result.out and "orders[1] 20 msg / 12h 5m (load)" in result.out


def test_day_option_exits_3_while_that_day_is_not_complete(run: Run, staged):
    assert run("completeness", "--day", "2026-11-22", *staged).code == 0
    assert run("completeness", "--day", "2026-11-23", "--json", *staged).code == 3


def test_a_usage_error_is_2_and_not_the_not_complete_code(run: Run, staged):
    with pytest.raises(SystemExit) as usage:
        run("completeness", "--day", "23/11/2026", *staged)
    assert usage.value.code == 2


def test_a_table_name_without_a_dataset_is_refused(run: Run, staged):
    result = run("completeness", "--table", "orders", *staged)
    assert result.code == 1 and "DATASET.TABLE" in result.err


@pytest.fixture
def staged_hourly(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    from kbqe_dagster_tests.operations import hourly_completeness_area as hourly

    hourly.build(tmp_path / "staging")
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(yaml.safe_dump(hourly.PIPELINE))
    monkeypatch.setattr(command, "watermark_reader", lambda args: area.watermarks(hourly.MARKS))
    monkeypatch.setattr(command, "now", lambda: hourly.NOW)
    return ["--staging", str(tmp_path / "staging"), "--config", str(pipeline)]


def test_an_hour_table_answers_in_hours_and_a_day_counts_once_its_last_hour_does(
    run: Run, staged_hourly
):
    result = run("completeness", "--json", *staged_hourly)
    assert result.code == 0, result.err
    table = json.loads(result.out)["tables"]["web.clicks"]
    assert (table["partitioning"], table["newest_complete"], table["next_hour"]) == (
        "hour",
        "2026-11-23T13",
        "2026-11-23T14",
    )
    text = run("completeness", *staged_hourly)
    assert "2026-11-23T13" in text.out and "clicks[1] 20 msg / 25m 0s (load)" in text.out
    assert run("completeness", "--day", "2026-11-22", *staged_hourly).code == 0
    assert run("completeness", "--day", "2026-11-23", *staged_hourly).code == 3
