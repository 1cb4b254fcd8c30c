"""``kbqe run --until-idle``: its arguments, its text output, and the errors it gives before
any job runs. The loop is in ``test_until_idle_loop.py``, the real stack in
``test_run_until_idle_on_local_stack.py``."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from kbqe_dagster import cli
from kbqe_dagster.cli.run import render, select_topics
from kbqe_dagster.core.errors import OperatorCommandError
from kbqe_dagster.runner.report import TableTotals, TopicTotals, UntilIdleReport

REPO = Path(__file__).resolve().parents[2]


def test_until_idle_is_required_so_that_kbqe_run_alone_does_nothing(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["run"])
    assert exit_.value.code == 2
    assert "--until-idle" in capsys.readouterr().err


def test_defaults_of_the_arguments() -> None:
    args = cli.build_parser().parse_args(["run", "--until-idle"])
    assert (args.topics, args.max_rounds, args.poll_timeout, args.json) == ([], 100, 900.0, False)
    args = cli.build_parser().parse_args(
        ["run", "--until-idle", "--topic", "a", "--topic", "b.c", "--json", "--max-rounds", "5"]
    )
    assert (args.topics, args.max_rounds, args.json) == (["a", "b.c"], 5, True)


def test_every_configured_topic_unless_some_are_named() -> None:
    assert select_topics(["a", "b.c"], []) == ("a", "b.c")
    assert select_topics(["a", "b.c"], ["b.c", "b.c"]) == ("b.c",)


def test_a_topic_not_in_the_pipeline_file_is_an_error_naming_it_and_the_topics() -> None:
    with pytest.raises(
        OperatorCommandError,
        match=r"topic 'x' is not in the pipeline file "
        r"\(topics: a, b\.c\)",
    ):
        select_topics(["a", "b.c"], ["a", "x"])


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--max-rounds", "0"], "--max-rounds must be 1 or more, got 0"),
        (["--poll-timeout", "0"], "--poll-timeout must be positive, got 0.0"),
    ],
)
def test_bounds_are_checked_before_anything_runs(capsys, argv, message) -> None:
    assert cli.main(["run", "--until-idle", *argv]) == 1
    assert capsys.readouterr().err.strip() == f"kbqe: error: {message}"


def test_an_unknown_topic_fails_before_any_run(tmp_path, monkeypatch, capsys) -> None:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topics": [{"name": "com.acme.a", "event_time": {"fields": ["t"]}}],
                "allowed_destinations": ["ds.*"],
            }
        )
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    staging = tmp_path / "staging"
    staging.mkdir()
    monkeypatch.setenv("KBQE_ENV", "local")
    monkeypatch.setenv("KBQE_PIPELINE_CONFIG", str(pipeline))
    monkeypatch.setenv("KBQE_STAGING_URL", str(staging))
    monkeypatch.setenv("DAGSTER_HOME", str(home))

    code = cli.main(["run", "--until-idle", "--topic", "com.acme.b", "--json"])

    captured = capsys.readouterr()
    assert code == 1 and captured.out == ""
    assert captured.err.strip().splitlines()[-1] == (
        "kbqe: error: topic 'com.acme.b' is not in the pipeline file (topics: com.acme.a); "
        "KBQE_PIPELINE_CONFIG names the file"
    )


def test_text_output_is_a_table_per_topic_and_per_table_then_how_it_ended() -> None:
    report = UntilIdleReport(
        {"com.acme.events": TopicTotals(1125, 12, 1, 1137, 2)}, rounds=3, run_ids=["r"] * 4
    )
    report.tables = {
        "acme_sales.orders": TableTotals(375, 2, bytes_loaded=51_200),
        "inventory.customers": TableTotals(
            10, 1, keys_merged=7, merge_bytes_processed=2048, bytes_loaded=900
        ),
    }
    assert render(report).splitlines() == [
        "topic            staged  dead-lettered  tombstones  stage runs",
        "com.acme.events  1125    12             1           2",
        "",
        "table                rows loaded  load jobs  keys merged  merge bytes  bytes loaded",
        "acme_sales.orders    375          2          0            -            51200 (free)",
        "inventory.customers  10           1          7            2048         900 (free)",
        "",
        "idle after 3 round(s); 4 run(s) recorded in the Dagster instance",
    ]


def test_tables_delivered_through_storage_write_show_bytes_appended_and_list_price() -> None:
    report = UntilIdleReport({"com.acme.events": TopicTotals(30, 0, 0, 30, 1)}, rounds=2)
    report.tables = {
        "acme_sales.orders": TableTotals(20, 1, bytes_loaded=4096),
        "acme_web.clicks": TableTotals(rows_appended=10, bytes_appended=3 * 2**30),
    }
    assert render(report).splitlines()[3:6] == [
        "table              rows loaded  load jobs  keys merged  merge bytes  bytes loaded  "
        "rows appended  bytes appended  list price",
        "acme_sales.orders  20           1          0            -            4096 (free)   "
        "0              0               $0.00",
        "acme_web.clicks    0            0          0            -            -             "
        "10             3221225472      $0.08",
    ]
    assert report.to_json()["tables"]["acme_web.clicks"] == {
        "rows_loaded": 0,
        "keys_merged": 0,
        "merge_bytes_processed": None,
        "load_jobs": 0,
        "bytes_loaded": 0,
        "rows_appended": 10,
        "bytes_appended": 3 * 2**30,
        "list_price_usd": 0.075,
    }


def test_text_output_of_a_failed_run_ends_with_its_reason() -> None:
    report = UntilIdleReport({"t": TopicTotals()}, rounds=2, error="t: stage run r failed: boom")
    assert render(report).splitlines()[-3:] == [
        "nothing loaded",
        "",
        "stopped after 2 round(s): t: stage run r failed: boom; "
        "0 run(s) recorded in the Dagster instance",
    ]
