"""Where the commands find the staging area and the pipeline file, and how they fail: the
error on stderr naming the problem and the fix (one line, or one per problem of a pipeline
file), exit code 1, a traceback only with --verbose."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbqe_dagster.cli.common import staging_location
from kbqe_dagster.core.errors import OperatorCommandError
from kbqe_dagster.core.load.state import STATE_FILE
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster_tests.cli.conftest import Run
from kbqe_dagster_tests.cli.staging_area import Area
from kbqe_dagster_tests.support.cli import assert_one_error_line

STAGING_COMMANDS = [
    ("staging", "status"),
    ("load", "plan"),
    ("load", "release", "--table", "d.t"),
    ("retention", "plan"),
    ("dead-letters",),
    ("bootstrap", "--topic", "t", "--offsets", "0=5"),
]


@pytest.mark.parametrize("command", STAGING_COMMANDS, ids=" ".join)
def test_in_gcp_without_a_staging_location_the_error_names_the_variable(
    run: Run, command: tuple[str, ...], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KBQE_ENV", "gcp")
    result = run(*command)
    assert_one_error_line(
        result, "kbqe: error: no staging location: KBQE_ENV=gcp needs KBQE_STAGING_URL"
    )


@pytest.mark.parametrize("env", [None, "local"])
def test_in_local_without_a_staging_location_it_is_the_local_stacks_bucket(
    env: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    if env:
        monkeypatch.setenv("KBQE_ENV", env)
    assert staging_location(None, None, {}) == StagingLocation(
        "gs://kbqe-local/staging", "http://127.0.0.1:14443", "kbqe-local"
    )


def test_the_local_default_follows_a_moved_gcs_port_and_an_explicit_endpoint(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("KBQE_LOCAL_GCS_PORT", "24443")
    assert staging_location(None, None, {}).gcs_endpoint == "http://127.0.0.1:24443"
    assert staging_location(None, "http://e:1", {}).gcs_endpoint == "http://e:1"


def test_an_unknown_environment_is_one_line_naming_it(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KBQE_ENV", "prod")
    assert_one_error_line(run("staging", "status"), "kbqe: error: KBQE_ENV='prod': expected one of")


@pytest.mark.parametrize("command", STAGING_COMMANDS, ids=" ".join)
def test_the_staging_url_variable_wins_over_the_environment_default(
    run: Run, command: tuple[str, ...], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    missing = tmp_path / "from-env"
    monkeypatch.setenv("KBQE_STAGING_URL", str(missing))
    result = run(*command)
    assert_one_error_line(result, f"kbqe: error: staging directory {missing} does not exist")


@pytest.mark.parametrize("command", STAGING_COMMANDS, ids=" ".join)
def test_a_missing_staging_directory_is_an_error_not_an_empty_area(
    run: Run, command: tuple[str, ...], tmp_path: Path
) -> None:
    missing = tmp_path / "typo"
    result = run(*command, "--staging", str(missing))
    assert_one_error_line(result, f"kbqe: error: staging directory {missing} does not exist")


@pytest.mark.parametrize(
    ("command", "first_words"),
    [
        (("staging", "status"), "kbqe: error: load state _kbqe/load_state.json is not valid JSON"),
        (("load", "plan"), "kbqe: error: load state _kbqe/load_state.json is not valid JSON"),
        (
            ("load", "release", "--table", "acme_sales.orders", "--yes"),
            "kbqe: error: load state _kbqe/load_state.json is not valid JSON",
        ),
    ],
)
def test_a_corrupt_state_file_stops_the_command_with_the_recovery_path(
    run: Run, area: Area, command: tuple[str, ...], first_words: str
) -> None:
    (area.root / STATE_FILE).write_text("{ not json")
    result = run(*command, "--staging", str(area.root))
    assert_one_error_line(result, first_words)
    assert "Safe recovery" in result.err
    assert "Traceback" not in result.err


def test_verbose_adds_the_traceback(run: Run, area: Area) -> None:
    (area.root / STATE_FILE).write_text("{ not json")
    result = run("staging", "status", "--staging", str(area.root), "--verbose")
    assert result.code == 1
    assert "Traceback (most recent call last)" in result.err
    assert "StateFileError" in result.err


def test_an_invalid_pipeline_file_prints_every_problem_with_its_key_path(
    run: Run, area: Area, tmp_path: Path
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("version: 1\ntopics: []\nload: {cadense: 5m}\n")
    result = run("load", "plan", "--staging", str(area.root), "--config", str(config))
    assert result.code == 1 and result.out == ""
    assert result.err.splitlines() == [
        f"kbqe: error: {config}: 2 problem(s):",
        "  - topics: expected a list of at least one topic, got a list",
        "  - load.cadense: unknown key; did you mean 'cadence'?",
    ]


def test_verbose_adds_only_the_traceback_to_a_pipeline_files_problems(
    run: Run, area: Area, tmp_path: Path
) -> None:
    config = tmp_path / "bad.yaml"
    config.write_text("version: 1\ntopics: []\nload: {cadense: 5m}\n")
    plain = run("load", "plan", "--staging", str(area.root), "--config", str(config))
    verbose = run("load", "plan", "--staging", str(area.root), "--config", str(config), "-v")
    assert "Traceback (most recent call last)" in verbose.err and "ConfigError" in verbose.err
    assert verbose.err.rstrip().endswith(plain.err.rstrip())


def test_a_negative_limit_is_refused(run: Run, area: Area) -> None:
    result = run("dead-letters", "--staging", str(area.root), "--limit", "-1")
    assert_one_error_line(result, "kbqe: error: --limit must be 0 or more, got -1")


GCP = {"KBQE_ENV": "gcp"}
EMULATOR = "http://127.0.0.1:14443"


@pytest.mark.parametrize(
    ("url", "endpoint", "environ", "expected"),
    [
        ("gs://b/p", None, GCP, StagingLocation("gs://b/p")),
        ("gs://b/p", EMULATOR, GCP, StagingLocation("gs://b/p", EMULATOR)),
        (
            None,
            None,
            {**GCP, "KBQE_STAGING_URL": "gs://b/p", "KBQE_GCS_ENDPOINT": "http://e:1"},
            StagingLocation("gs://b/p", "http://e:1"),
        ),
        (
            "gs://b/q",
            "http://opt:2",
            {**GCP, "KBQE_STAGING_URL": "gs://b/p", "KBQE_GCS_ENDPOINT": "http://env:1"},
            StagingLocation("gs://b/q", "http://opt:2"),
        ),
        (
            "gs://b/p",
            None,
            {**GCP, "KBQE_GCP_PROJECT": "acme-prod"},
            StagingLocation("gs://b/p", None, "acme-prod"),
        ),
        # In local (the default), a gs:// URL is the local stack's emulator, as for the runs.
        (
            "gs://kbqe-local/p",
            None,
            {},
            StagingLocation("gs://kbqe-local/p", EMULATOR, "kbqe-local"),
        ),
        (
            None,
            None,
            {"KBQE_STAGING_URL": "gs://kbqe-local/p"},
            StagingLocation("gs://kbqe-local/p", EMULATOR, "kbqe-local"),
        ),
        (
            "gs://kbqe-local/p",
            "http://opt:2",
            {"KBQE_GCS_ENDPOINT": "http://env:1"},
            StagingLocation("gs://kbqe-local/p", "http://opt:2", "kbqe-local"),
        ),
    ],
)
def test_options_win_over_the_environment_and_gcs_is_the_environments(
    url, endpoint, environ, expected
) -> None:
    assert staging_location(url, endpoint, environ) == expected


def test_an_unknown_url_scheme_is_refused() -> None:
    with pytest.raises(OperatorCommandError, match="expected a local directory or gs://"):
        staging_location("s3://bucket/prefix", None, {})
