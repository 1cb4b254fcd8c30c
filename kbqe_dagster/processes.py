"""Processes of this machine, by pid: whether one still runs, and what ``/proc/<pid>/stat``
says of it (its parent, when it started). A leaf, like faults.py: it
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


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` from the state (field 3) on, or None when this
    process cannot see one with that pid. The command name (field 2) is in parentheses and may
    hold spaces and parentheses: the fields are counted after its last ``)``."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            text = stat.read()
    except OSError:
        return None
    end = text.rfind(")")
    return None if end < 0 else text[end + 2 :].split()


def parent_pid(pid: int) -> int | None:
    """The parent of process ``pid`` (field 4), or None."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[1])


def start_ticks(pid: int) -> int | None:
    """When process ``pid`` started, in clock ticks since boot (field 22), or None: with its
    pid, it names the process even after the pid is reused."""
    fields = stat_fields(pid)
    return None if fields is None else int(fields[19])
