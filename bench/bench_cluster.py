"""Stage throughput on a Spark standalone cluster against ``local[2]``, for the same backlogs.

Three ways to run the stage job (``run_stage``, as the stage asset calls it), each on a
SparkContext of its own, in this order:

1. ``local[2]``: Spark in this process, two Python workers (what ``kbqe run`` does by default);
2. ``cluster_1``: a standalone master and one worker of one core (one executor);
3. ``cluster_2``: the same with two workers of one core each (1+1 cores).

The cluster is kbqe_dagster_tests/support/spark_cluster.py's: JVMs from pyspark's
``spark-class``, executors on a second Python with kbqe_dagster from a wheel, the driver on a
veth address. Here both workers are on the host's network (the cluster test puts one in a
namespace behind a forwarder: a relay in this process would cost CPU the figures would count).

For each backlog size, a fresh topic of 4 partitions (bench_hot_path.py's order schema, as
bench_stage.py) is staged by each way to a fresh prefix of the fake-GCS bucket, one range per
partition. Reported per way: the context's start (for a cluster: registering the app and
launching its executors, their Python workers warmed), each backlog's stage seconds and
messages/s; and the smallest backlog at which ``cluster_2`` pays, counting its start (every
Dagster stage run starts its own context) and not counting it. On one 2-core machine the
cluster's executors share the driver's cores, so this is a lower bound of what separate hosts
give.

Needs root (spark_cluster.py). Starts the stack services it needs and stops those it started.

    .venv/bin/python bench/bench_cluster.py [--sizes 4000,40000,400000]

Prints a table and writes ``bench/results/cluster.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import shutil
import sys
import time
import uuid
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT)]
os.environ.setdefault("KBQE_LOCAL_HOME", str(ROOT / ".kbqe-local"))

import _kafka_bench as kb  # noqa: E402
from _stage_support import machine_facts  # noqa: E402
from bench_hot_path import SCHEMA  # noqa: E402
from bench_stage import PARTITIONS, SERVICES, pipeline  # noqa: E402

from kbqe_dagster.localstack import stack  # noqa: E402
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT, local_endpoints  # noqa: E402
from kbqe_dagster.resources.kafka.clients import KafkaSettings  # noqa: E402
from kbqe_dagster.resources.schema_registry import RegistrySettings  # noqa: E402
from kbqe_dagster.resources.spark import (  # noqa: E402
    local_spark_config,
    spark_config_from_environment,
    spark_resource,
)
from kbqe_dagster.resources.staging_store import StagingLocation  # noqa: E402
from kbqe_dagster.stager_registry import stage_context  # noqa: E402
from kbqe_dagster.staging.job import run_stage  # noqa: E402
from kbqe_dagster_tests.support.spark_cluster import (  # noqa: E402
    cluster_unavailable,
    start_cluster,
)

WAYS = ("local[2]", "cluster_1", "cluster_2")
RESULTS = BENCH / "results" / "cluster.json"


def say(text: str) -> None:
    print(f"[{dt.datetime.now():%H:%M:%S}] {text}", flush=True)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument(
        "--sizes",
        default="4000,40000,400000",
        help="backlog sizes, messages, comma-separated (default 4000,40000,400000)",
    )
    parser.add_argument("--json", type=Path, default=RESULTS, help=f"default {RESULTS}")
    return parser.parse_args(argv)


def warm(spark) -> None:
    """Start every executor's Python worker and import the stage code in it, as the first
    stage task of a run would."""
    slots = max(2, spark.defaultParallelism)
    spark.parallelize(range(slots), slots).map(
        lambda _: __import__("kbqe_dagster.staging.task") and 0
    ).collect()


class Bench:
    def __init__(self, sizes: list[int]) -> None:
        self.sizes = sizes
        self.endpoints = local_endpoints()
        self.kafka = KafkaSettings(self.endpoints.kafka_bootstrap)
        self.registry = RegistrySettings(self.endpoints.registry_url)
        self.topics: list[str] = []
        self.prefixes: list[StagingLocation] = []

    def backlog(self, count: int) -> dict:
        topic = f"bench.cluster.t{uuid.uuid4().hex[:8]}"
        kb.create_topic(self.endpoints.kafka_bootstrap, topic, PARTITIONS)
        self.topics.append(topic)
        schema_id = kb.register_schema(self.endpoints.registry_url, f"{topic}-value", SCHEMA)
        say(f"producing {count:,} messages into {topic}")
        kb.produce(self.endpoints.kafka_bootstrap, topic, count, PARTITIONS, schema_id)
        ends = kb.high_watermarks(self.endpoints.kafka_bootstrap, topic, PARTITIONS)
        if sum(ends.values()) != count:
            raise RuntimeError(f"{topic}: high watermarks {ends} do not add up to {count}")
        return {"topic": topic, "count": count, "ends": ends}

    def stage(self, spark, data: dict) -> dict:
        location = StagingLocation(
            f"gs://{LOCAL_BUCKET}/bench-cluster-{uuid.uuid4().hex[:8]}",
            self.endpoints.gcs_url,
            LOCAL_PROJECT,
        )
        self.prefixes.append(location)
        ctx = stage_context(
            self.kafka,
            self.registry,
            location,
            pipeline(data["topic"], max(data["ends"].values())),
            data["topic"],
        )
        largest = max(data["ends"].values())
        started = time.perf_counter()
        summary = run_stage(
            spark, ctx, max_messages_per_run=largest, max_messages_per_range=largest
        )
        seconds = time.perf_counter() - started
        if summary.messages != data["count"] or summary.records != data["count"]:
            raise RuntimeError(f"{data['topic']}: staged {summary.messages} of {data['count']}")
        return {
            "messages": summary.messages,
            "seconds": round(seconds, 3),
            "messages_per_s": round(summary.messages / seconds),
            "ranges": len(summary.results),
            "stage_path": summary.stage_path,
        }

    def run_way(self, way: str, backlogs: list[dict]) -> dict:
        cluster = None
        try:
            if way == "local[2]":
                config = local_spark_config("local[2]")
            else:
                workers = int(way.rsplit("_", 1)[1])
                say(f"{way}: starting a master and {workers} worker(s)")
                cluster = start_cluster(workers=workers, namespaced=())
                config = spark_config_from_environment(environ=cluster.driver_environment())
            started = time.perf_counter()
            spark = spark_resource(config).spark_context
            spark.setLogLevel("WARN")
            warm(spark)
            start_seconds = round(time.perf_counter() - started, 2)
            say(f"{way}: context and executors ready in {start_seconds} s")
            rows = {}
            for data in backlogs:
                row = self.stage(spark, data)
                rows[str(data["count"])] = row
                say(f"{way}: {data['count']:,} messages in {row['seconds']} s, "
                    f"{row['messages_per_s']:,} msg/s")  # fmt: skip
            spark.stop()
            return {"context_start_seconds": start_seconds, "backlogs": rows}
        finally:
            if cluster is not None:
                cluster.stop()
                shutil.rmtree(cluster.root, ignore_errors=True)

    def close(self) -> None:
        for location in self.prefixes:
            store = location.open()
            for f in store.list(""):
                store.delete(f.name)
        for topic in self.topics:
            kb.delete_topic(self.endpoints.kafka_bootstrap, topic)


def pays_at(report: dict, with_start: bool) -> int | None:
    """The smallest backlog from which on (it and every larger one) cluster_2 stages faster
    than local[2]; None if there is none. The smallest backlog's figures also hold each way's
    first-task costs (clients, schemas), as a Dagster run's first stage does."""
    local, cluster = report["ways"]["local[2]"], report["ways"]["cluster_2"]

    def total(way: dict, size: int) -> float:
        seconds = way["backlogs"][str(size)]["seconds"]
        return seconds + (way["context_start_seconds"] if with_start else 0.0)

    sizes = report["config"]["sizes"]
    return next(
        (
            s
            for i, s in enumerate(sizes)
            if all(total(cluster, t) < total(local, t) for t in sizes[i:])
        ),
        None,
    )


