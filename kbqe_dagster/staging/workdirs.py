"""Stage tasks' local work directories: their name (the task's pid first) and the cleanup of
those a killed task left behind (a killed task never reaches its own cleanup).

They live in a directory of their own under the temp dir (:data:`WORKDIR_ROOT`), so the
cleanup every task runs lists only them: globbing the temp dir itself cost each task 10-30 ms
on a machine whose ``/tmp`` held ~15,000 entries (a fixed cost of every range; issue 26)."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from kbqe_dagster.processes import pid_alive
from kbqe_dagster.resources.temp_dirs import private_temp_dir

WORKDIR_PREFIX = "kbqe-stage-"
WORKDIR_ROOT = "kbqe-workdirs"
"""The parent of the work directories: ``<temp dir>/kbqe-workdirs-<uid>`` (a name the
``kbqe-stage-*`` cleanup of earlier versions does not match), or the temp dir itself when
that directory cannot be trusted (``private_temp_dir``)."""


def workdir_root() -> Path:
    return private_temp_dir(WORKDIR_ROOT) or Path(tempfile.gettempdir())


def new_workdir(partition: int, start: int) -> Path:
    """A fresh work directory for the range of ``partition`` from ``start``, named after this
    process so :func:`remove_abandoned_workdirs` can tell whether its task is gone."""
    prefix = f"{WORKDIR_PREFIX}{os.getpid()}-{partition}-{start}-"
    return Path(tempfile.mkdtemp(prefix=prefix, dir=workdir_root()))


def remove_abandoned_workdirs(root: Path | None = None) -> int:
    """Delete the temp dirs of stage tasks whose process is gone (killed tasks never reach
    their cleanup); the pid is part of each dir's name. Returns how many were removed."""
    root = Path(root or workdir_root())
    removed = 0
    for path in root.glob(f"{WORKDIR_PREFIX}*"):
        pid = path.name[len(WORKDIR_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not pid_alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed
