"""The soak: the product as it runs in production, under load and faults, for N minutes.

Nothing here calls the stage or load code: ``dagster-daemon`` evaluates the sensors and
schedules, the queued run coordinator launches the runs through the code server (one process per
run), the tag limits and the ``bigquery_load`` pool serialize them — the project's own
``dagster.yaml`` on a Dagster instance of the soak's own (reliability/soak_dagster.py). The soak
only produces, breaks things, watches and counts.

It runs on a local stack of its own (its own ``KBQE_LOCAL_HOME`` and ports, default
22092/22093/22081/22443/22050/22060, ``KBQE_LOCAL_<NAME>_PORT`` to change them), because its
faults stop and restart the services: never the stack other tests and developers share. Its
steps:

1. start the private stack, create the fleet's topics (reliability/soak_fleet.py), write its
   pipeline file, start the code server, the webserver and the daemon on an instance of the
   soak's own: SQLite by default, or with ``--storage postgres`` the instance file production
   uses, on a database of the run's own in the private stack's PostgreSQL (port 22432; what the
   CI soak, kbqe_dagster_tests/reliability/test_soak.py, runs);
2. for ``--minutes``: produce to the fleet at a steady rate with seeded bursts (a topic found by
   ``topic_patterns`` appears at 30 % of the run, schemas evolve at 40 %), sample memory and
   produce → visible latency, and inject the faults of reliability/soak_faults.py at seeded
   times (``--no-faults``: none);
3. stop producing and wait (bounded by ``--settle-minutes``) until every produced message is in
   BigQuery and the keyed tables equal their oracle;
4. stop the daemon, let the runs in flight end, and check: every message exactly once (a row on
   its event date, or a dead letter with its reason; reliability/verify.py), nothing left in
   staging, the keyed tables equal to their oracle, no run stuck in flight, no pool slot held,
   every asset check's latest evaluation passing, and no failed sensor or schedule tick but
   during an injected outage;
5. write the report (``--json``, default bench/results/soak.json) and print it.

    .venv/bin/python reliability/soak.py --minutes 10 --seed 7 [--storage postgres]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import random
import sys
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kbqe_dagster.cli.logs import setup_logging  # noqa: E402
from kbqe_dagster.localstack.endpoints import (  # noqa: E402
    LOCAL_BUCKET,
    LOCAL_PROJECT,
    LocalEndpoints,
    local_endpoints,
)
from kbqe_dagster.resources.staging_store import StagingLocation, StagingStore  # noqa: E402
from reliability.messages import Ledger  # noqa: E402
from reliability.soak_dagster import DagsterProcesses, prepare_storage  # noqa: E402
from reliability.soak_fleet import Fleet, FleetProducer  # noqa: E402

log = logging.getLogger("reliability.soak")

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_HOME = ROOT / ".soak-local"
DEFAULT_JSON = ROOT / "bench" / "results" / "soak.json"
# Below Linux's ephemeral range (32768-60999 by default), where any process's outgoing
# connection may take a port first: the code server once failed to bind its 34100 so.
PORTS = {
    "KAFKA": 22092,
    "KAFKA_CONTROLLER": 22093,
    "REGISTRY": 22081,
    "GCS": 22443,
    "BIGQUERY": 22050,
    "BIGQUERY_GRPC": 22060,
    "POSTGRES": 22432,  # on demand: the Dagster instance's server with --storage postgres
}
GRPC_PORT = 22100
WEB_PORT = 22101
TICK_S = 2.0
CDC_EVERY_S = 20.0
PATTERN_AT = 0.3
EVOLVE_AT = 0.4
HOUSEKEEPING_S = 6 * 60.0
"""Bound on the wait for retention (every 2 minutes in the fleet) and completeness (every
minute) to catch up with the last loads."""


@dataclass
class SoakWorld:
    """What reliability/verify.py accounts for: the fleet's ledgers, tables and staging area."""

    fleet: Fleet
    endpoints: LocalEndpoints
    ledgers: dict[str, Ledger] = field(default_factory=dict)

    @property
    def tables(self) -> tuple[tuple[str, str], ...]:
        return self.fleet.tables

    @property
    def storage_write_tables(self) -> tuple[tuple[str, str], ...]:
        return ()

    @property
    def dead_letter_table(self) -> tuple[str, str]:
        return self.fleet.dead_letter_table

    def store(self) -> StagingStore:
        return StagingLocation(self.fleet.staging_url, self.endpoints.gcs_url, LOCAL_PROJECT).open()


