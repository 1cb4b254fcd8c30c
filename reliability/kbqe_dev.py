"""``kbqe dev`` as the daemon scripts run it (``compacted_daemon``, ``debezium_daemon``,
``cluster_daemon``): a session of its own, its output in ``kbqe-dev.log`` of the work
directory, and stopped with its whole process group (the webserver, the daemon, the code
server and their runs)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def start(env: Mapping[str, str], work: Path, port: int, cwd: Path) -> subprocess.Popen:
    log = open(work / "kbqe-dev.log", "w")  # noqa: SIM115 - kept open for the child's life
    return subprocess.Popen(
        [str(Path(sys.executable).parent / "kbqe"), "dev", "--port", str(port)],
        env=dict(env), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd,
    )  # fmt: skip


def stop(dev: subprocess.Popen, grace: float = 60.0) -> None:
    """SIGTERM to the group, SIGKILL to what is left of it after ``grace`` seconds."""
    os.killpg(dev.pid, signal.SIGTERM)
    try:
        dev.wait(grace)
    except subprocess.TimeoutExpired:
        os.killpg(dev.pid, signal.SIGKILL)
