"""The orchestration as production runs it, for the soak: ``dagster code-server start`` (the
code location), ``dagster-daemon run`` (sensors, schedules, the run queue) and
``dagster-webserver`` (the GraphQL API an operator terminates runs through), each a process of
its own on a Dagster instance of the soak's own, with the project's ``dagster.yaml`` (queued run
coordinator, tag limits, the ``bigquery_load`` pool). Runs are launched by the code server
(Dagster's default run launcher), one process per run.

The instance's storage is SQLite under its ``DAGSTER_HOME``, or PostgreSQL as production keeps
it (``--storage postgres``): the private stack's on-demand PostgreSQL (the server change data
capture uses), a database of the run's own created in it, and the instance file
``kbqe config dagster-yaml --storage postgres`` prints (kbqe_dagster/instance_config.py).

Also what the soak reads back from the instance at the end: run outcomes, runs stuck in flight,
pool slots held, the latest evaluation of every asset check, and the sensors' and schedules'
failed ticks.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kbqe_dagster.instance_config import STORAGES, instance_yaml, postgres_environment
from kbqe_dagster.localstack.base import port_open
from kbqe_dagster.localstack.endpoints import LocalEndpoints

log = logging.getLogger(__name__)

LOCATION = "kbqe_dagster"
IN_FLIGHT = ("QUEUED", "NOT_STARTED", "STARTING", "STARTED", "CANCELING")


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


@dataclass
class Proc:
    """One long-lived Dagster process the soak started (and may kill and start again)."""

    name: str
    argv: list[str]
    ready_port: int | None
    log_file: Path
    popen: subprocess.Popen | None = None
    starts: int = 0

    @property
    def pid(self) -> int | None:
        return self.popen.pid if self.popen is not None else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None


@dataclass
class DagsterProcesses:
    """The daemon, the code server and the webserver of one soak run."""

    workdir: Path
    env: dict[str, str]
    grpc_port: int
    web_port: int
    procs: dict[str, Proc] = field(default_factory=dict)

    @classmethod
    def create(
        cls,
        workdir: Path,
        env: dict[str, str],
        grpc_port: int,
        web_port: int,
        storage: str = "sqlite",
    ) -> DagsterProcesses:
        """``env`` holds the ``KBQE_DAGSTER_PG_*`` variables for ``storage="postgres"``."""
        home = workdir / "dagster_home"
        home.mkdir(parents=True, exist_ok=True)
        (home / "dagster.yaml").write_text(instance_yaml(storage))
        workspace = workdir / "workspace.yaml"
        workspace.write_text(
            "load_from:\n"
            f"  - grpc_server: {{host: 127.0.0.1, port: {grpc_port}, location_name: {LOCATION}}}\n"
        )
        env = {**env, "DAGSTER_HOME": str(home)}
        self = cls(workdir, env, grpc_port, web_port)
        logs = workdir / "logs"
        logs.mkdir(exist_ok=True)
        self.procs = {
            "code_server": Proc(
                "code_server",
                [
                    _bin("dagster"), "code-server", "start", "-h", "127.0.0.1",
                    "-p", str(grpc_port), "-m", "kbqe_dagster.definitions",
                    "--location-name", LOCATION,
                ],
                grpc_port,
                logs / "code_server.log",
            ),
            "daemon": Proc(
                "daemon",
                [_bin("dagster-daemon"), "run", "-w", str(workspace)],
                None,
                logs / "daemon.log",
            ),
            "webserver": Proc(
                "webserver",
                [_bin("dagster-webserver"), "-h", "127.0.0.1", "-p", str(web_port), "-w", str(workspace)],
                web_port,
                logs / "webserver.log",
            ),
        }  # fmt: skip
        return self

    @property
    def home(self) -> Path:
        return Path(self.env["DAGSTER_HOME"])

    def start(self, name: str, timeout: float = 240) -> None:
        proc = self.procs[name]
        out = proc.log_file.open("ab")
        proc.popen = subprocess.Popen(
            proc.argv, env=self.env, cwd=self.workdir, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )  # fmt: skip
        proc.starts += 1
        deadline = time.monotonic() + timeout
        while proc.ready_port is not None and not port_open(proc.ready_port):
            if not proc.alive():
                raise RuntimeError(f"{name} exited during start-up; see {proc.log_file}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{name} not ready after {timeout:.0f}s; see {proc.log_file}")
            time.sleep(0.5)
        log.info("%s started (pid %s)", name, proc.pid)

    def start_all(self) -> None:
        self.start("code_server")  # the others load the location from it
        self.start("webserver")
        self.start("daemon")

    def kill(self, name: str) -> int | None:
        """SIGKILL the process (not its children: a run in flight outlives a killed daemon or
        code server, as it would in production)."""
        proc = self.procs[name]
        if not proc.alive():
            return None
        assert proc.popen is not None
        pid = proc.popen.pid
        os.kill(pid, signal.SIGKILL)
        proc.popen.wait(30)
        return pid

    def stop_all(self) -> None:
        """Stop every process group the soak started (daemon first: no new runs), then runs
        still alive under the code server's group."""
        for name in ("daemon", "webserver", "code_server"):
            proc = self.procs.get(name)
            if proc is None or proc.popen is None:
                continue
            if proc.alive():
                try:
                    os.killpg(proc.popen.pid, signal.SIGTERM)
                    proc.popen.wait(30)
                except (ProcessLookupError, subprocess.TimeoutExpired):
                    pass
            try:
                os.killpg(proc.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

    def stop_instigators(self, inst: Any) -> list[str]:
        """Turn every sensor and schedule off (``dagster sensor|schedule stop``, as an operator
        would), the daemon still running: the queue drains, and nothing new is launched."""
        from dagster._core.definitions.run_request import InstigatorType

        stopped = []
        workspace = str(self.workdir / "workspace.yaml")
        for state in inst.all_instigator_state():
            kind = {InstigatorType.SENSOR: "sensor", InstigatorType.SCHEDULE: "schedule"}.get(
                state.instigator_type
            )
            if kind is None:
                continue
            result = subprocess.run(
                [_bin("dagster"), kind, "stop", state.instigator_name, "-w", workspace],
                env=self.env, cwd=self.workdir, capture_output=True, text=True, timeout=180,
            )  # fmt: skip
            if result.returncode == 0:
                stopped.append(state.instigator_name)
            else:
                log.warning(
                    "could not stop %s %s: %s", kind, state.instigator_name, result.stderr[-500:]
                )
        return stopped

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self.procs.items() if p.alive() and p.pid is not None}


