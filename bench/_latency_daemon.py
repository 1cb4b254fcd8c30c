"""The storage_write path of bench/bench_latency.py as production runs it (``--daemon``, implied
by ``--kill-at`` and ``--reload-at``): a code server (``dagster code-server start``) and a daemon
(``dagster-daemon run``) on a Dagster instance of the bench's own, with the project's
``dagster.yaml``; ``stage_loop_sensor`` launches the stage loop runs, as under ``kbqe dev``.

What it does to them: ``kill`` SIGKILLs the run worker of every loop run in flight (the process
the code server started for the run, found in the run's events); ``reload`` deploys a changed
pipeline file (a comment appended, so its digest changes) and reloads the code location, as
the UI's reload does. What it reads back: each loop run's phases, in seconds after the
daemon's start (:func:`loop_run_phases`).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from reliability.soak_dagster import DagsterProcesses  # noqa: E402

RUN_WORKER_PID = re.compile(r"Started process for run \(pid: (\d+)\)")
STEP_PID = "pid"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """A code server and a daemon of the bench's own (no webserver: nothing needs its API)."""

    def __init__(self, workdir: Path, pipeline_file: Path) -> None:
        self.pipeline_file = pipeline_file
        self.procs = DagsterProcesses.create(workdir, dict(os.environ), _free_port(), _free_port())
        del self.procs.procs["webserver"]
        self.started_at: float | None = None
        self.actions: list[dict] = []
        self._instance: Any = None

    def start(self) -> None:
        self.procs.start("code_server")
        self.procs.start("daemon")
        self.started_at = time.time()

    def stop(self) -> None:
        # The loop runs first (their Spark JVMs are children of their run workers), then the
        # daemon and the code server.
        self.kill_loop_workers(record=False, standbys=True)
        self.procs.stop_all()

    @property
    def instance(self) -> Any:
        if self._instance is None:
            import dagster as dg

            os.environ["DAGSTER_HOME"] = str(self.procs.home)
            self._instance = dg.DagsterInstance.get()
        return self._instance

    def loop_runs(self) -> list[Any]:
        import dagster as dg

        return self.instance.get_runs(filters=dg.RunsFilter(job_name="stage_loop_job"))[::-1]

    def _pids(self, run_id: str) -> tuple[int | None, int | None]:
        """The run worker's pid and its step process's (None: not started yet)."""
        worker = step = None
        for record in self.instance.all_logs(run_id):
            m = RUN_WORKER_PID.search(record.message or "")
            if m:
                worker = int(m.group(1))
            event = record.dagster_event
            if event is not None and event.event_type_value == "STEP_WORKER_STARTED":
                pid = (event.event_specific_data.metadata or {}).get(STEP_PID)
                if pid is not None:
                    step = int(pid.value)
        return worker, step

    def ready(self, standby: bool) -> bool:
        """A loop run is looping (and, with ``standby``, another one stands by warm)."""
        states = [self._state(r) for r in self.loop_runs() if not r.is_finished]
        return "looping" in states and (not standby or "warm" in states)

    def _state(self, run: Any) -> str | None:
        """The run's ``kbqe/loop_state``; for a run of code that records none, ``looping``
        once it logged its warm-up (it loops right after)."""
        state = run.tags.get("kbqe/loop_state")
        if state is None and "kbqe/standby" not in run.tags:
            logs = self.instance.all_logs(run.run_id)
            if any(MARKERS["spark_up_at"] in (e.user_message or "") for e in logs):
                return "looping"
        return state

    def kill_loop_workers(self, record: bool = True, standbys: bool = False) -> list[dict]:
        """SIGKILL the run worker of every loop run in flight but the standbys (``standbys``:
        theirs too), only the run worker: what a step process of it does then is part of
        what is measured. A run that records no state (code without standbys) is killed."""
        killed = []
        for run in self.loop_runs():
            if run.is_finished:
                continue
            if (
                not standbys
                and (run.tags.get("kbqe/loop_state") == "warm" or "kbqe/standby" in run.tags)
                and run.tags.get("kbqe/loop_state") != "looping"
            ):
                continue
            worker, step = self._pids(run.run_id)
            if worker is None:
                continue
            try:
                os.kill(worker, signal.SIGKILL)
            except ProcessLookupError:
                continue
            killed.append({"run_id": run.run_id, "worker_pid": worker, "step_pid": step})
        if record:
            self.actions.append({"what": "kill", "at": time.time(), "killed": killed})
        return killed

    def reload(self) -> None:
        """A deploy: the pipeline file changed (its digest with it) and the location reloaded,
        in a thread (the new server loads the definitions: seconds, tens of them under load);
        ``seconds`` is recorded when it answered."""
        from dagster._grpc.client import DagsterGrpcClient

        action = {"what": "reload", "at": time.time()}
        self.actions.append(action)
        with self.pipeline_file.open("a") as f:
            f.write(f"# deployed at {action['at']:.0f}\n")

        def reload() -> None:
            client = DagsterGrpcClient(port=self.procs.grpc_port, host="127.0.0.1")
            client.reload_code(timeout=180)
            action["seconds"] = round(time.time() - action["at"], 2)

        threading.Thread(target=reload, name="reload", daemon=True).start()

    def orphans(self) -> list[int]:
        """Step processes of killed run workers still alive (a writer without a run)."""
        alive = []
        for action in self.actions:
            for k in action.get("killed", ()):
                pid = k.get("step_pid")
                if pid is not None and _alive(pid):
                    alive.append(pid)
        return alive


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except OSError:
        return False


