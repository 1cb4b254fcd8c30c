"""Processes of this machine, by pid: whether one still runs. A leaf, like faults.py: it
imports nothing of the package, so every room that records a pid may ask it (the runner for
the process that launched a run, the local stack for its services, the stage workdirs for
their owners)."""

from __future__ import annotations

import os


def pid_alive(pid: int, *, reap_child: bool = False) -> bool:
    """Whether process ``pid`` exists (``kill(pid, 0)``); someone else's process under that pid
    counts as alive. A child that exited and was not waited for (a zombie) still answers
    ``kill``: ``reap_child`` waits for it here, so it counts as gone (the local stack's
    services are children of the ``kbqe`` that started them)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process under that pid: alive
        return True
    if not reap_child:
        return True
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:  # not a child of ours
        return True
