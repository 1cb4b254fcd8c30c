"""Temp dirs of killed stage tasks do not pile up: the next task removes them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kbqe_dagster.staging.workdirs import WORKDIR_PREFIX, remove_abandoned_workdirs


def test_dirs_of_dead_processes_are_removed_and_live_ones_kept(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    abandoned = tmp_path / f"{WORKDIR_PREFIX}{dead}-0-100-abc"
    live = tmp_path / f"{WORKDIR_PREFIX}1-0-100-abc"  # pid 1 is always alive
    ours = tmp_path / f"{WORKDIR_PREFIX}{__import__('os').getpid()}-0-5-xyz"
    legacy = tmp_path / f"{WORKDIR_PREFIX}x-y"  # not a pid: not ours to judge
    for d in (abandoned, live, ours, legacy):
        (d / "file.avro").parent.mkdir()
        (d / "file.avro").write_bytes(b"x")

    assert remove_abandoned_workdirs(tmp_path) == 1
    assert not abandoned.exists() and live.exists() and ours.exists() and legacy.exists()
