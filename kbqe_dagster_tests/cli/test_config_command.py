"""``kbqe config check`` prints every problem of the pipeline file with its key path and exits
1, or says the file is valid and exits 0; ``kbqe config schema`` prints the JSON Schema."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kbqe_dagster.core.config.schema import pipeline_schema
from kbqe_dagster_tests.cli.conftest import Run

REPO = Path(__file__).resolve().parents[2]

BAD = """\
version: 1
topics:
  - name: com.acme.events
    routing: {mode: static, dataset: acme, tabel: events}
    event_time: {fields: [eventTime]}
load:
  cadence: 15m
  cadence: 10m
retention: {keep_load_history: a week}
"""


@pytest.fixture
def bad(tmp_path: Path) -> Path:
    path = tmp_path / "pipeline.yaml"
    path.write_text(BAD)
    return path


def test_a_valid_file_is_ok_with_its_topics(run: Run) -> None:
    example = REPO / "examples" / "topic_patterns.yaml"
    result = run("config", "check", "--config", str(example))
    assert (result.code, result.err) == (0, "")
    assert result.out == f"{example}: ok (1 topic(s), 3 topic pattern(s))\n"


def test_every_problem_is_printed_with_its_key_path_and_the_exit_code_is_1(
    run: Run, bad: Path
) -> None:
    result = run("config", "check", "--config", str(bad))
    assert result.code == 1
    assert result.out.splitlines() == [
        f"{bad}: 3 problem(s):",
        "  - load.cadence: key repeated in one mapping (lines 7 and 8); YAML would keep only "
        "the last: remove one",
        "  - topics[0].routing.tabel: unknown key; did you mean 'table'?",
        "  - retention.keep_load_history: expected a duration such as '30s', '15m', '1h', "
        "got 'a week'",
    ]


def test_json_lists_each_problem_as_key_path_and_message(run: Run, bad: Path) -> None:
    result = run("config", "check", "--config", str(bad), "--json")
    assert result.code == 1
    report = json.loads(result.out)
    assert report["ok"] is False and report["config"] == str(bad)
    assert [p["path"] for p in report["problems"]] == [
        "load.cadence",
        "topics[0].routing.tabel",
        "retention.keep_load_history",
    ]
    assert report["problems"][1]["message"] == "unknown key; did you mean 'table'?"


def test_the_file_comes_from_the_environment_when_no_option_names_it(
    run: Run, bad: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KBQE_PIPELINE_CONFIG", str(bad))
    assert run("config", "check").out.startswith(f"{bad}: 3 problem(s):")


def test_a_missing_file_is_a_problem_of_the_file_itself(run: Run, tmp_path: Path) -> None:
    missing = tmp_path / "nope.yaml"
    result = run("config", "check", "--config", str(missing), "--json")
    assert result.code == 1
    [problem] = json.loads(result.out)["problems"]
    assert problem["path"] == "" and "cannot read the pipeline configuration" in problem["message"]


def test_warnings_of_a_valid_file_are_shown(run: Run, tmp_path: Path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text(
        "version: 1\ntopics: [{name: t, event_time: {fields: [ts]}}]\nload: {cadence: 3m}\n"
    )
    result = run("config", "check", "--config", str(path), "--json")
    assert result.code == 0
    [warning] = result.json()["warnings"]
    assert warning.startswith("load.cadence 3m uses 32% of BigQuery's daily load-job quota")


def test_the_schema_command_prints_the_generated_schema(run: Run) -> None:
    result = run("config", "schema")
    assert result.code == 0
    assert json.loads(result.out) == json.loads(json.dumps(pipeline_schema()))