# --- the instance's storage ---------------------------------------------------------------------
@dataclass(frozen=True)
class Storage:
    """Where the soak's Dagster instance keeps runs, events and schedules: ``env`` holds what
    its instance file reads (empty for SQLite), ``report`` what the soak's report records."""

    kind: str
    env: dict[str, str]
    report: dict[str, Any]


def prepare_storage(kind: str, endpoints: LocalEndpoints, run_id: str) -> Storage:
    """SQLite needs nothing; PostgreSQL is the private stack's on-demand server, started here
    (embedded binaries from the stack's download cache when the machine has none), with a
    database of this run's own: a fresh instance per run, as with SQLite, and the server's
    other databases (change data capture's ``kbqe``) left alone."""
    if kind not in STORAGES:
        raise ValueError(f"soak: unknown storage {kind!r} (one of {', '.join(STORAGES)})")
    if kind == "sqlite":
        return Storage(kind, {}, {"kind": kind})
    import psycopg
    from psycopg import sql

    from kbqe_dagster.localstack import stack

    (server,) = stack.build(["postgres"], endpoints=endpoints, on_demand=True)
    if server.pid() is None and port_open(server.port):
        raise SystemExit(
            f"soak: postgres's port {server.port} is taken by a process that is not this soak's "
            "stack; choose another with KBQE_LOCAL_POSTGRES_PORT"
        )
    began = time.monotonic()
    stack.up_services([server])
    start_s = time.monotonic() - began
    conn = server.connection()
    database = f"dagster_soak_{run_id}"
    with psycopg.connect(
        host=str(conn["host"]),
        port=int(conn["port"]),
        user=str(conn["user"]),
        password=str(conn["password"]),
        dbname=str(conn["database"]),
        autocommit=True,
    ) as admin:
        admin.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(database)))
    env = postgres_environment(
        str(conn["host"]), int(conn["port"]), str(conn["user"]), str(conn["password"]), database
    )
    binaries = server.binaries
    log.info(
        "postgres storage: database %s on %s:%s (%s binaries, up in %.1fs)",
        database, conn["host"], conn["port"], binaries.source, start_s,
    )  # fmt: skip
    report = {
        "kind": kind,
        "server": f"{conn['host']}:{conn['port']}",
        "database": database,
        "binaries": binaries.source,
        "bin_dir": str(binaries.bin_dir),
        "start_seconds": round(start_s, 1),
    }
    return Storage(kind, env, report)


