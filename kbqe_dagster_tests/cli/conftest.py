"""Fixtures of the CLI tests: a staging area on disk and ``kbqe`` run in-process."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from kbqe_dagster import cli
from kbqe_dagster_tests.cli.staging_area import Area, build

ENV_VARS = (
    "KBQE_STAGING_URL",
    "KBQE_GCS_ENDPOINT",
    "KBQE_GCP_PROJECT",
    "KBQE_PIPELINE_CONFIG",
    "KBQE_ENV",
    "KBQE_LOCAL_GCS_PORT",
)


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        assert self.code == 0, self.err
        return json.loads(self.out)


Run = Callable[..., Result]


@pytest.fixture(autouse=True)
def clean_environment(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """No developer setting leaks into a test. A test on the local stack keeps the port the
    stack was started on (moved or not): without it the command read the default port's
    emulator, another stack's or none."""
    for name in ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    if "local_stack" in request.fixturenames:
        endpoints = request.getfixturevalue("local_endpoints")
        monkeypatch.setenv("KBQE_LOCAL_GCS_PORT", str(endpoints.gcs_port))


@pytest.fixture
def area(tmp_path: Path) -> Area:
    return build(tmp_path / "staging")


@pytest.fixture
def run(capsys: pytest.CaptureFixture[str]) -> Run:
    """``run("staging", "status", ...)``: ``kbqe`` with these arguments, stdout and stderr."""

    def _run(*argv: str) -> Result:
        capsys.readouterr()
        code = cli.main(list(argv))
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return _run
