"""The soak's faults, at seeded random times while the fleet produces.

Every kind is injected once per round (``rounds``: one per 20 minutes of soak, at least one),
in a seeded order at seeded times between 10 % and 85 % of the run, one after the other in a
thread of its own:

- ``daemon_kill``: SIGKILL ``dagster-daemon``, start it again 5 s later;
- ``code_server_kill``: SIGKILL the code server (the proxy ``dagster code-server start`` runs),
  start it again 5 s later; runs in flight keep running (their processes are not its own);
- ``stage_run_kill`` / ``load_run_kill``: SIGKILL the process of a stage run / load run in flight
  (a load run: while its load op runs, i.e. mid-submit or mid-poll), with its children;
- ``spark_jvm_kill``: SIGKILL only the Spark JVM of a stage run in flight (its driver's JVM, as
  when the JVM runs out of memory or a container's OOM killer picks it): the run's Python process
  lives on and must fail the run, not hang;
- ``run_terminate``: terminate a stage run in flight through the webserver's GraphQL API
  (``DagsterGraphQLClient.terminate_run``), as an operator does;
- ``code_location_reload``: reload the code location through the GraphQL API;
- ``kafka_restart``: stop the broker and start it again;
- ``registry_down`` / ``gcs_down`` / ``bigquery_down``: stop that emulator for 20-40 s;
- ``manual_duplicate_runs``: launch two stage runs of the hot topic by hand (GraphQL), next to
  whatever the sensor launches.

Each event records when it happened; the recovery time of a fault is the time from it to the
end of the first run of the job it hit (a stage run, a load run; any run for the daemon, code
server and reload faults) that started after it and succeeded. A fault that could not be injected
(no run of that kind in flight within its wait) is reported as such; a kind never injected is a
soak failure, as in the fault suite: it would prove nothing.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack.endpoints import LocalEndpoints
from kbqe_dagster.run_launcher import run_worker_pid
from reliability.services import outage
from reliability.soak_dagster import LOCATION, DagsterProcesses, instance
from reliability.soak_fleet import Fleet
from reliability.soak_watch import _ppids, descendants, is_server_process

log = logging.getLogger(__name__)

KINDS = (
    "daemon_kill",
    "code_server_kill",
    "stage_run_kill",
    "spark_jvm_kill",
    "load_run_kill",
    "run_terminate",
    "code_location_reload",
    "kafka_restart",
    "registry_down",
    "gcs_down",
    "bigquery_down",
    "manual_duplicate_runs",
)
OUTAGE_KINDS = (
    "kafka_restart",
    "registry_down",
    "gcs_down",
    "bigquery_down",
    "daemon_kill",
    "code_server_kill",
)
"""Faults during which (plus a margin) a sensor or schedule tick may fail."""
RECOVERED_BY = {
    "stage_run_kill": "stage_job",
    "spark_jvm_kill": "stage_job",
    "run_terminate": "stage_job",
    "manual_duplicate_runs": "stage_job",
    "kafka_restart": "stage_job",
    "registry_down": "stage_job",
    "gcs_down": "stage_job",
    "load_run_kill": "load_job",
    "bigquery_down": "load_job",
}
"""The job whose first success after a fault says the fault's path works again; the daemon,
code server and reload faults: any job."""
OUTAGE_MARGIN_S = 90.0
RUN_WAIT_S = 180.0


def _op_started(inst: Any, run_id: str, op: str) -> bool:
    return any(
        e.dagster_event is not None
        and e.dagster_event.event_type_value == "STEP_START"
        and e.step_key == op
        for e in inst.all_logs(run_id)
    )


def _is_java(pid: int) -> bool:
    try:
        return os.path.basename(os.readlink(f"/proc/{pid}/exe")) == "java"
    except OSError:
        return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class FaultEvent:
    kind: str
    at: float
    """Epoch seconds of the injection."""
    injected: bool
    detail: str
    ended: float = 0.0
    """Epoch seconds when the fault's outage ended (services back, process restarted)."""


