"""kbqe's run launcher (kbqe_dagster/run_launcher.py) on real processes and Dagster's own run
monitoring: the instance the packaged dagster.yaml makes uses it; a run worker tags its run with
its identity; a STARTED run whose worker process is gone is failed by the monitoring's own
routine, and one whose worker runs, or is out of sight, is left alone."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.events import EngineEventData
from dagster._core.launcher import WorkerStatus
from dagster._daemon.monitoring.run_monitoring import monitor_started_run

from kbqe_dagster.core.run_worker_health import WORKER_TAG, ProcessIdentity
from kbqe_dagster.run_launcher import (
    WatchedRunLauncher,
    process_identity,
    record_run_worker,
    this_process,
)
from kbqe_dagster_tests.conftest import REPO_ROOT

pytestmark = pytest.mark.skipif(not Path("/proc/self/ns/pid").exists(), reason="Linux /proc")


@pytest.fixture
def instance(tmp_path: Path) -> Iterator[dg.DagsterInstance]:
    shutil.copyfile(REPO_ROOT / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as inst:
        yield inst


@pytest.fixture
def worker() -> Iterator[tuple[subprocess.Popen[str], ProcessIdentity]]:
    """A process of its own standing in for a run worker, and its identity."""
    proc = subprocess.Popen(["sleep", "600"], text=True)
    try:
        identity = process_identity(proc.pid)
        assert identity is not None and identity == this_process_but(proc.pid)
        yield proc, identity
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
        proc.wait()


def this_process_but(pid: int) -> ProcessIdentity:
    """The identity of ``pid`` were it a sibling of this process: same boot and namespace."""
    me = this_process()
    assert me is not None
    identity = process_identity(pid)
    assert identity is not None
    return ProcessIdentity(me.boot_id, me.pid_namespace, pid, identity.start_ticks)


def started_run(instance: dg.DagsterInstance, tag: str | None) -> dg.DagsterRun:
    tags = {} if tag is None else {WORKER_TAG: tag}
    run = instance.create_run_for_job(dg.GraphDefinition("g").to_job(), tags=tags)
    instance.handle_new_event(
        dg.EventLogEntry(
            error_info=None, level="debug", user_message="", run_id=run.run_id, timestamp=0.0,
            dagster_event=dg.DagsterEvent(dg.DagsterEventType.RUN_START.value, "g"),
        )
    )  # fmt: skip
    started = instance.get_run_by_id(run.run_id)
    assert started is not None and started.status == dg.DagsterRunStatus.STARTED
    return started


def check_run(instance: dg.DagsterInstance, run: dg.DagsterRun) -> dg.DagsterRun:
    again = instance.get_run_by_id(run.run_id)
    assert again is not None
    return again


def monitor(instance: dg.DagsterInstance, run: dg.DagsterRun) -> dg.DagsterRunStatus:
    """One pass of Dagster's own monitoring over ``run``; its status after."""
    record = instance.get_run_record_by_id(run.run_id)
    assert record is not None
    monitor_started_run(instance, None, record, logging.getLogger("test"))  # type: ignore[arg-type]
    after = instance.get_run_by_id(run.run_id)
    assert after is not None
    return after.status


def test_the_packaged_instance_uses_the_watched_launcher(instance: dg.DagsterInstance) -> None:
    assert isinstance(instance.run_launcher, WatchedRunLauncher)
    assert instance.run_launcher.supports_check_run_worker_health
    assert instance.run_monitoring_enabled


def log_worker_started(instance: dg.DagsterInstance, run: dg.DagsterRun, pid: int) -> None:
    """What a launched run's worker logs first (Dagster's grpc and CLI run entry points)."""
    instance.report_engine_event(
        f"Started process for run (pid: {pid}).", run, EngineEventData.in_process(pid)
    )


def test_a_step_in_the_run_worker_tags_the_run_with_the_worker(
    instance: dg.DagsterInstance,
) -> None:
    run = started_run(instance, None)
    record_run_worker(instance, run.run_id)  # no worker logged: a run no launcher started
    assert WORKER_TAG not in check_run(instance, run).tags
    log_worker_started(instance, run, os.getpid())
    record_run_worker(instance, run.run_id)
    me = this_process()
    assert me is not None and check_run(instance, run).tags[WORKER_TAG] == me.tag
    record_run_worker(instance, None)  # outside a run (a sensor's resource): nothing to tag


def test_a_step_process_tags_the_run_with_its_parent_the_worker(
    instance: dg.DagsterInstance, tmp_path: Path
) -> None:
    # The multiprocess executor (the default under the daemon) runs each step in a child of
    # the run worker, which ends with the step: the run's identity must be the worker's.
    run = started_run(instance, None)
    log_worker_started(instance, run, os.getpid())
    step = (
        "import dagster as dg, sys; from kbqe_dagster.run_launcher import record_run_worker\n"
        "with dg.DagsterInstance.from_config(sys.argv[1]) as inst:\n"
        "    record_run_worker(inst, sys.argv[2])\n"
    )
    subprocess.run([sys.executable, "-c", step, str(tmp_path), run.run_id], check=True)
    me = this_process()
    assert me is not None and check_run(instance, run).tags[WORKER_TAG] == me.tag


def test_a_worker_pid_that_is_not_an_ancestor_is_not_recorded(
    instance: dg.DagsterInstance, worker: tuple[subprocess.Popen[str], ProcessIdentity]
) -> None:
    proc, _ = worker
    run = started_run(instance, None)
    log_worker_started(instance, run, proc.pid)  # some other process: never this step's worker
    record_run_worker(instance, run.run_id)
    assert WORKER_TAG not in check_run(instance, run).tags


def test_a_running_worker_keeps_its_run(
    instance: dg.DagsterInstance, worker: tuple[subprocess.Popen[str], ProcessIdentity]
) -> None:
    _, identity = worker
    run = started_run(instance, identity.tag)
    assert instance.run_launcher.check_run_worker_health(run).status == WorkerStatus.RUNNING
    assert monitor(instance, run) == dg.DagsterRunStatus.STARTED


def test_a_run_whose_worker_died_unseen_is_failed_by_the_monitoring(
    instance: dg.DagsterInstance, worker: tuple[subprocess.Popen[str], ProcessIdentity]
) -> None:
    proc, identity = worker
    run = started_run(instance, identity.tag)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    health = instance.run_launcher.check_run_worker_health(run)
    assert health.status == WorkerStatus.FAILED
    assert f"pid {identity.pid}" in (health.msg or "")
    assert monitor(instance, run) == dg.DagsterRunStatus.FAILURE


def test_a_worker_out_of_sight_or_unnamed_keeps_its_run(
    instance: dg.DagsterInstance, worker: tuple[subprocess.Popen[str], ProcessIdentity]
) -> None:
    proc, identity = worker
    elsewhere = ProcessIdentity("another-boot", identity.pid_namespace, identity.pid, 1)
    runs = [started_run(instance, elsewhere.tag), started_run(instance, None)]
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for run in runs:
        assert monitor(instance, run) == dg.DagsterRunStatus.STARTED