# --- reading the instance back -----------------------------------------------------------------
def instance(home: Path) -> Any:
    import dagster as dg

    os.environ["DAGSTER_HOME"] = str(home)
    return dg.DagsterInstance.get()


def run_outcomes(inst: Any, since: float = 0.0) -> dict[str, dict[str, int]]:
    """Runs per job and status."""
    out: dict[str, Counter[str]] = {}
    for record in inst.get_run_records():
        if record.create_timestamp.timestamp() < since:
            continue
        run = record.dagster_run
        out.setdefault(run.job_name, Counter())[run.status.value] += 1
    return {job: dict(c) for job, c in sorted(out.items())}


def runs_in_flight(inst: Any) -> list[dict[str, Any]]:
    import dagster as dg

    statuses = [dg.DagsterRunStatus(s) for s in IN_FLIGHT]
    return [
        {
            "run_id": r.dagster_run.run_id,
            "job": r.dagster_run.job_name,
            "status": r.dagster_run.status.value,
            "age_s": round(time.time() - r.create_timestamp.timestamp(), 1),
        }
        for r in inst.get_run_records(filters=dg.RunsFilter(statuses=statuses))
    ]


def pool_slots(inst: Any) -> dict[str, dict[str, int]]:
    """Per pool: slots, slots claimed, steps waiting for one."""
    out = {}
    storage = inst.event_log_storage
    for key in sorted(storage.get_concurrency_keys()):
        info = storage.get_concurrency_info(key)
        out[key] = {
            "slots": info.slot_count,
            "claimed": len(info.claimed_slots),
            "pending": len(info.pending_steps),
        }
    return out


def asset_checks(inst: Any) -> dict[str, Any]:
    """The latest evaluation of every asset check (per partition where partitioned)."""
    import dagster as dg
    from dagster._core.events import DagsterEventType

    records = inst.get_event_records(
        dg.EventRecordsFilter(event_type=DagsterEventType.ASSET_CHECK_EVALUATION),
        limit=20_000,
        ascending=True,
    )
    latest: dict[tuple[str, str, str | None], bool] = {}
    for record in records:
        evaluation = record.event_log_entry.dagster_event.event_specific_data
        key = (
            evaluation.asset_key.to_user_string(),
            evaluation.check_name,
            getattr(evaluation, "partition", None),
        )
        latest[key] = bool(evaluation.passed)
    failing = [f"{a}:{c}" + (f"[{p}]" if p else "") for (a, c, p), ok in latest.items() if not ok]
    return {"evaluated": len(latest), "failing": sorted(failing)}


def tick_failures(inst: Any, since: float) -> list[dict[str, Any]]:
    """Every failed sensor or schedule tick since ``since`` (epoch seconds)."""
    from dagster._core.scheduler.instigation import TickStatus

    out = []
    for state in inst.all_instigator_state():
        ticks = inst.get_ticks(
            state.instigator_origin_id,
            state.selector_id,
            after=since,
            statuses=[TickStatus.FAILURE],
        )
        for tick in ticks:
            error = tick.error.message.strip().splitlines()[0] if tick.error else ""
            out.append(
                {
                    "instigator": state.instigator_name,
                    "at": tick.timestamp,
                    "error": error[:300],
                }
            )
    return sorted(out, key=lambda t: t["at"])


def tick_counts(inst: Any, since: float) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for state in inst.all_instigator_state():
        ticks = inst.get_ticks(state.instigator_origin_id, state.selector_id, after=since)
        out[state.instigator_name] = dict(Counter(t.status.value for t in ticks))
    return out
