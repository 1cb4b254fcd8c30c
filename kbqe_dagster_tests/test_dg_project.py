"""The repository is a ``dg`` project (pyproject.toml's ``[tool.dg]``): ``dg check defs``
loads the one entry point, kbqe_dagster/definitions.py, as ``dg dev`` and ``dg list defs`` do.
No stack needed: the definitions are built, nothing is run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DG = Path(sys.executable).parent / "dg"

pytestmark = pytest.mark.skipif(
    not DG.is_file(), reason="dagster-dg-cli is not installed (pip install -e '.[dev]')"
)


def _dg_check_defs(tmp_path: Path, **env: str) -> subprocess.CompletedProcess:
    home = tmp_path / "dagster_home"
    home.mkdir(exist_ok=True)
    (home / "dagster.yaml").write_text("telemetry:\n  enabled: false\n")
    # The sample pipeline unless the test names a file (not the caller's KBQE_PIPELINE_CONFIG).
    inherited = {k: v for k, v in os.environ.items() if k != "KBQE_PIPELINE_CONFIG"}
    environ = {
        **inherited,
        "DAGSTER_HOME": str(home),
        "KBQE_ENV": "local",
        "PYTHONPATH": str(REPO),
        **env,
    }
    return subprocess.run(
        [str(DG), "check", "defs"],
        cwd=REPO,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_dg_check_defs_loads_the_definitions(tmp_path) -> None:
    done = _dg_check_defs(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "All definitions loaded successfully" in done.stdout + done.stderr


def test_dg_check_defs_fails_on_a_pipeline_file_that_does_not_load(tmp_path) -> None:
    """The control: dg really builds our definitions (a bad pipeline file fails the check)."""
    bad = tmp_path / "pipeline.yaml"
    bad.write_text("topics:\n  - name: t\n    routing: {cadence: 5m}\n")
    done = _dg_check_defs(tmp_path, KBQE_PIPELINE_CONFIG=str(bad))
    assert done.returncode != 0
    assert "pipeline.yaml" in done.stdout + done.stderr