@dataclass
class FaultInjector:
    dagster: DagsterProcesses
    endpoints: LocalEndpoints
    fleet: Fleet
    memory: Any
    rnd: random.Random
    duration: float
    events: list[FaultEvent] = field(default_factory=list)
    broken: str | None = None
    """Why the soak's stack is broken for good (a service a fault stopped never came back):
    the soak then ends with that reason at once instead of waiting out its timeout."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def plan(self) -> list[tuple[float, str]]:
        rounds = max(1, int(self.duration // 1200))
        plan: list[tuple[float, str]] = []
        for r in range(rounds):
            lo = self.duration * (0.1 + 0.75 * r / rounds)
            hi = self.duration * (0.1 + 0.75 * (r + 1) / rounds)
            kinds = list(KINDS)
            self.rnd.shuffle(kinds)
            times = sorted(self.rnd.uniform(lo, hi) for _ in kinds)
            plan += list(zip(times, kinds, strict=True))
        return plan

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="soak-faults", daemon=True)
        self._thread.start()

    def stop(self, finish_within: float = 600.0) -> None:
        """Let the planned faults finish (they run one after the other, so an outage or a wait
        for a run delays the next ones past their time), within ``finish_within`` seconds."""
        if self._thread is not None:
            self._thread.join(finish_within)
        self._stop.set()
        if self._thread is not None:
            self._thread.join(RUN_WAIT_S + 120)

    def _loop(self) -> None:
        begin = time.monotonic()
        for offset, kind in self.plan():
            if self._stop.wait(max(0.0, offset - (time.monotonic() - begin))):
                return
            at = time.time()
            try:
                injected, detail = getattr(self, kind)()
            except Exception as error:  # noqa: BLE001 - reported as not injected, with why
                log.exception("fault %s failed", kind)
                injected, detail = False, f"{type(error).__name__}: {error}"
                if isinstance(error, StackError):  # a service stays down: nothing can settle
                    self.broken = f"fault {kind}: {detail}"
            event = FaultEvent(kind, at, injected, detail, time.time())
            self.events.append(event)
            log.info("fault %s: %s — %s", kind, "injected" if injected else "NOT injected", detail)
            if self.broken:
                return

    def raise_if_broken(self) -> None:
        """End the soak at once when a service a fault stopped never came back."""
        if self.broken:
            raise RuntimeError(f"the soak's stack is broken: {self.broken}")

    # --- the faults ------------------------------------------------------------------------------
    def _restart(self, name: str) -> tuple[bool, str]:
        pid = self.dagster.kill(name)
        if pid is None:
            return False, f"{name} was not running"
        time.sleep(5)
        self.memory.restarted(name)
        self.dagster.start(name)
        return True, f"killed pid {pid}, restarted as pid {self.dagster.procs[name].pid}"

    def daemon_kill(self) -> tuple[bool, str]:
        return self._restart("daemon")

    def code_server_kill(self) -> tuple[bool, str]:
        # Its spawned server process is a child that would otherwise keep the port.
        proc = self.dagster.procs["code_server"]
        children = descendants(proc.pid, _ppids()) if proc.pid else []
        return self._restart_with(proc.name, [p for p in children if is_server_process(p)])

    def _restart_with(self, name: str, also: list[int]) -> tuple[bool, str]:
        for pid in also:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return self._restart(name)

    def _run_process(self, job: str, op_running: str | None = None) -> tuple[str, int] | None:
        """A run of ``job`` in flight and its process (waits up to :data:`RUN_WAIT_S`)."""
        import dagster as dg

        inst = instance(self.dagster.home)
        deadline = time.monotonic() + RUN_WAIT_S
        while time.monotonic() < deadline and not self._stop.is_set():
            records = inst.get_run_records(
                filters=dg.RunsFilter(job_name=job, statuses=[dg.DagsterRunStatus.STARTED])
            )
            for record in records:
                run_id = record.dagster_run.run_id
                if op_running is not None and not _op_started(inst, run_id, op_running):
                    continue
                pid = run_worker_pid(inst, run_id)
                if pid is not None and _alive(pid):
                    return run_id, pid
            time.sleep(1)
        return None

    def _kill_run(self, job: str, op_running: str | None = None) -> tuple[bool, str]:
        found = self._run_process(job, op_running)
        if found is None:
            return False, f"no {job} run in flight within {RUN_WAIT_S:.0f}s"
        run_id, pid = found
        # The run's whole tree: its Spark JVM dies with it, as on a lost host.
        tree = [pid, *descendants(pid, _ppids())]
        for p in tree:
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
        return True, f"SIGKILLed run {run_id} (pid {pid}, {len(tree)} process(es))"

    def stage_run_kill(self) -> tuple[bool, str]:
        return self._kill_run("stage_job")

    def spark_jvm_kill(self) -> tuple[bool, str]:
        """SIGKILL the JVM of a stage run whose Spark context is up, and nothing else of it."""
        deadline = time.monotonic() + RUN_WAIT_S
        while time.monotonic() < deadline and not self._stop.is_set():
            found = self._run_process("stage_job")
            if found is None:
                break
            run_id, pid = found
            jvms = [p for p in descendants(pid, _ppids()) if _is_java(p)]
            if jvms:
                for p in jvms:
                    try:
                        os.kill(p, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                return (
                    True,
                    f"SIGKILLed the Spark JVM {jvms} of run {run_id} (worker pid {pid} lives)",
                )
            time.sleep(0.5)  # its Spark context is not up yet
        return False, f"no stage run with a Spark JVM in flight within {RUN_WAIT_S:.0f}s"

    def load_run_kill(self) -> tuple[bool, str]:
        return self._kill_run("load_job", "load_cycle")

    def _graphql(self) -> Any:
        from dagster_graphql import DagsterGraphQLClient

        # A reload re-imports the definitions in the code server: over 60 s on a loaded machine
        # (seen in a rehearsal beside other suites); the UI an operator reloads from waits too.
        return DagsterGraphQLClient("127.0.0.1", port_number=self.dagster.web_port, timeout=180)

    def run_terminate(self) -> tuple[bool, str]:
        found = self._run_process("stage_job")
        if found is None:
            return False, "no stage run in flight to terminate"
        run_id, _ = found
        self._graphql().terminate_run(run_id)
        return True, f"terminated run {run_id} through GraphQL"

    def code_location_reload(self) -> tuple[bool, str]:
        info = self._graphql().reload_repository_location(LOCATION)
        return info.status.value == "SUCCESS", f"reload: {info.status.value} {info.message or ''}"

    def _outage(self, name: str, low: float, high: float) -> tuple[bool, str]:
        down_for = self.rnd.uniform(low, high)
        # outage() starts the service again however the wait ends, retrying a start that is
        # slow or dies (reliability/services.py): one CI soak left its BigQuery emulator down
        # after a restart that failed, and waited out its 40 minutes.
        with outage(name, self.endpoints) as down:
            time.sleep(down_for)
        return True, f"{name} down for {down_for:.0f}s, back after {down.seconds:.0f}s"

    def kafka_restart(self) -> tuple[bool, str]:
        return self._outage("kafka", 1, 3)

    def registry_down(self) -> tuple[bool, str]:
        return self._outage("apicurio", 20, 40)

    def gcs_down(self) -> tuple[bool, str]:
        return self._outage("gcs", 20, 40)

    def bigquery_down(self) -> tuple[bool, str]:
        return self._outage("bigquery", 20, 40)

    def manual_duplicate_runs(self) -> tuple[bool, str]:
        from kbqe_dagster.defs.keys import TOPIC_TAG
        from kbqe_dagster.defs.staging.jobs import stage_run_config

        client = self._graphql()
        topic = self.fleet.hot
        ids = [
            client.submit_job_execution(
                "stage_job",
                repository_location_name=LOCATION,
                run_config=stage_run_config(topic),
                tags={TOPIC_TAG: topic, "soak/manual": "1"},
            )
            for _ in range(2)
        ]
        return True, f"launched {ids} for {topic} by hand"

    # --- the report ------------------------------------------------------------------------------
    def outage_windows(self) -> list[tuple[float, float]]:
        return [
            (e.at, e.ended + OUTAGE_MARGIN_S)
            for e in self.events
            if e.injected and e.kind in OUTAGE_KINDS
        ]

    def recovery(self) -> dict[str, list[float | None]]:
        """Per kind: seconds from each fault to the end of the first run of the job it hit
        (:data:`RECOVERED_BY`; any job for the others) that started after it and succeeded
        (None: none did)."""
        import dagster as dg

        inst = instance(self.dagster.home)
        done = [
            (r.dagster_run.job_name, r.start_time, r.end_time)
            for r in inst.get_run_records(
                filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.SUCCESS])
            )
            if r.start_time and r.end_time
        ]
        out: dict[str, list[float | None]] = {}
        for event in self.events:
            if not event.injected:
                continue
            job = RECOVERED_BY.get(event.kind)
            ends = [end for name, start, end in done if start >= event.at and job in (None, name)]
            out.setdefault(event.kind, []).append(round(min(ends) - event.at, 1) if ends else None)
        return out

    def report(self) -> dict[str, Any]:
        recovery = self.recovery()
        return {
            "injected": {
                k: sum(1 for e in self.events if e.kind == k and e.injected) for k in KINDS
            },
            "not_injected": [
                {"kind": e.kind, "detail": e.detail} for e in self.events if not e.injected
            ],
            "recovery_s": {
                k: {"each": v, "max": max((x for x in v if x is not None), default=None)}
                for k, v in sorted(recovery.items())
            },
            "events": [
                {"kind": e.kind, "at": round(e.at, 1), "injected": e.injected, "detail": e.detail}
                for e in self.events
            ],
        }

    def failures(self) -> list[str]:
        out = []
        injected = {e.kind for e in self.events if e.injected}
        missing = [k for k in KINDS if k not in injected]
        if missing and len(self.events) >= len(KINDS):
            out.append(f"fault kinds never injected: {missing}")
        never_recovered = [k for k, v in self.recovery().items() if any(x is None for x in v)]
        if never_recovered:
            out.append(f"no successful run after: {never_recovered}")
        return out
