"""``kbqe health``: the exporter's checks once, the same JSON as ``/healthcheck`` with
``--json``, exit 0 when healthy and 1 otherwise."""

from __future__ import annotations

import json

import pytest

from kbqe_dagster import cli
from kbqe_dagster.observability import sources as sources_module
from kbqe_dagster_tests.cli.staging_area import build
from kbqe_dagster_tests.observability.conftest import sources_for


@pytest.fixture
def unhealthy(tmp_path, example_pipeline, monkeypatch):
    """A staging area with a quarantined table; Kafka and the registry on a closed port."""
    sources = sources_for(build(tmp_path / "staging").root, example_pipeline)
    monkeypatch.setattr(sources_module, "sources_from_environment", lambda **_: sources)


def test_json_output_is_the_healthcheck_document_and_the_exit_code_says_unhealthy(
    unhealthy, capsys
) -> None:
    code = cli.main(["health", "--json", "--check-timeout", "0.5"])
    doc = json.loads(capsys.readouterr().out)

    assert code == 1
    assert doc["healthy"] is False
    # files waited an hour; the default limit is 3 load cadences of 5m (examples/pipeline.yaml)
    assert {n for n, c in doc["checks"].items() if not c["ok"]} == {
        "kafka",
        "schema_registry",
        "quarantine",
        "staging_freshness",
    }
    assert doc["checks"]["staging"]["ok"] is True
    assert doc["thresholds"] == {"check_timeout_seconds": 0.5, "max_staging_age_seconds": 900}


def test_text_output_has_a_line_per_check_and_a_verdict(unhealthy, capsys) -> None:
    code = cli.main(["health", "--check-timeout", "0.5", "--max-staging-age", "60"])
    lines = capsys.readouterr().out.splitlines()

    assert code == 1
    assert [line.split()[:2] for line in lines[:-1]] == [
        ["FAIL", "kafka"],
        ["FAIL", "schema_registry"],
        ["ok", "staging"],
        ["FAIL", "quarantine"],
        ["ok", "stage_path"],
        ["FAIL", "staging_freshness"],
    ]
    assert lines[-1] == "UNHEALTHY"
