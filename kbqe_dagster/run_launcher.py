"""kbqe's run launcher: Dagster's default one (each run a process of the code server) that can
also tell the daemon's run monitoring when a run's worker is gone.

The default launcher cannot (``supports_check_run_worker_health`` is false), so a run whose
worker dies after its code server was restarted or reloaded stays STARTED for ever
(core/run_worker_health.py says why, and decides). With this launcher, named in the packaged
``dagster.yaml``, ``run_monitoring`` fails such a run within its poll interval: its pool and
tag-limit slots are freed and the sensors launch its work again, exactly once as ever (a range
commits once, through its create-only done files).

A step of the run records the worker's identity with :func:`record_run_worker` when it first
opens the pipeline resource (every kbqe job's ops read it); the monitor compares it with what
``/proc`` shows. Runs
of other jobs, and workers on another host or in another container, get no verdict: they are
RUNNING to the monitor, as under the default launcher. A leaf beside ``instance_config``: it
imports Dagster, ``core`` and the ``processes`` leaf only, since the daemon loads it with the
instance.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from dagster._core.launcher import CheckRunHealthResult, DefaultRunLauncher, WorkerStatus

from kbqe_dagster.core.run_worker_health import WORKER_TAG, ProcessIdentity, worker_gone
from kbqe_dagster.processes import parent_pid, start_ticks

log = logging.getLogger(__name__)

BOOT_ID = "/proc/sys/kernel/random/boot_id"


def process_identity(pid: int) -> ProcessIdentity | None:
    """Process ``pid``'s identity as this process sees it, or None where ``/proc`` does not
    tell it (no such process, or not Linux)."""
    try:
        with open(BOOT_ID) as boot:
            boot_id = boot.read().strip()
        namespace = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None
    ticks = start_ticks(pid)
    if ticks is None:
        return None
    return ProcessIdentity(boot_id, namespace, pid, ticks)


def this_process() -> ProcessIdentity | None:
    """This process's identity (:func:`process_identity`)."""
    return process_identity(os.getpid())


RUN_WORKER_STARTED = "Started process for run"
"""The start of the engine event a launched run's worker logs first, with its pid in the
event's metadata (Dagster's ``EngineEventData.in_process``)."""


def is_self_or_ancestor(pid: int) -> bool:
    """Whether ``pid`` is this process or one of its ancestors."""
    current: int | None = os.getpid()
    while current and current > 0:
        if current == pid:
            return True
        current = parent_pid(current)
    return False


def run_worker_pid(instance: Any, run_id: str) -> int | None:
    """The pid the run's worker logged when its launcher started it, or None for a run that
    no launcher started (``execute_in_process``, ``kbqe run``)."""
    import dagster as dg

    for entry in instance.all_logs(run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
        event = entry.dagster_event
        if not (entry.message or "").startswith(RUN_WORKER_STARTED) or event is None:
            continue
        pid = event.engine_event_data.metadata.get("pid")
        text = getattr(pid, "value", pid)
        return int(text) if isinstance(text, str | int) and str(text).isdigit() else None
    return None


def record_run_worker(instance: Any, run_id: str | None) -> None:
    """Tag run ``run_id`` with its worker's identity (:data:`WORKER_TAG`): called in a step of
    the run, which is the worker itself (the in-process executor) or its child (the
    multiprocess one, each step a process of its own that ends with the step). So the identity
    recorded is the worker's, the pid it logged on start, and only when that pid is this
    process or an ancestor. Does nothing outside a run (a sensor, a test's resource), for a
    run no launcher started, where ``/proc`` cannot tell, or when the tag is already there."""
    if instance is None or not run_id:
        return
    run = instance.get_run_by_id(run_id)
    if run is None or WORKER_TAG in run.tags:
        return
    pid = run_worker_pid(instance, run_id)
    if pid is None or not is_self_or_ancestor(pid):
        return
    worker = process_identity(pid)
    if worker is not None:
        instance.add_run_tags(run_id, {WORKER_TAG: worker.tag})


class WatchedRunLauncher(DefaultRunLauncher):
    """``DefaultRunLauncher`` plus a worker health check (see the module docstring). Named in
    ``dagster.yaml`` as ``run_launcher: {module: kbqe_dagster.run_launcher, class:
    WatchedRunLauncher}``; it takes no configuration."""

    @property
    def supports_check_run_worker_health(self) -> bool:
        return True

    def check_run_worker_health(self, run: Any) -> CheckRunHealthResult:
        recorded = ProcessIdentity.from_tag(run.tags.get(WORKER_TAG))
        me = this_process()
        if recorded is None or me is None:
            return CheckRunHealthResult(WorkerStatus.RUNNING, "no worker identity to check")
        reason = worker_gone(recorded, me.boot_id, me.pid_namespace, start_ticks(recorded.pid))
        if reason is None:
            return CheckRunHealthResult(WorkerStatus.RUNNING, f"run worker pid {recorded.pid}")
        log.warning("run %s: %s, and the run never ended: failing it", run.run_id, reason)
        return CheckRunHealthResult(
            WorkerStatus.FAILED,
            f"{reason}, and the run never ended (its code server was restarted or reloaded "
            "since it started, so nothing else saw it die)",
        )
