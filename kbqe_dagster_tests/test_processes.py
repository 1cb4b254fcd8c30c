"""Whether a pid still runs: one answer for the runner, the local stack and the stage workdirs."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from kbqe_dagster.processes import pid_alive


def _exited_child() -> subprocess.Popen:
    """A child that exited and was not waited for: a zombie (held, so that Popen's own
    finalizer does not reap it)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with open(f"/proc/{child.pid}/stat") as stat:
            if stat.read().split(") ", 1)[1].startswith("Z"):
                return child
        time.sleep(0.01)
    raise AssertionError(f"child {child.pid} did not exit")


def test_this_process_runs() -> None:
    assert pid_alive(os.getpid())


def test_a_pid_no_process_holds_does_not_run() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not pid_alive(child.pid)


def test_someone_elses_process_counts_as_running() -> None:
    assert pid_alive(1)  # init: not ours to signal, alive


def test_an_exited_child_still_answers_unless_reaped() -> None:
    child = _exited_child()
    pid = child.pid
    assert pid_alive(pid)  # a zombie answers kill(pid, 0)
    assert not pid_alive(pid, reap_child=True)
    assert not pid_alive(pid)
