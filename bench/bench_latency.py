"""Latency benchmark on the running local stack: per message, produce -> visible in BigQuery,
for the two delivery paths (issue 25).

For each rate (``--rates 1000:1,20000:4``: messages a second and partitions) and each path
(``--paths storage_write,load``), on a fresh topic and table of its own:

1. a producer in a child process sends Confluent-framed Avro messages of a flat schema (the
   emulator's Storage Write API loses the rows of RECORD columns) at a steady rate for
   ``--seconds``, round-robin over the partitions; each message's produce time is its Kafka
   timestamp (CreateTime, set when ``produce`` is called; the table's ``_kafka_timestamp``),
   collected from the delivery reports;
2. a poller asks the table every ``--poll-interval`` s, per Kafka partition, for the row count
   and the lowest and highest offset: each message's visible time is the arrival of the first
   answer that shows it (bench/_latency.py), latency = visible time - produce time;
3. the path under test moves the messages:

   * ``storage_write``: the stage loop (``staging/stage_loop.py::run_stage_loop``) on one Spark
     context, the stage context built as ``defs/staging/assets.py`` builds it (the
     ``stage_context`` of ``stager_registry.py`` and the Storage Write delivery sink), until the
     producer is done and every message is visible;
   * ``load``: the batch path as it runs today: stage runs and load cycles executed in this
     process by the functions ``kbqe run --until-idle`` uses (``runner/in_process.py``:
     Dagster's ``stage_job``, ``load_job``, ``poll_load_jobs_job``), at the daemon's pace with
     the shortest settings the config allows: a stage run at every backlog-sensor tick (30 s;
     ``staging.allowed_latency: 1s``, the minimum, has always passed by then), a load cycle
     at every ``load.cadence`` on the clock as its cron schedule fires (``2m``; see
     ``--load-cadence``), the pending jobs polled every second (``load.poll_interval: 1s``).
     Its latency is dominated by those waits, not by staging or loading.

Reported per (path, rate): p50/p90/p99/max latency (and p50/p99 past a ``--warmup``, when a
new table's creation and first stream are behind), the produce rate achieved, the messages
delivered per second (from the first produce to the last message visible) and staged per
second of staging work, and whether the path kept up (the backlog of produced-not-visible
messages must not grow over the second half of the produce window; a path or producer that
cannot sustain the rate says so, with the backlog growth). Latencies include the poll's
resolution (its mean period is reported) and are measured on the shared local stack.

Everything it creates (topics, the dataset, the staging prefix, its Dagster home) is deleted
at the end (``--keep`` keeps them).

    .venv/bin/python bench/bench_latency.py                      # 1,000/s on 1, 20,000/s on 4
    .venv/bin/python bench/bench_latency.py --rates 1000:1 --seconds 20 --paths storage_write

Prints a table and writes ``bench/results/latency.json``. Targets (issue 25), storage_write:
p50 <= 2 s and p99 <= 5 s at 1,000 msg/s; p99 <= 10 s at 20,000 msg/s on 4 partitions.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import logging
import math
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT)]
os.environ.setdefault("KBQE_LOCAL_HOME", str(ROOT / ".kbqe-local"))

import _kafka_bench as kb  # noqa: E402
from _latency import (  # noqa: E402
    backlog_series,
    by_window,
    disruption_figures,
    keeping_up,
    latency_summary,
    match,
    produced_after,
)
from _latency_poller import TablePoller  # noqa: E402
from _latency_producer import SCHEMA, SteadyProducer, encode_body  # noqa: E402
from _stage_support import machine_facts  # noqa: E402

from kbqe_dagster.cli.logs import setup_logging  # noqa: E402
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT, local_endpoints  # noqa: E402

PATHS = ("storage_write", "load")
TARGETS = {"storage_write": {1000: {"p50": 2.0, "p99": 5.0}, 20000: {"p99": 10.0}}}
BACKLOG_SENSOR_INTERVAL_S = 30  # defs/staging/sensors.py kafka_backlog_sensor (read at run time)


def parse_rates(text: str, partitions: int) -> list[tuple[int, int]]:
    """``1000:1,20000:4`` -> [(1000, 1), (20000, 4)]; a rate without ``:P`` gets ``partitions``."""
    out = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        rate, _, parts = item.partition(":")
        out.append((int(rate), int(parts) if parts else partitions))
    if not out or any(r <= 0 or p <= 0 for r, p in out):
        raise argparse.ArgumentTypeError(f"--rates {text!r}: want RATE[:PARTITIONS],... all > 0")
    return out


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--rates",
        default="1000:1,20000:4",
        help="RATE[:PARTITIONS],... messages a second (default 1000:1,20000:4)",
    )
    parser.add_argument(
        "--partitions",
        type=int,
        default=4,
        help="partitions of a rate given without :P (default 4)",
    )
    parser.add_argument(
        "--seconds", type=float, default=60.0, help="how long each rate is produced (default 60)"
    )
    parser.add_argument(
        "--paths",
        default=",".join(PATHS),
        help=f"which delivery paths, comma-separated (default {','.join(PATHS)})",
    )
    parser.add_argument(
        "--poll-interval",
        type=float,
        default=0.2,
        help="seconds between two polls of the table (default 0.2)",
    )
    parser.add_argument(
        "--loop-interval",
        type=float,
        default=1.0,
        help="storage_write: staging.loop_interval in seconds, the stage "
        "loop's interval_s (default 1.0, the config's default)",
    )
    parser.add_argument(
        "--load-cadence",
        type=float,
        default=120.0,
        help="load: seconds between load cycles, on the clock (default 120: "
        "load.cadence 2m, the shortest whole-minute cadence the config accepts)",
    )
    parser.add_argument(
        "--stage-every",
        type=float,
        default=None,
        help="load: seconds between stage runs (default: the backlog sensor's interval, 30)",
    )
    parser.add_argument(
        "--drain-timeout",
        type=float,
        default=None,
        help="seconds to wait after the last produce for every message to be "
        "visible (default: 120 for storage_write; two load cadences + a stage "
        "interval + 120 for load)",
    )
    parser.add_argument(
        "--warmup",
        type=float,
        default=10.0,
        help="latencies are also reported for the messages produced after the "
        "first WARMUP seconds (default 10): a new table's first rows wait for "
        "its creation and its first stream",
    )
    parser.add_argument(
        "--paused-polls",
        action="store_true",
        help="pause the poller during stage-loop rounds and load cycles (for a "
        "bqemulator started without localstack/bqemulator_threads.py, which "
        "deadlocks on a query during an append); default: poll throughout",
    )
    parser.add_argument(
        "--breakdown-messages",
        type=int,
        default=20_000,
        help="messages of the storage_write breakdown run first (bench/_sw_breakdown.py: µs "
        "per row of our path with a null writer, and of the emulator); 0 skips it "
        "(default 20000)",
    )
    parser.add_argument(
        "--daemon",
        action="store_true",
        help="storage_write: the stage loop launched by stage_loop_sensor under a code server "
        "and a daemon of the bench's own (bench/_latency_daemon.py), as under kbqe dev, "
        "instead of in this process; implied by --kill-at and --reload-at",
    )
    parser.add_argument(
        "--daemon-up",
        default="15",
        help="--daemon: seconds the daemon is up before the first message (default 15); "
        "'ready': until a loop run loops and, with --standby, another stands by warm (the "
        "recovery alone, on a machine where a cold start takes minutes)",
    )
    parser.add_argument(
        "--standby",
        action="store_true",
        help="--daemon-up ready: also wait for a warm standby",
    )
    parser.add_argument(
        "--kill-at",
        default="",
        help="SECONDS[,SECONDS...] after the producer started: SIGKILL the run worker of "
        "every loop run in flight (implies --daemon)",
    )
    parser.add_argument(
        "--reload-at",
        default="",
        help="SECONDS[,SECONDS...] after the producer started: deploy a changed pipeline "
        "file and reload the code location (implies --daemon)",
    )
    parser.add_argument(
        "--recovery",
        type=float,
        default=20.0,
        help="seconds after a kill or reload reported as its recovery, apart from the steady "
        "state (default 20)",
    )
    parser.add_argument("--json", type=Path, default=BENCH / "results" / "latency.json")
    parser.add_argument(
        "--keep", action="store_true", help="keep the topics, dataset and staging files"
    )
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="every library's log lines (Dagster, Spark, librdkafka, ...)",
    )
    args = parser.parse_args(argv)
    try:
        args.rates = parse_rates(args.rates, args.partitions)
    except (ValueError, argparse.ArgumentTypeError) as e:
        parser.error(str(e))
    args.paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    try:
        args.kill_at = [float(x) for x in args.kill_at.split(",") if x.strip()]
        args.reload_at = [float(x) for x in args.reload_at.split(",") if x.strip()]
    except ValueError as e:
        parser.error(f"--kill-at/--reload-at: {e}")
    args.daemon = args.daemon or bool(args.kill_at or args.reload_at)
    unknown = [p for p in args.paths if p not in PATHS]
    if unknown or not args.paths:
        parser.error(f"--paths: unknown {unknown}; choose from {', '.join(PATHS)}")
    return args


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.2f}] {text}", flush=True)


# --- one measurement -------------------------------------------------------------------------
@dataclass
class Case:
    path: str
    rate: int
    partitions: int
    topic: str
    table: str


@dataclass
class Work:
    """What the path did: its staging rounds or runs (start, seconds, messages) and notes."""

    rounds: list[tuple[float, float, int]] = field(default_factory=list)
    loads: list[tuple[float, float, int]] = field(default_factory=list)
    stopped_because: str | None = None
    notes: dict = field(default_factory=dict)
    disruptions: list[tuple[str, float]] = field(default_factory=list)
    """What was done to the path (``kill``, ``reload``) and when (``time.time()``)."""
    daemon: dict = field(default_factory=dict)
    """--daemon: the loop runs' phases, the loop sensor's ticks, orphaned step processes."""


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        from kbqe_dagster.localstack.clients import local_bigquery_client

        self.args = args
        self.endpoints = local_endpoints()
        self.run_id = uuid.uuid4().hex[:8]
        self.dataset = f"bench_latency_{self.run_id}"
        self.prefix = f"bench-latency-{self.run_id}"
        self.staging_url = f"gs://{LOCAL_BUCKET}/{self.prefix}"
        self.home = Path(tempfile.mkdtemp(prefix="kbqe-bench-latency-"))
        self.client = local_bigquery_client()
        self.cases = [
            Case(
                path,
                rate,
                parts,
                f"bench_latency.{self.run_id}.{path}.r{rate}p{parts}",
                f"{path}_r{rate}_p{parts}",
            )
            for rate, parts in args.rates
            for path in args.paths
        ]
        self.topics: list[str] = []
        self.spark = None
        self.schema_ids: dict[str, int] = {}

    # --- the pipeline ---------------------------------------------------------------------
    def pipeline_dict(self) -> dict:
        return {
            "version": 1,
            "topics": [{"name": c.topic, "event_time": {"fields": ["eventTime"]},
                        "routing": {"mode": "static", "dataset": self.dataset, "table": c.table}}
                       for c in self.cases],
            "tables": {f"{self.dataset}.{c.table}": {"delivery": c.path} for c in self.cases},
            "dead_letter": {"dataset": self.dataset, "table": "dead_letters"},
            "staging": {"allowed_latency": "1s",
                        "loop_interval": f"{round(self.args.loop_interval * 1000)}ms"},
            "load": {"cadence": _duration(self.args.load_cadence), "poll_interval": "1s"},
        }  # fmt: skip

    def setup(self) -> None:
        import yaml

        from kbqe_dagster.core.config.pipeline import parse_pipeline_config

        path = self.home / "pipeline.yaml"
        path.write_text(yaml.safe_dump(self.pipeline_dict()))
        self.config = parse_pipeline_config(self.pipeline_dict(), source=str(path))
        dagster_home = self.home / "dagster_home"
        dagster_home.mkdir()
        shutil.copyfile(ROOT / "dagster.yaml", dagster_home / "dagster.yaml")
        # What the batch path's definitions read (as for `kbqe run`: kbqe_dagster_tests/kbqe_run.py).
        os.environ.update(
            {
                "KBQE_ENV": "local",
                "KBQE_PIPELINE_CONFIG": str(path),
                "KBQE_STAGING_URL": self.staging_url,
                "DAGSTER_HOME": str(dagster_home),
            }
        )
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        for case in self.cases:
            kb.create_topic(self.endpoints.kafka_bootstrap, case.topic, case.partitions)
            self.topics.append(case.topic)
            self.schema_ids[case.topic] = kb.register_schema(
                self.endpoints.registry_url, f"{case.topic}-value", SCHEMA
            )

    def spark_context(self):
        if self.spark is None:
            from kbqe_dagster.resources.spark import local_spark_config, spark_resource

            self.spark = spark_resource(local_spark_config("local[2]")).spark_context
            self.spark.setLogLevel("ERROR")
            # Both Python workers started and the stage code imported before the clock runs.
            self.spark.parallelize([0, 1], 2).map(
                lambda _: __import__("kbqe_dagster.staging.task") and 0
            ).collect()
        return self.spark

    # --- a case -----------------------------------------------------------------------------
    def measure(self, case: Case) -> dict:
        say(
            f"{case.path}: {case.rate:,} msg/s on {case.partitions} partition(s) for "
            f"{self.args.seconds:g} s into {case.topic}"
        )
        poller = TablePoller(
            self.client,
            self.dataset,
            case.table,
            case.partitions,
            self.args.poll_interval,
            pausing=self.args.paused_polls,
        )
        producer = SteadyProducer(
            self.endpoints.kafka_bootstrap,
            case.topic,
            case.rate,
            self.args.seconds,
            case.partitions,
            self.schema_ids[case.topic],
        )
        total = int(case.rate * self.args.seconds)
        drain = self.args.drain_timeout
        if drain is None:
            drain = (
                120.0
                if case.path == "storage_write"
                else (2 * self.args.load_cadence + self.stage_every() + 120.0)
            )
        deadline: list[float] = []

        def should_stop() -> str | None:
            if producer.process.pid is None:
                return None  # not begun
            if producer.failed:
                return f"producer failed: {producer.failed}"
            if not producer.done.is_set():
                return None
            if not deadline:
                deadline.append(time.time() + drain)
            if poller.visible() >= total:
                return "all visible"
            if time.time() > deadline[0]:
                return f"drain timeout ({drain:g} s after the last produce)"
            return None

        def begin() -> None:
            """The path is running (the loop's first round is done, the batch path's
            definitions are built, Spark is up): produce from now on, as onto a pipeline that
            has been running all along."""
            if producer.process.pid is None:
                say(f"  {case.path} running: producing")
                producer.start()

        work = Work()
        poller.start()
        try:
            if case.path == "storage_write" and self.args.daemon:
                self.run_daemon(case, begin, should_stop, work)
            elif case.path == "storage_write":
                self.run_storage_write(case, begin, should_stop, poller, work)
            else:
                self.run_load(case, begin, should_stop, poller, work)
        finally:
            producer.stop()
            if producer.process.pid is not None:
                producer.done.wait(30)
            time.sleep(self.args.poll_interval * 2)  # one more answer after the last delivery
            poller.stop()
        if producer.result is None:
            raise RuntimeError(f"{case.topic}: {producer.failed or 'the producer gave no result'}")
        return self.report(case, producer, poller, work)

    def stage_every(self) -> float:
        if self.args.stage_every is not None:
            return self.args.stage_every
        from kbqe_dagster.defs.staging.sensors import kafka_backlog_sensor

        return float(kafka_backlog_sensor.minimum_interval_seconds or BACKLOG_SENSOR_INTERVAL_S)

    def run_storage_write(
        self, case: Case, begin, should_stop, poller: TablePoller, work: Work
    ) -> None:
        """The stage loop in this thread until ``should_stop`` says why; ``begin`` after its
        first round. The poller is paused during each round (``should_stop`` is asked right
        before a round, ``on_round`` right after it)."""
        from kbqe_dagster.delivery.sink import stage_run_sink
        from kbqe_dagster.resources.environment import local_resources
        from kbqe_dagster.resources.kafka.clients import KafkaSettings
        from kbqe_dagster.resources.schema_registry import RegistrySettings
        from kbqe_dagster.resources.staging_store import StagingLocation
        from kbqe_dagster.stager_registry import stage_context
        from kbqe_dagster.staging.stage_loop import LoopSettings, run_stage_loop

        spark = self.spark_context()
        ctx = stage_context(
            KafkaSettings(self.endpoints.kafka_bootstrap),
            RegistrySettings(self.endpoints.registry_url),
            StagingLocation(self.staging_url, self.endpoints.gcs_url, LOCAL_PROJECT),
            self.config,
            case.topic,
            sink=stage_run_sink(self.config, local_resources()["bigquery"]),
        )
        # As the Dagster wiring paces it: the topic's staging.loop_interval.
        settings = LoopSettings(
            interval_s=self.config.topic(case.topic).staging.loop_interval.total_seconds()
        )
        work.notes = {
            "driver": "staging/stage_loop.py run_stage_loop",
            "loop_interval_s": settings.interval_s,
        }

        def before_round() -> str | None:
            why = should_stop()
            if why is None:
                poller.pause()
            return why

        def on_round(r) -> None:
            poller.resume(poll_now=True)
            begin()
            messages = sum(s.messages for s in r.summaries)
            if messages:
                work.rounds.append((r.started_at, r.seconds, messages))

        try:
            outcome = run_stage_loop(
                spark, ctx, [case.topic], settings, should_stop=before_round, on_round=on_round
            )
        finally:
            poller.resume()
        work.stopped_because = outcome.stopped_because
        work.notes.update(
            rounds=outcome.rounds,
            idle_rounds=outcome.idle_rounds,
            idle_seconds=round(outcome.idle_seconds, 2),
            busy_seconds=round(outcome.busy_seconds, 2),
        )

    def run_daemon(self, case: Case, begin, should_stop, work: Work) -> None:
        """The stage loop as stage_loop_sensor runs it under a daemon of the bench's own:
        ``begin`` once the daemon has been up ``--daemon-up`` seconds; the kills and reloads
        at their seconds after that; then until ``should_stop`` says why."""
        from _latency_daemon import Daemon, loop_run_phases, sensor_ticks

        daemon = Daemon(self.home / f"daemon-{case.table}", self.home / "pipeline.yaml")
        work.notes = {
            "driver": "stage_loop_sensor under dagster-daemon + dagster code-server "
            "(bench/_latency_daemon.py)",
            "loop_interval_s": self.args.loop_interval,
            "daemon_up_s": self.args.daemon_up,
        }
        actions = sorted(
            [(at, "kill") for at in self.args.kill_at]
            + [(at, "reload") for at in self.args.reload_at]
        )
        try:
            daemon.start()
            assert daemon.started_at is not None
            if self.args.daemon_up == "ready":
                say("  daemon up; producing once the loop is ready")
                deadline = time.time() + 1800
                while not daemon.ready(self.args.standby) and time.time() < deadline:
                    time.sleep(1.0)
                work.notes["ready_after_s"] = round(time.time() - daemon.started_at, 1)
            else:
                say(f"  daemon up; producing in {float(self.args.daemon_up):g} s")
                up = float(self.args.daemon_up)
                time.sleep(max(daemon.started_at + up - time.time(), 0.0))
            begin()
            t0 = time.time()
            while (why := should_stop()) is None:
                if actions and time.time() - t0 >= actions[0][0]:
                    _, what = actions.pop(0)
                    at = time.time()
                    if what == "kill":
                        killed = daemon.kill_loop_workers()
                        say(f"  killed the run worker(s) of {len(killed)} looping run(s)")
                    else:
                        daemon.reload()
                        say("  deployed a changed pipeline and reloaded the code location")
                    work.disruptions.append((what, at))
                time.sleep(0.1)
            work.stopped_because = why
            time.sleep(2.0)  # the orphans' check: a killed worker's step had time to notice
            work.daemon = {
                "started_at": daemon.started_at,
                "loop_runs": loop_run_phases(daemon, t0),
                "loop_sensor_ticks": sensor_ticks(daemon, "stage_loop_sensor", t0),
                "actions": [{**a, "at": round(a["at"] - t0, 2)} for a in daemon.actions],
                "orphaned_steps_alive": daemon.orphans(),
                "phases_relative_to": "the first message",
                "begin_at": t0,
            }
        finally:
            daemon.stop()

    def run_load(self, case: Case, begin, should_stop, poller: TablePoller, work: Work) -> None:
        """Stage runs at every sensor tick and load cycles on the cadence's clock, executed in
        this process as ``kbqe run --until-idle`` executes them, until ``should_stop``;
        ``begin`` once the definitions are built."""
        from kbqe_dagster.runner.in_process import in_process_pipeline

        self.spark_context()  # the stage runs' resource reuses it (SparkContext.getOrCreate)
        stage_every, cadence = self.stage_every(), self.args.load_cadence
        work.notes = {
            "driver": "runner/in_process.py stage_job / load_job / poll_load_jobs_job",
            "stage_every_s": stage_every, "load_cadence_s": cadence, "load_poll_s": 1.0,
            "allowed_latency": "1s",
            "dominated_by": "the stage tick and the load cadence: a message waits for the next "
                            "stage run, then for the next load cycle on the clock",
        }  # fmt: skip
        with in_process_pipeline() as pipeline:
            begin()
            next_stage = time.time() + stage_every
            next_load = (math.floor(time.time() / cadence) + 1) * cadence  # cron: on the clock
            while (why := should_stop()) is None:
                now = time.time()
                if now >= next_stage:
                    next_stage += stage_every * max(1, math.ceil((now - next_stage) / stage_every))
                    backlog = pipeline.backlogs([case.topic])
                    if backlog[case.topic].lag > 0:
                        started = time.time()
                        [outcome] = pipeline.stage({case.topic: backlog[case.topic]})
                        if not outcome.ok:
                            raise RuntimeError(
                                f"{case.topic}: stage run {outcome.run_id} failed: {outcome.error}"
                            )
                        work.rounds.append((started, time.time() - started, outcome.messages))
                    continue
                if now >= next_load:
                    next_load += cadence * max(1, math.ceil((now - next_load) / cadence))
                    started = time.time()
                    poller.pause()  # the load jobs write the table (TablePoller)
                    try:
                        rows = self._load_cycle(pipeline, case)
                    finally:
                        poller.resume(poll_now=True)
                    work.loads.append((started, time.time() - started, rows))
                    continue
                time.sleep(min(0.2, max(0.0, min(next_stage, next_load) - time.time())))
            work.stopped_because = why

    @staticmethod
    def _load_cycle(pipeline, case: Case) -> int:
        outcome = pipeline.load()
        if not outcome.ok:
            raise RuntimeError(f"load run {outcome.run_id} failed: {outcome.error}")
        rows = sum(t.rows for t in outcome.tables.values())
        while pipeline.load_side().pending_jobs:
            time.sleep(1.0)  # load.poll_interval: 1s
            polled = pipeline.poll()
            if not polled.ok:
                raise RuntimeError(f"poll run {polled.run_id} failed: {polled.error}")
            rows += sum(t.rows for t in polled.tables.values())
        return rows

    # --- the figures ------------------------------------------------------------------------
    def report(self, case: Case, producer: SteadyProducer, poller: TablePoller, work: Work) -> dict:
        result = producer.result
        produced = producer.produced()
        first = {p: m.first for p, m in produced.items()}
        polls = poller.polls(first)
        matched = match(produced, polls)
        times = [t for m in produced.values() for t in m.times]
        first_at, last_at = min(times), max(times)
        series = backlog_series(produced, polls)
        produce_s = max(last_at - first_at, 1e-9)
        visible_at = max((p.at for p in polls if sum(p.ends.values()) >= len(times)), default=None)
        staged = sum(m for _, _, m in work.rounds)
        busy = sum(s for _, s, _ in work.rounds)
        row = {
            "path": case.path, "rate": case.rate, "partitions": case.partitions,
            "topic": case.topic, "table": f"{self.dataset}.{case.table}",
            "messages": len(times),
            "produce": {"target_msg_per_s": case.rate,
                        "achieved_msg_per_s": round(len(times) / produce_s),
                        "seconds": round(produce_s, 2), "max_behind_schedule_s": result["max_behind_s"],
                        "cpu_seconds": result["cpu_seconds"]},
            "latency_s": latency_summary(matched.latencies),
            # Past the warm-up: the first rows of a new table also wait for its creation.
            "warmup_s": self.args.warmup,
            "latency_after_warmup_s": latency_summary(
                produced_after(matched, first_at + self.args.warmup)
                if self.args.seconds > self.args.warmup else []),
            "unseen": sum(matched.unseen.values()),
            "unseen_by_partition": matched.unseen,
            "gap_polls": matched.gap_polls,
            "delivered_msg_per_s": (round(len(times) / (visible_at - first_at))
                                    if visible_at else None),
            "staged_msg_per_busy_s": round(staged / busy) if busy else None,
            "staging_rounds": len(work.rounds), "staging_busy_s": round(busy, 2),
            # Each busy round or stage run: seconds after the first produce, its length, messages.
            "rounds": [[round(a - first_at, 2), round(s, 2), n] for a, s, n in work.rounds],
            "load_cycles": [{"at": round(a - first_at, 1), "seconds": round(s, 2), "rows": n}
                            for a, s, n in work.loads],
            **keeping_up(series, first_at, last_at, case.rate),
            "poller": poller.timing(),
            "stopped_because": work.stopped_because,
            "settings": work.notes,
        }  # fmt: skip
        row["drain_s"] = round(visible_at - last_at, 2) if visible_at else None
        # Warm-up, each kill or reload, and the steady state apart; p99 per 10 s window.
        row["windows_10s"] = by_window(matched, first_at, 10.0)
        row["spans"] = disruption_figures(
            matched, first_at, last_at, work.disruptions, self.args.warmup, self.args.recovery
        )
        row["first_visible_s"] = (
            round(min(p.at for p in polls if any(p.ends.get(q, f) > f for q, f in first.items()))
                  - first_at, 2)
            if any(any(p.ends.get(q, f) > f for q, f in first.items()) for p in polls) else None
        )  # fmt: skip
        if work.daemon:
            # The phases were taken after the producer started: shifted to the first message.
            shift = work.daemon.pop("begin_at") - first_at
            for run in work.daemon["loop_runs"]:
                for key in [k for k in run if k.endswith("_at")]:
                    run[key] = round(run[key] + shift, 2)
            for item in work.daemon["loop_sensor_ticks"] + work.daemon["actions"]:
                item["at"] = round(item["at"] + shift, 2)
            row["daemon"] = work.daemon
        row["kept_up_basis"] = "backlog growth"
        if row["kept_up"] is None and row["staged_msg_per_busy_s"]:
            # Too few polls in the window (a round as long as the window holds them back):
            # judged by what a second of staging moves instead.
            row["kept_up"] = row["staged_msg_per_busy_s"] >= 0.95 * case.rate
            row["kept_up_basis"] = "messages staged per busy second against the rate"
        if row["produce"]["achieved_msg_per_s"] < 0.95 * case.rate:
            row["producer_kept_up"] = False
        if case.path == "load" and produce_s < 2 * self.args.load_cadence:
            # Nothing is visible between two load cycles: over a window shorter than two of
            # them the backlog grows by construction, which says nothing of the throughput.
            row["kept_up"] = None
            row["kept_up_note"] = (
                f"not judged: produced for {produce_s:.0f} s, under two load "
                f"cycles ({2 * self.args.load_cadence:g} s)"
            )
        lat = row["latency_s"]
        say(
            f"  p50 {lat.get('p50')} s, p99 {lat.get('p99')} s, max {lat.get('max')} s over "
            f"{lat.get('messages', 0):,} messages; unseen {row['unseen']}; kept up: {row['kept_up']}"
            f" ({work.stopped_because})"
        )
        for line in span_lines(row):
            say("  " + line)
        return row

    def close(self) -> None:
        if self.spark is not None:
            self.spark.stop()
        if self.args.keep:
            say(
                f"kept: topics {self.topics}, dataset {self.dataset}, staging {self.staging_url}, "
                f"{self.home}"
            )
            return
        for topic in self.topics:
            try:
                kb.delete_topic(self.endpoints.kafka_bootstrap, topic)
            except Exception as e:  # noqa: BLE001 - a leftover must not hide the results
                say(f"could not delete topic {topic}: {e}")
        try:
            self.client.delete_dataset(self.dataset, delete_contents=True, not_found_ok=True)
        except Exception as e:  # noqa: BLE001
            say(f"could not delete dataset {self.dataset}: {e}")
        try:
            from kbqe_dagster.resources.staging_store import StagingLocation

            store = StagingLocation(self.staging_url, self.endpoints.gcs_url, LOCAL_PROJECT).open()
            # A flat listing leaves out the load state under _kbqe/: asked for by name.
            for f in store.list("") + store.list("_kbqe/"):
                store.delete(f.name)
        except Exception as e:  # noqa: BLE001
            say(f"could not delete staging {self.staging_url}: {e}")
        shutil.rmtree(self.home, ignore_errors=True)


def _duration(seconds: float) -> str:
    return (
        f"{int(seconds // 60)}m{int(seconds % 60)}s" if seconds % 60 else f"{int(seconds // 60)}m"
    )


def verdicts(rows: list[dict]) -> list[str]:
    out = []
    for row in rows:
        target = TARGETS.get(row["path"], {}).get(row["rate"])
        if not target or not row["latency_s"].get("messages"):
            continue
        for name, limit in target.items():
            for label, key in (("", "latency_s"), (" after warm-up", "latency_after_warmup_s")):
                got = row[key].get(name)
                if got is not None:
                    out.append(
                        f"{row['path']} {row['rate']:,} msg/s on {row['partitions']}"
                        f"{label}: {name} {got} s {'<=' if got <= limit else '>'} "
                        f"target {limit} s"
                    )
    return out


def span_lines(row: dict) -> list[str]:
    """The warm-up, each kill or reload and the steady state apart, the first row's wait, the
    p99 of every 10 s window, and (--daemon) the loop runs' phases."""
    spans = row.get("spans") or {}
    out = [f"first row visible {row.get('first_visible_s')} s after the first message"]
    for span in spans.get("spans", ()):
        lat = span["latency_s"]
        out.append(
            f"{span['what']} at {span['at_s']:g} s (next {span['seconds']:g} s): p50 "
            f"{lat.get('p50')} s, p99 {lat.get('p99')} s, max {lat.get('max')} s; fresh "
            f"(<= {spans['fresh_s']:g} s) again after {span['fresh_again_s']} s"
        )
    steady = spans.get("steady_latency_s") or {}
    out.append(
        f"steady state: p50 {steady.get('p50')} s, p99 {steady.get('p99')} s over "
        f"{steady.get('messages', 0):,} messages"
    )
    out.append(
        "p99 per 10 s: "
        + " ".join(f"{w['from']:g}:{w.get('p99', '-')}" for w in row.get("windows_10s", ()))
    )
    for run in (row.get("daemon") or {}).get("loop_runs", ()):
        phases = ", ".join(f"{k[:-3]} {v}" for k, v in run.items() if k.endswith("_at"))
        out.append(
            f"loop run {run['run_id']} ({run['status']}, standby {run['standby']}): {phases}"
        )
    daemon = row.get("daemon") or {}
    if daemon:
        out.append(f"loop sensor ticks that launched runs: {daemon.get('loop_sensor_ticks')}")
        out.append(f"orphaned step processes still alive: {daemon.get('orphaned_steps_alive')}")
    return out