def print_table(report: dict) -> None:
    sizes = report["config"]["sizes"]
    print(f"\nstage on a Spark cluster vs local[2], {report['machine']['cpus']} cores, "
          f"load {report['load_average']}")  # fmt: skip
    print(f"{'way':<10} {'start s':>8} " + " ".join(f"{s:>16,}" for s in sizes))
    for way, row in report["ways"].items():
        cells = " ".join(
            f"{row['backlogs'][str(s)]['seconds']:>7.2f}s {row['backlogs'][str(s)]['messages_per_s']:>7,}/s"
            for s in sizes
        )
        print(f"{way:<10} {row['context_start_seconds']:>8.2f} {cells}")
    print(f"cluster_2 pays from (with its start): {report['pays_at_with_start']}")
    print(f"cluster_2 pays from (stage alone):    {report['pays_at_stage_alone']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    why_not = cluster_unavailable()
    if why_not:
        print(f"bench_cluster: {why_not}", file=sys.stderr)
        return 2
    sizes = sorted(int(s) for s in args.sizes.split(","))
    services = [s for s in stack.build(SERVICES) if s.name in SERVICES]
    started = [s for s in services if s.pid() is None]
    stack.up_services(started)
    bench = Bench(sizes)
    try:
        backlogs = [bench.backlog(n) for n in sizes]
        report = {
            "when": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "machine": machine_facts(),
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "config": {"sizes": sizes, "partitions": PARTITIONS, "ranges": "one per partition"},
            "ways": {way: bench.run_way(way, backlogs) for way in WAYS},
        }
        report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
        report["pays_at_with_start"] = pays_at(report, with_start=True)
        report["pays_at_stage_alone"] = pays_at(report, with_start=False)
    finally:
        bench.close()
        stack.down_services(started)
    print_table(report)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