# --- each loop run's phases ------------------------------------------------------------------
MARKERS = {
    "spark_up_at": "stage loop: Spark warmed up",
    "first_round_at": "stage loop: first round done",
    "standby_at": "stage loop: standing by",
    "takeover_at": "stage loop: taking over",
}


def loop_run_phases(daemon: Daemon, since: float) -> list[dict]:
    """Per loop run, in seconds after ``since``: created (the sensor's request queued),
    launched (dequeued, its run worker starting), run worker up (RUN_START), step up (STEP_START),
    Spark up, standing by / taking over (a standby), first round done, ended; and how it ended."""
    out = []
    inst = daemon.instance
    for run in daemon.loop_runs():
        record = inst.get_run_record_by_id(run.run_id)
        phases: dict[str, Any] = {
            "run_id": run.run_id[:8],
            "status": run.status.value,
            "standby": run.tags.get("kbqe/standby"),
            "created_at": record.create_timestamp.timestamp(),
        }
        for entry in inst.all_logs(run.run_id):
            event = entry.dagster_event
            kind = event.event_type_value if event is not None else None
            at = entry.timestamp
            # Dagster still writes the runs' events under their old PIPELINE_* names.
            kind = (kind or "").replace("PIPELINE_", "RUN_")
            if kind == "RUN_STARTING":
                phases.setdefault("launched_at", at)
            elif kind == "RUN_START":
                phases.setdefault("worker_up_at", at)
            elif kind == "STEP_START":
                phases.setdefault("step_up_at", at)
            elif kind in ("RUN_SUCCESS", "RUN_FAILURE", "RUN_CANCELED"):
                phases.setdefault("ended_at", at)
            for name, text in MARKERS.items():
                if text in (entry.user_message or ""):
                    phases.setdefault(name, at)
        for key in list(phases):
            if key.endswith("_at"):
                phases[key] = round(phases[key] - since, 2)
        out.append(phases)
    return out


def sensor_ticks(daemon: Daemon, name: str, since: float) -> list[dict]:
    """The ticks of sensor ``name`` that requested runs: when, in seconds after ``since``."""
    out = []
    for state in daemon.instance.all_instigator_state():
        if state.instigator_name != name:
            continue
        ticks = daemon.instance.get_ticks(state.instigator_origin_id, state.selector_id)
        for tick in ticks:
            if tick.run_ids:
                out.append({"at": round(tick.timestamp - since, 2), "runs": len(tick.run_ids)})
    return sorted(out, key=lambda t: t["at"])