# --- the private stack -------------------------------------------------------------------------
def private_stack_env(home: Path, cache_from: Path | None) -> dict[str, str]:
    """Point this process (and every child) at the soak's own stack home and ports; the
    download cache is shared with ``cache_from`` when given (Kafka and Apicurio are large)."""
    home.mkdir(parents=True, exist_ok=True)
    cache = home / "cache"
    if cache_from is not None and cache_from.is_dir() and not cache.exists():
        cache.symlink_to(cache_from.resolve())
    env = {"KBQE_LOCAL_HOME": str(home.resolve())}
    for name, default in PORTS.items():
        env[f"KBQE_LOCAL_{name}_PORT"] = os.environ.get(f"KBQE_LOCAL_{name}_PORT", str(default))
    os.environ.update(env)
    return env


def start_private_stack() -> LocalEndpoints:
    from kbqe_dagster.localstack import stack
    from kbqe_dagster.localstack.base import port_open

    services = stack.build()
    for service in services:
        # A port answering without a pid file of ours is someone else's: refuse to use it.
        if service.pid() is None and any(port_open(p) for p in service.ports):
            raise SystemExit(
                f"soak: {service.name}'s port(s) {service.ports} are taken by a process that is "
                "not this soak's stack; choose others with KBQE_LOCAL_<NAME>_PORT"
            )
    stack.up_services(services)
    return local_endpoints()


