"""Stage tasks' local work directories: their name (the task's pid first) and the cleanup of
those a killed task left behind (a killed task never reaches its own cleanup)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from kbqe_dagster.processes import pid_alive

WORKDIR_PREFIX = "kbqe-stage-"


def new_workdir(partition: int, start: int) -> Path:
    """A fresh work directory for the range of ``partition`` from ``start``, named after this
    process so :func:`remove_abandoned_workdirs` can tell whether its task is gone."""
    return Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-{partition}-{start}-"))


def remove_abandoned_workdirs(root: Path | None = None) -> int:
    """Delete the temp dirs of stage tasks whose process is gone (killed tasks never reach
    their cleanup); the pid is part of each dir's name. Returns how many were removed."""
    root = Path(root or tempfile.gettempdir())
    removed = 0
    for path in root.glob(f"{WORKDIR_PREFIX}*"):
        pid = path.name[len(WORKDIR_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed
