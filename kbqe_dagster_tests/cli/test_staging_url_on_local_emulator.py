"""A second pipeline on the local stack: ``KBQE_ENV=local`` and
``KBQE_STAGING_URL=gs://kbqe-local/<prefix>``. Every operator command that reads or writes the
staging area then uses the local GCS emulator, as the runs do (before, they went to real GCS and
failed with ``DefaultCredentialsError``). Each command's answer from the emulator equals its
answer from the same files in a local directory; what ``kbqe bootstrap`` writes there,
``kbqe staging status`` reads back."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.resources.environment import staging_location_for
from kbqe_dagster.resources.staging_store import StagingStore
from kbqe_dagster_tests.cli.conftest import Run
from kbqe_dagster_tests.cli.staging_area import Area, build

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
COMMANDS = [
    ("staging", "status"),
    ("load", "plan"),
    ("load", "release", "--table", "acme_sales.orders"),  # a dry run: reads only
    ("retention", "plan"),
    ("dead-letters", "--limit", "2"),
    ("completeness",),
]
# When each answer was made and how old the files were then: the only fields that differ
# between the two copies of one area (the uploads are younger than the directory's files).
MOMENT_KEYS = ("generated_at", "observed_at", "staging")


@pytest.fixture
def second_pipeline(local_stack, tmp_path: Path, monkeypatch) -> tuple[str, Area, StagingStore]:
    """The CLI tests' staging area, once in a directory and once uploaded under a prefix of
    the emulator's bucket that ``KBQE_STAGING_URL`` names; the prefix is emptied afterwards.
    (The stack's own port: conftest.py's ``clean_environment``.)"""
    area = build(tmp_path / "area")
    url = f"gs://{LOCAL_BUCKET}/mtse-cli-{uuid.uuid4().hex[:8]}"
    store = staging_location_for(url, "local").open()
    for path in sorted(p for p in area.root.rglob("*") if p.is_file()):
        store.put_file(path, str(path.relative_to(area.root)))
    monkeypatch.setenv("KBQE_ENV", "local")
    monkeypatch.setenv("KBQE_STAGING_URL", url)
    monkeypatch.setenv("KBQE_PIPELINE_CONFIG", str(REPO / "examples" / "pipeline.yaml"))
    yield url, area, store
    for stored in store.list():
        store.delete(stored.name)


def without_moments(doc: Any) -> Any:
    if isinstance(doc, dict):
        return {
            k: without_moments(v)
            for k, v in doc.items()
            if k not in MOMENT_KEYS and "age_s" not in k
        }
    if isinstance(doc, list):
        return [without_moments(v) for v in doc]
    return doc


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_the_command_reads_the_emulator_prefix_the_variable_names(
    run: Run, second_pipeline, command: tuple[str, ...]
) -> None:
    url, area, _ = second_pipeline
    from_emulator = run(*command, "--json").json()
    from_directory = run(*command, "--staging", str(area.root), "--json").json()

    if command[0] != "completeness":  # its report names tables, not the staging area
        assert from_emulator["staging"] == url
    assert without_moments(from_emulator) == without_moments(from_directory)


def test_what_bootstrap_writes_to_the_emulator_staging_status_reads_back(
    run: Run, second_pipeline
) -> None:
    url, _, store = second_pipeline
    written = run("bootstrap", "--topic", "mtse.boot", "--offsets", "0=5,1=7", "--json").json()
    status = run("staging", "status", "--json").json()

    assert written["staging"] == url
    assert {
        p["partition"]: p["next_offset"] for p in status["partitions"] if p["topic"] == "mtse.boot"
    } == {0: 5, 1: 7}
    assert any(s.name.startswith("mtse.boot.0.") for s in store.list("mtse.boot."))


def test_an_explicit_gcs_endpoint_still_wins_over_the_variable(
    run: Run, second_pipeline, local_endpoints, monkeypatch
) -> None:
    url, _, _ = second_pipeline
    # Nothing listens on port 1: read through it, the command would fail.
    monkeypatch.setenv("KBQE_GCS_ENDPOINT", "http://127.0.0.1:1")
    status = run("staging", "status", "--gcs-endpoint", local_endpoints.gcs_url, "--json").json()
    assert status["staging"] == url
    assert {p["topic"] for p in status["partitions"]} == {"com.acme", "com.acme.events"}
