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


def test_work_dirs_live_in_a_directory_of_their_own_which_the_cleanup_lists(
    tmp_path: Path, monkeypatch
) -> None:
    """The cleanup every task runs lists the stage work directories only, not the whole temp
    dir (which may hold tens of thousands of entries: a fixed cost of every range)."""
    import tempfile

    from kbqe_dagster.staging.workdirs import WORKDIR_ROOT, new_workdir

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    workdir = new_workdir(3, 100)
    assert workdir.parent == tmp_path / f"{WORKDIR_ROOT}-{__import__('os').getuid()}"
    assert workdir.name.startswith(f"{WORKDIR_PREFIX}{__import__('os').getpid()}-3-100-")
    stray = tmp_path / f"{WORKDIR_PREFIX}999999999-0-1-abc"  # beside, not inside: not listed
    stray.mkdir()
    assert remove_abandoned_workdirs() == 0
    assert stray.exists() and workdir.exists()