# --- the run -----------------------------------------------------------------------------------
@dataclass
class Soak:
    minutes: float
    seed: int
    home: Path
    faults: bool = True
    settle_minutes: float = 15.0
    keep_stack: bool = False
    storage: str = "sqlite"
    """The Dagster instance's storage: ``sqlite`` or ``postgres`` (reliability/soak_dagster.py)."""
    report: dict[str, Any] = field(default_factory=dict)

    def run(self) -> dict[str, Any]:
        from kbqe_dagster.localstack import stack

        run_id = uuid.uuid4().hex[:6]
        endpoints = start_private_stack()
        storage = prepare_storage(self.storage, endpoints, run_id)
        # this process reads the instance back at the end, so it needs the variables too
        os.environ.update(storage.env)
        started_at = time.time()
        fleet = Fleet(run_id, f"gs://{LOCAL_BUCKET}/soak-{run_id}")
        workdir = self.home / f"soak-{run_id}"
        workdir.mkdir(parents=True)
        pipeline = fleet.write_pipeline(workdir / "pipeline.yaml")
        producer = FleetProducer(endpoints, fleet, self.seed)
        producer.create_topics()
        env = {
            **os.environ,
            "KBQE_ENV": "local",
            "KBQE_PIPELINE_CONFIG": str(pipeline),
            "KBQE_STAGING_URL": fleet.staging_url,
            "PYTHONPATH": os.pathsep.join(
                [str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
            "SPARK_LOCAL_IP": "127.0.0.1",
        }
        env.pop("KBQE_CRASH_AT", None)
        _check_definitions(pipeline, fleet.staging_url)
        dagster = DagsterProcesses.create(workdir, env, GRPC_PORT, WEB_PORT, storage.kind)
        self.report = {
            "run_id": run_id,
            "seed": self.seed,
            "minutes": self.minutes,
            "faults_enabled": self.faults,
            "storage": storage.report,
            "workdir": str(workdir),
            "ports": {
                k: int(v)
                for k, v in os.environ.items()
                if k.startswith("KBQE_LOCAL_") and k.endswith("_PORT")
            },
        }
        try:
            dagster.start_all()
            self._soak(fleet, producer, endpoints, dagster, started_at)
        finally:
            dagster.stop_all()
            if not self.keep_stack:
                stack.down()
        return self.report

    def _soak(
        self,
        fleet: Fleet,
        producer: FleetProducer,
        endpoints: LocalEndpoints,
        dagster: DagsterProcesses,
        started_at: float,
    ) -> None:
        from kbqe_dagster.localstack.clients import local_bigquery_client
        from reliability import soak_dagster as sd
        from reliability.soak_faults import FaultInjector
        from reliability.soak_watch import FreshnessPoller, MemorySampler

        memory = MemorySampler(dagster.pids).start()
        names = {".".join(t): t for t in (*fleet.tables, fleet.dead_letter_table)}
        freshness = FreshnessPoller(
            local_bigquery_client(endpoints),
            producer.out,
            producer.lock,
            names,
            ".".join(fleet.dead_letter_table),
        ).start()
        rnd = random.Random(self.seed + 1)
        duration = self.minutes * 60
        injector = (
            FaultInjector(dagster, endpoints, fleet, memory, rnd, duration) if self.faults else None
        )
        begin = time.monotonic()
        next_cdc = begin
        next_burst = begin + rnd.uniform(30, 90)
        bursts = 0
        if injector is not None:
            injector.start()
        try:
            while (elapsed := time.monotonic() - begin) < duration:
                if not producer.pattern_created and elapsed >= PATTERN_AT * duration:
                    producer.create_pattern_topic()
                if not producer.evolved and elapsed >= EVOLVE_AT * duration:
                    producer.evolve()
                scale = 1
                if time.monotonic() >= next_burst:
                    scale, bursts = rnd.choice((10, 25, 50)), bursts + 1
                    next_burst = time.monotonic() + rnd.uniform(45, 120)
                if injector is not None:
                    injector.raise_if_broken()
                producer.tick(scale)
                if time.monotonic() >= next_cdc:
                    producer.cdc_round()
                    next_cdc = time.monotonic() + CDC_EVERY_S
                time.sleep(max(0.0, TICK_S - (time.monotonic() - begin - elapsed)))
        finally:
            if injector is not None:
                injector.stop()
        if injector is not None:
            injector.raise_if_broken()
        producer.flush()
        produced_s = time.monotonic() - begin
        log.info("producing stopped after %.0fs: %s", produced_s, dict(producer.out.per_kind))

        world = SoakWorld(fleet, endpoints, producer.out.ledgers)
        keyed = self._keyed_rig(fleet, producer)
        settle_s, accounting, differences = self._settle(world, keyed)
        settled_at = datetime.now(UTC)
        # With the sensors and schedules still on: retention's and completeness's next ticks
        # must tidy the staging area and declare the days the loads completed.
        housekeeping = self._housekeeping(world, settled_at)
        freshness.stop()

        # No new runs from now on (sensors and schedules off, the daemon still dequeuing);
        # the runs in flight and queued get a bounded time to end.
        inst = sd.instance(dagster.home)
        stopped = dagster.stop_instigators(inst)
        drained = _wait(lambda: not sd.runs_in_flight(inst), 300)
        memory.stop()
        from kbqe_dagster.demo.debezium import wrong

        ticks_failed = sd.tick_failures(inst, started_at)
        outages = injector.outage_windows() if injector is not None else []
        unexplained = [t for t in ticks_failed if not _during(t["at"], outages)]
        checks = sd.asset_checks(inst)
        stuck = sd.runs_in_flight(inst)
        pools = sd.pool_slots(inst)
        held = {k: v for k, v in pools.items() if v["claimed"] or v["pending"]}
        a = accounting
        self.report.update(
            {
                "produced_seconds": round(produced_s, 1),
                "bursts": bursts,
                "messages_produced": a.produced,
                "messages_by_kind": dict(sorted(producer.out.per_kind.items())),
                "produce_failures": producer.out.failed[:10],
                "settle_seconds": settle_s,
                "exactly_once": {
                    "good": a.good,
                    "bad": a.bad,
                    "rows_loaded": a.rows_loaded,
                    "dead_letters_loaded": a.dead_letters_loaded,
                    "duplicates": a.duplicates,
                    "losses": a.losses,
                    "misplaced": a.misplaced,
                    "unexpected": a.unexpected,
                    "avro_left_in_staging": a.avro_left_in_staging,
                    "bad_by_reason": a.bad_by_reason,
                    "samples": a.samples,
                },
                "keyed": {
                    "changes_produced": producer.out.per_kind.get("debezium", 0),
                    "differences": differences,
                    "wrong": wrong(differences),
                },
                "staging_at_end": housekeeping["staging"],
                "completeness_at_end": housekeeping["completeness"],
                "housekeeping_seconds": housekeeping["seconds"],
                "runs": sd.run_outcomes(inst),
                "runs_drained": drained,
                "instigators_stopped": stopped,
                "runs_stuck": stuck,
                "pools": pools,
                "asset_checks": checks,
                "ticks": sd.tick_counts(inst, started_at),
                "tick_failures": ticks_failed[:50],
                "tick_failures_unexplained": unexplained[:20],
                "memory": memory.report(),
                "freshness": freshness.report(),
                "faults": injector.report() if injector is not None else {},
                "restarts": {n: p.starts - 1 for n, p in dagster.procs.items()},
            }
        )
        failures = []
        if not a.exactly_once:
            failures.append("exactly once")
        if wrong(differences):
            failures.append("keyed tables differ from their oracle")
        failures += housekeeping["failures"]
        if stuck:
            failures.append(f"{len(stuck)} run(s) stuck in flight")
        if held:
            failures.append(f"pool slots held: {held}")
        if checks["failing"]:
            failures.append(f"{len(checks['failing'])} asset check(s) failing")
        if unexplained:
            failures.append(f"{len(unexplained)} failed tick(s) outside injected outages")
        if self.report["memory"]["leaks"]:
            failures.append(f"memory growth: {self.report['memory']['leaks']}")
        if producer.out.failed:
            failures.append("messages not delivered to Kafka")
        if injector is not None:
            failures += injector.failures()
        self.report["failures"] = failures
        self.report["passed"] = not failures

    def _housekeeping(self, world: SoakWorld, settled_at: datetime) -> dict[str, Any]:
        """Wait (bounded: two retention cadences and two completeness ticks, plus a margin)
        until the staging area holds only what retention keeps and every table's newest
        complete day (hour) is the one the finished loads support, then say what is left."""
        start = time.monotonic()
        deadline = start + HOUSEKEEPING_S
        while True:
            staging, completeness = _staging_left(world), _completeness(world, settled_at)
            problems = staging["problems"] + completeness["problems"]
            if not problems or time.monotonic() > deadline:
                return {
                    "staging": staging,
                    "completeness": completeness,
                    "seconds": round(time.monotonic() - start, 1),
                    "failures": problems,
                }
            time.sleep(15)

    def _keyed_rig(self, fleet: Fleet, producer: FleetProducer) -> Any:
        from kbqe_dagster.demo.debezium import KeyedRig
        from kbqe_dagster.localstack.clients import local_bigquery_client

        assert producer.cdc is not None
        return KeyedRig(
            fleet.run_id,
            producer.cdc,
            fleet.cdc,
            fleet.keyed_dataset,
            {},
            local_bigquery_client(),
            "",
        )

    def _settle(self, world: SoakWorld, keyed: Any) -> tuple[float, Any, dict]:
        """Wait until the accounting and the keyed tables come out right, or the bound."""
        from kbqe_dagster.demo.debezium import wrong
        from reliability.verify import account

        start = time.monotonic()
        deadline = start + self.settle_minutes * 60
        while True:
            accounting, differences = None, {}
            try:
                accounting = account(world)
                differences = keyed.differences()
            except Exception as error:  # noqa: BLE001 - a table not created yet, an outage
                log.info("settle: not readable yet (%s)", str(error).splitlines()[0][:200])
            if accounting is not None:
                log.info(
                    "settle: %d produced, %d losses, %d duplicates, %d avro waiting, keyed wrong %s",
                    accounting.produced,
                    accounting.losses,
                    accounting.duplicates,
                    accounting.avro_left_in_staging,
                    wrong(differences) if differences else "?",
                )
                done = accounting.exactly_once and differences and not wrong(differences)
                if done or time.monotonic() > deadline:
                    return round(time.monotonic() - start, 1), accounting, differences
            elif time.monotonic() > deadline:
                raise RuntimeError("the soak's tables never became readable")
            time.sleep(20)


def _staging_left(world: SoakWorld) -> dict[str, Any]:
    """What is left in the staging area against what retention keeps: nothing to delete, no
    avro file, every kept done file the newest of its partition (the resume point), and no file
    the protocol does not name (a killed writer's leftover) outside ``_kbqe/``."""
    from kbqe_dagster.core.protocol.retention_plan import KeepReason
    from kbqe_dagster.operations.retention_plan import retention_plan

    report = retention_plan(world.store())
    kept_by = Counter(k.reason.name.lower() for k in report.keep)
    strays = [n for n in report.unrecognized if not n.startswith("_kbqe/")]
    wrongly_kept = [k.name for k in report.keep if k.reason is not KeepReason.NEWEST]
    problems = []
    if report.delete:
        problems.append(f"staging: {len(report.delete)} done file(s) retention should have deleted")
    if wrongly_kept:
        problems.append(f"staging: {len(wrongly_kept)} done file(s) kept but not as resume points")
    if strays:
        problems.append(f"staging: {len(strays)} file(s) the protocol does not name")
    return {
        "deletable": len(report.delete),
        "kept": dict(sorted(kept_by.items())),
        "wrongly_kept": wrongly_kept[:10],
        "strays": strays[:10],
        "problems": problems,
    }


def _completeness(world: SoakWorld, settled_at: datetime) -> dict[str, Any]:
    """Every table of the fleet declared complete up to the newest day (hour) that ended a
    lateness before the loads caught up: all partitions loaded to their high watermark then,
    so the idle rule (core/completeness/decision.py) makes it complete."""
    from kbqe_dagster.core.completeness.decision import Unit
    from kbqe_dagster.core.record.partitioning import Partitioning
    from kbqe_dagster.operations.completeness import read_state

    state = read_state(world.store())
    lateness = timedelta(minutes=1)  # the fleet's completeness.lateness
    out: dict[str, Any] = {"tables": {}, "problems": []}
    for dataset, table in world.tables:
        name = f"{dataset}.{table}"
        hourly = (dataset, table) == world.fleet.hourly_table
        unit = Unit(Partitioning.HOUR if hourly else Partitioning.DAY)
        expected = unit.newest_ending_by(settled_at - lateness)
        mark = state.tables.get(name)
        newest = mark.newest_complete if mark is not None else None
        out["tables"][name] = {
            "newest_complete": unit.key(newest) if newest is not None else None,
            "expected_at_least": unit.key(expected),
        }
        if newest is None or newest < expected:
            out["problems"].append(
                f"completeness: {name} declared up to {out['tables'][name]['newest_complete']}, "
                f"expected {unit.key(expected)}"
            )
    return out


def _check_definitions(pipeline: Path, staging_url: str) -> None:
    """Build the definitions here first: a pipeline the code server cannot load fails the soak
    at once, with the config error, instead of as a code location that never runs anything."""
    from kbqe_dagster.definitions import build_definitions

    os.environ.update({"KBQE_ENV": "local", "KBQE_STAGING_URL": staging_url})
    build_definitions(str(pipeline), "local")


def _wait(condition: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(5)
    return False


def _during(at: float, windows: list[tuple[float, float]]) -> bool:
    return any(start <= at <= end for start, end in windows)


def render(report: dict[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=False, default=str)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--minutes", type=float, default=60.0, help="how long to produce (default 60)"
    )
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument(
        "--no-faults", dest="faults", action="store_false", help="load only, no faults"
    )
    parser.add_argument(
        "--settle-minutes",
        type=float,
        default=15.0,
        help="bound on the wait for everything to load",
    )
    parser.add_argument(
        "--home", type=Path, default=DEFAULT_HOME, help="the private stack's KBQE_LOCAL_HOME"
    )
    parser.add_argument(
        "--cache-from",
        type=Path,
        default=None,
        help="an existing stack home's download cache to reuse",
    )
    parser.add_argument(
        "--keep-stack", action="store_true", help="leave the private stack running afterwards"
    )
    parser.add_argument(
        "--storage",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="the Dagster instance's storage: SQLite under its DAGSTER_HOME (default), or "
        "PostgreSQL as production keeps it, a database of the run's own on the private "
        "stack's PostgreSQL (port KBQE_LOCAL_POSTGRES_PORT, default 22432)",
    )
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    setup_logging(args.verbose)
    private_stack_env(args.home, args.cache_from)
    soak = Soak(
        args.minutes,
        args.seed,
        args.home,
        args.faults,
        args.settle_minutes,
        args.keep_stack,
        args.storage,
    )
    report = soak.run()
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(render(report) + "\n")
    print(render(report))
    return 0 if report.get("passed") else 1


if __name__ == "__main__":
    sys.exit(main())