def breakdown_line(b: dict) -> str:
    return (
        f"storage_write CPU µs per row: ours {b['ours_us_per_row']} (null writer), the "
        f"client's appends {b['client_append_us_per_row']}, the emulator "
        f"{b['emulator_us_per_row']} over {b['messages']:,} rows; dominated by "
        f"{b.get('dominated_by', '-')}"
    )


def _cell(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def print_table(report: dict) -> None:
    head = (
        f"{'path':14s} {'msg/s':>7s} {'P':>2s} {'achieved':>8s} {'p50 s':>7s} {'p90 s':>7s} "
        f"{'p99 s':>7s} {'max s':>7s} {'p50 w':>7s} {'p99 w':>7s} {'deliv/s':>8s} "
        f"{'staged/busy s':>13s} {'kept up':>8s} {'backlog +/s':>11s} {'unseen':>6s}"
    )
    print("\n" + head + "\n" + "-" * len(head))
    for r in report["results"]:
        lat = r["latency_s"]
        print(
            f"{r['path']:14s} {r['rate']:>7,d} {r['partitions']:>2d} "
            f"{r['produce']['achieved_msg_per_s']:>8,d} {lat.get('p50', '-'):>7} "
            f"{lat.get('p90', '-'):>7} {lat.get('p99', '-'):>7} {lat.get('max', '-'):>7} "
            f"{r['latency_after_warmup_s'].get('p50', '-'):>7} "
            f"{r['latency_after_warmup_s'].get('p99', '-'):>7} "
            f"{_cell(r['delivered_msg_per_s']):>8s} {_cell(r['staged_msg_per_busy_s']):>13s} "
            f"{_cell(r['kept_up']):>8s} {_cell(r['backlog_growth_msg_per_s']):>11s} "
            f"{r['unseen']:>6d}"
        )
    print(
        f"p50 w, p99 w: the messages produced after the first {report['config']['warmup_s']:g}"
        " s (a new table's first rows also wait for its creation and first stream)"
    )
    for r in report["results"]:
        if r["path"] == "load":
            s = r["settings"]
            print(
                f"load path settings: a stage run every {s['stage_every_s']:g} s (the backlog "
                f"sensor's interval; allowed_latency {s['allowed_latency']}), a load cycle every "
                f"{s['load_cadence_s']:g} s on the clock (load.cadence), load jobs polled every "
                f"{s['load_poll_s']:g} s: its latency is dominated by {s['dominated_by']}."
            )
            break
    for r in report["results"]:
        if r["path"] == "storage_write":
            print(
                f"storage_write path: {r['settings'].get('driver')}, interval "
                f"{r['settings'].get('loop_interval_s')} s; poll of the table every "
                f"{r['poller'].get('mean_period_s')} s (query {r['poller'].get('mean_query_s')} s)"
                ": latencies include up to one poll period."
            )
            break
    for r in report["results"]:
        if r.get("kept_up_note"):
            print(f"kept up, {r['path']} {r['rate']:,} msg/s: {r['kept_up_note']}")
        if r.get("producer_kept_up") is False:
            print(
                f"the producer did not hold {r['rate']:,} msg/s: {r['produce']['achieved_msg_per_s']:,}"
                f" achieved, up to {r['produce']['max_behind_schedule_s']} s behind schedule"
            )
    if report.get("breakdown"):
        print(breakdown_line(report["breakdown"]))
    for line in report["verdicts"]:
        print("target: " + line)
    print(
        f"load average (1 min) before/after: {report['load_average']}; "
        f"{report['machine']['cpus']} cores. Measured on the shared local stack: other work on "
        "the machine inflates latencies and lowers rates."
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # A TERM (a timeout, a CI job cancelled) ends like Ctrl-C: the finally below cleans up.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    setup_logging(
        args.verbose, fmt="%(levelname)s %(name)s: %(message)s", ours_from=logging.WARNING
    )
    if not args.verbose:
        logging.getLogger("alembic").setLevel(logging.WARNING)
    bench = Bench(args)
    load_before = [round(x, 2) for x in os.getloadavg()]
    report: dict = {"generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                    "machine": machine_facts(),
                    "config": {"rates": args.rates, "seconds": args.seconds, "paths": args.paths,
                               "poll_interval_s": args.poll_interval, "warmup_s": args.warmup,
                               "schema": "flat: seq, eventTime, source, amount, payload",
                               "value_bytes": 5 + len(encode_body(10**6, int(time.time() * 1000),
                                                                  b"x" * 40, b"\0" * 8))},
                    "results": []}  # fmt: skip
    try:
        bench.setup()
        if args.breakdown_messages and "storage_write" in args.paths:
            from _sw_breakdown import storage_write_breakdown

            # Spark first: its gateway does not launch after this process used gRPC.
            bench.spark_context()
            say(f"storage_write breakdown over {args.breakdown_messages:,} messages")
            report["breakdown"] = storage_write_breakdown(bench, args.breakdown_messages)
            say(f"  {breakdown_line(report['breakdown'])}")
        for case in bench.cases:
            report["results"].append(bench.measure(case))
    finally:
        report["load_average"] = {
            "before": load_before,
            "after": [round(x, 2) for x in os.getloadavg()],
        }
        bench.close()
    report["verdicts"] = verdicts(report["results"])
    print_table(report)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
