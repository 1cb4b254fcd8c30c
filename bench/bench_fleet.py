"""Fleet benchmark on the local stack: what one ``kafka_backlog_sensor`` tick, the stage runs
and the load planner cost with 20 and with 200 topics of 3 partitions, a few busy, some with
a small backlog, most idle.

For each fleet size N:

1. N topics created with the AdminClient under a unique prefix (``benchfleet<id>.``), found
   by one ``topic_patterns`` entry (``format: json``, a table per topic); 10% of them busy
   (``--busy-messages`` each, past ``max_messages_per_batch``: due by size), 30% with a few
   messages (due by age: ``allowed_latency: 1s``), the rest empty;
2. the sensor tick, evaluated directly (``dg.build_sensor_context``, a throwaway instance),
   ``--ticks`` times: wall time, the Kafka client calls it makes (every ``AdminClient`` and
   ``Consumer`` method the package calls is counted by wrapping the classes), the staging
   listings, the run requests, and the Python heap peak (tracemalloc) and RSS; the same
   backlog read topic by topic (``topic_backlog``, the tick before fleets) for comparison;
3. the stage runs the tick requested (groups of ``stage_runs.max_topics_per_run``), executed
   one after the other with ``run_stage_group`` on Spark ``local[2]`` into a local staging
   directory: runs, Spark jobs (one job group per run), ranges, seconds, records, and the
   driver's heap peak while it prepares;
4. the load planner over what was staged (``operations.load_plan``, the coordinator's
   listing and plan): seconds, files listed, heap peak.

Everything it creates is deleted at the end (topics, staging files). Prints a table and writes
``bench/results/fleet.json``.

    .venv/bin/python bench/bench_fleet.py [--sizes 20,200] [--ticks 3] [--no-stage]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections import Counter
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(ROOT)]
os.environ.setdefault("KBQE_LOCAL_HOME", str(ROOT / ".kbqe-local"))

import dagster as dg  # noqa: E402
import yaml  # noqa: E402
from confluent_kafka import Consumer, Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from kbqe_dagster.core.config.pipeline import load_pipeline_config  # noqa: E402
from kbqe_dagster.defs.staging import sensors  # noqa: E402
from kbqe_dagster.localstack.endpoints import local_endpoints  # noqa: E402
from kbqe_dagster.resources.configurable import (  # noqa: E402
    KafkaResource,
    PipelineResource,
    StagingResource,
)
from kbqe_dagster.resources.kafka import clients as kafka_clients  # noqa: E402
from kbqe_dagster.resources.kafka import cluster as kafka_cluster  # noqa: E402
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG, KafkaSettings  # noqa: E402
from kbqe_dagster.resources.staging_store import LocalStagingStore  # noqa: E402
from kbqe_dagster.staging import backlog as backlog_module  # noqa: E402

SCHEMA = {
    "type": "record",
    "name": "Ping",
    "namespace": "fleet",
    "fields": [
        {"name": "n", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
PARTITIONS = 3
CALLS: Counter[str] = Counter()
LISTINGS: Counter[str] = Counter()


# --- counting the Kafka client calls --------------------------------------------------------
class CountingAdmin(AdminClient):
    def __init__(self, conf):
        CALLS["admin_client"] += 1
        super().__init__(conf)

    def list_topics(self, *args, **kwargs):
        CALLS["metadata_request"] += 1
        return super().list_topics(*args, **kwargs)

    def list_offsets(self, requests, **kwargs):
        CALLS["list_offsets_request"] += 1
        CALLS["list_offsets_partitions"] += len(requests)
        return super().list_offsets(requests, **kwargs)


class CountingConsumer(Consumer):
    def __init__(self, conf):
        CALLS["consumer"] += 1
        super().__init__(conf)

    def get_watermark_offsets(self, *args, **kwargs):
        CALLS["watermark_request"] += 1
        return super().get_watermark_offsets(*args, **kwargs)

    def consume(self, *args, **kwargs):
        CALLS["consume_call"] += 1
        return super().consume(*args, **kwargs)


_LOCAL_LIST = LocalStagingStore.list


def _counting_list(self, prefix: str = ""):
    LISTINGS["staging_listing"] += 1
    return _LOCAL_LIST(self, prefix)


@contextlib.contextmanager
def counted():
    # the clients of resources/kafka/clients.py, and the one consumer cluster.py builds itself
    saved = (
        kafka_clients.AdminClient,
        kafka_clients.Consumer,
        kafka_cluster.Consumer,
        LocalStagingStore.list,
    )
    kafka_clients.AdminClient, kafka_clients.Consumer = CountingAdmin, CountingConsumer
    kafka_cluster.Consumer = CountingConsumer
    LocalStagingStore.list = _counting_list
    CALLS.clear()
    LISTINGS.clear()
    try:
        yield
    finally:
        (
            kafka_clients.AdminClient,
            kafka_clients.Consumer,
            kafka_cluster.Consumer,
            LocalStagingStore.list,
        ) = saved


def round_trips(calls: Counter) -> int:
    """Requests to the broker: metadata, ListOffsets, watermark queries, and one fetch session
    per consumer (its fetches ask the broker for all its assigned partitions together)."""
    return (
        calls["metadata_request"]
        + calls["list_offsets_request"]
        + calls["watermark_request"]
        + calls["consumer"]
    )


def rss_mb() -> float:
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


@contextlib.contextmanager
def heap_peak(out: dict, key: str):
    tracemalloc.start()
    try:
        yield
    finally:
        out[key] = round(tracemalloc.get_traced_memory()[1] / 2**20, 2)
        tracemalloc.stop()


# --- the fleet ------------------------------------------------------------------------------
class Fleet:
    def __init__(self, bootstrap: str, size: int, busy_messages: int, workdir: Path) -> None:
        self.bootstrap = bootstrap
        self.run = uuid.uuid4().hex[:8]
        self.prefix = f"benchfleet{self.run}"
        self.topics = [f"{self.prefix}.t{i:03d}" for i in range(size)]
        busy_every, small_every = 10, 3
        self.busy = [t for i, t in enumerate(self.topics) if i % busy_every == 0]
        self.small = [
            t for i, t in enumerate(self.topics) if i % busy_every and i % busy_every <= small_every
        ]
        self.busy_messages = busy_messages
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "logger": CLIENT_LOG})
        self.staging = workdir / f"staging-{size}"
        self.staging.mkdir(parents=True)
        self.pipeline = workdir / f"pipeline-{size}.yaml"
        self.pipeline.write_text(
            yaml.safe_dump(
                {
                    "version": 1,
                    "topic_patterns": [
                        {
                            "match": rf"{self.prefix}\..*",
                            "format": "json",
                            "schema": SCHEMA,
                            "event_time": {"fields": ["at"]},
                            "routing": {
                                "mode": "static",
                                "dataset": "fleet_bench",
                                "table": "{topic}",
                            },
                        }
                    ],
                    "staging": {
                        "allowed_latency": "1s",
                        "max_messages_per_batch": busy_messages // 2,
                    },
                    "stage_runs": {"max_topics_per_run": 50},
                }
            )
        )

    def create(self) -> float:
        started = time.perf_counter()
        futures = self.admin.create_topics(
            [NewTopic(t, num_partitions=PARTITIONS, replication_factor=1) for t in self.topics],
            operation_timeout=60,
        )
        for future in futures.values():
            future.result(120)
        # Until every partition has a leader, the metadata lists a topic with an error.
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            meta = self.admin.list_topics(timeout=20).topics
            if all(
                t in meta and meta[t].error is None and len(meta[t].partitions) == PARTITIONS
                for t in self.topics
            ):
                break
            time.sleep(0.5)
        return round(time.perf_counter() - started, 2)

    def produce(self) -> int:
        producer = Producer(
            {"bootstrap.servers": self.bootstrap, "logger": CLIENT_LOG, "linger.ms": 20}
        )
        sent = 0
        at = int(time.time() * 1000) - 60_000
        for topic in self.busy + self.small:
            count = self.busy_messages if topic in self.busy else 4
            for n in range(count):
                producer.produce(
                    topic, json.dumps({"n": n, "at": at + n}).encode(), partition=n % PARTITIONS
                )
                sent += 1
                if sent % 10_000 == 0:
                    producer.poll(0)
        assert producer.flush(60) == 0
        return sent

    def delete(self) -> None:
        for future in self.admin.delete_topics(self.topics, operation_timeout=60).values():
            with contextlib.suppress(Exception):
                future.result(120)

    def resources(self) -> dict:
        return {
            "pipeline": PipelineResource(config_path=str(self.pipeline)),
            "kafka": KafkaResource(bootstrap_servers=self.bootstrap),
            "staging": StagingResource(url=str(self.staging)),
        }


# --- the measures ---------------------------------------------------------------------------
def measure_tick(fleet: Fleet, ticks: int) -> tuple[dict, list]:
    resources = fleet.resources()
    times, result = [], None
    out: dict = {}
    with dg.instance_for_test() as instance:
        for i in range(ticks):
            with counted():
                started = time.perf_counter()
                if i == ticks - 1:
                    with heap_peak(out, "heap_peak_mb"):
                        result = sensors.kafka_backlog_sensor(
                            dg.build_sensor_context(instance=instance, resources=resources)
                        )
                else:
                    result = sensors.kafka_backlog_sensor(
                        dg.build_sensor_context(instance=instance, resources=resources)
                    )
                times.append(time.perf_counter() - started)
                calls, listings = Counter(CALLS), Counter(LISTINGS)
    requests = result.run_requests
    out.update(
        {
            "seconds": [round(t, 3) for t in times],
            "seconds_best": round(min(times), 3),
            "kafka_calls": dict(calls),
            "broker_round_trips": round_trips(calls),
            "staging_listings": listings["staging_listing"],
            "observations": len(result.asset_events),
            "run_requests": len(requests),
            "topics_in_runs": sum(
                len(
                    r.run_config["ops"]["staging"]["config"].get("topics")
                    or [r.run_config["ops"]["staging"]["config"]["topic"]]
                )
                for r in requests
            ),
        }
    )
    return out, requests


def measure_per_topic(fleet: Fleet) -> dict:
    """The tick before fleets: topic_backlog (with the oldest time) topic by topic."""
    config = kafka_cluster.discover_topics(
        load_pipeline_config(fleet.pipeline), KafkaSettings(fleet.bootstrap)
    )
    store = LocalStagingStore(fleet.staging)
    settings = KafkaSettings(fleet.bootstrap)
    with counted():
        started = time.perf_counter()
        for topic in config.topics:
            backlog_module.topic_backlog(store, settings, topic.name, topic.staging.start_offset)
        seconds = time.perf_counter() - started
        calls, listings = Counter(CALLS), Counter(LISTINGS)
    return {
        "seconds": round(seconds, 3),
        "kafka_calls": dict(calls),
        "broker_round_trips": round_trips(calls),
        "staging_listings": listings["staging_listing"],
    }


def measure_stage(fleet: Fleet, requests: list, sc) -> dict:
    from kbqe_dagster.resources.schema_registry import RegistrySettings
    from kbqe_dagster.resources.staging_store import StagingLocation
    from kbqe_dagster.stager_registry import stage_context
    from kbqe_dagster.staging.job import run_stage_group

    config = kafka_cluster.discover_topics(
        load_pipeline_config(fleet.pipeline), KafkaSettings(fleet.bootstrap)
    )
    ctx = stage_context(
        KafkaSettings(fleet.bootstrap),
        RegistrySettings("http://127.0.0.1:1"),
        StagingLocation(str(fleet.staging)),
        config,
        config.topics[0].name,
        native_kernel=False,
    )
    jobs, ranges, records, runs = 0, 0, 0, 0
    driver: dict = {"driver_heap_peak_mb": 0.0}
    started = time.perf_counter()
    for number, request in enumerate(requests):
        staged = request.run_config["ops"]["staging"]["config"]
        topics = staged.get("topics") or [staged["topic"]]
        group = f"bench-fleet-{fleet.run}-{number}"
        sc.setJobGroup(group, "grouped stage run")
        peak: dict = {}
        with heap_peak(peak, "mb"):
            summaries = run_stage_group(sc, ctx, topics)
        driver["driver_heap_peak_mb"] = max(driver["driver_heap_peak_mb"], peak["mb"])
        jobs += len(sc.statusTracker().getJobIdsForGroup(group))
        runs += 1
        ranges += sum(len(s.results) for s in summaries)
        records += sum(s.records for s in summaries)
    sc.setLocalProperty("spark.jobGroup.id", None)
    return {
        "stage_runs": runs,
        "spark_jobs": jobs,
        "ranges": ranges,
        "records": records,
        "seconds": round(time.perf_counter() - started, 2),
        "runs_one_per_topic_would_be": sum(
            len(r.run_config["ops"]["staging"]["config"].get("topics") or [1]) for r in requests
        ),
        **driver,
    }


def measure_load_plan(fleet: Fleet) -> dict:
    from kbqe_dagster.operations.load_plan import load_plan

    config = load_pipeline_config(fleet.pipeline)
    store = LocalStagingStore(fleet.staging)
    out: dict = {}
    listed = len(store.list())
    started = time.perf_counter()
    with heap_peak(out, "heap_peak_mb"):
        plan = load_plan(store, config)
    out.update(
        {
            "seconds": round(time.perf_counter() - started, 3),
            "files_listed": listed,
            "load_jobs": len(plan.jobs),
            "files_in_jobs": sum(len(j.files) for j in plan.jobs),
        }
    )
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="20,200")
    parser.add_argument("--ticks", type=int, default=3)
    parser.add_argument("--busy-messages", type=int, default=1_000)
    parser.add_argument("--no-stage", action="store_true", help="tick and per-topic only")
    args = parser.parse_args()
    bootstrap = local_endpoints().kafka_bootstrap
    workdir = Path(tempfile.mkdtemp(prefix="bench-fleet-"))
    results: dict = {
        "partitions_per_topic": PARTITIONS,
        "busy_messages": args.busy_messages,
        "sizes": {},
    }
    spark = None
    try:
        for size in (int(s) for s in args.sizes.split(",")):
            fleet = Fleet(bootstrap, size, args.busy_messages, workdir)
            try:
                entry: dict = {
                    "topics": size,
                    "busy": len(fleet.busy),
                    "small": len(fleet.small),
                    "idle": size - len(fleet.busy) - len(fleet.small),
                }
                entry["create_seconds"] = fleet.create()
                entry["messages"] = fleet.produce()
                time.sleep(1.5)  # past allowed_latency: the small topics are due by age
                entry["tick"], requests = measure_tick(fleet, args.ticks)
                entry["per_topic_backlog_reads"] = measure_per_topic(fleet)
                if not args.no_stage:
                    if spark is None:
                        from kbqe_dagster.resources.spark import local_spark_config, spark_resource

                        spark = spark_resource(local_spark_config("local[2]")).spark_context
                        spark.setLogLevel("ERROR")
                    entry["stage"] = measure_stage(fleet, requests, spark)
                    entry["load_plan"] = measure_load_plan(fleet)
                    entry["tick_after_staging"], _ = measure_tick(fleet, 1)
                entry["process_max_rss_mb"] = rss_mb()
                results["sizes"][str(size)] = entry
                print_entry(entry)
            finally:
                fleet.delete()
    finally:
        if spark is not None:
            spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)
    out = BENCH / "results" / "fleet.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"\nwrote {out}")
    return 0


def print_entry(e: dict) -> None:
    t, p = e["tick"], e["per_topic_backlog_reads"]
    print(
        f"\n== {e['topics']} topics × {PARTITIONS} partitions: {e['busy']} busy, {e['small']} "
        f"small, {e['idle']} idle; {e['messages']} messages"
    )
    print(
        f"  sensor tick        {t['seconds_best']:.3f}s best of {t['seconds']}, "
        f"{t['broker_round_trips']} broker round trips {t['kafka_calls']}, "
        f"{t['staging_listings']} staging listing(s), heap peak {t['heap_peak_mb']} MB, "
        f"{t['run_requests']} run request(s) for {t['topics_in_runs']} topic(s)"
    )
    print(
        f"  topic by topic     {p['seconds']:.3f}s, {p['broker_round_trips']} broker round "
        f"trips {p['kafka_calls']}, {p['staging_listings']} staging listing(s)"
    )
    if "stage" in e:
        s, lp = e["stage"], e["load_plan"]
        print(
            f"  stage              {s['stage_runs']} run(s), {s['spark_jobs']} Spark job(s) "
            f"(one run per topic: {s['runs_one_per_topic_would_be']}), {s['ranges']} ranges, "
            f"{s['records']} records in {s['seconds']}s, driver heap peak "
            f"{s['driver_heap_peak_mb']} MB"
        )
        print(
            f"  load plan          {lp['seconds']:.3f}s over {lp['files_listed']} files, "
            f"{lp['load_jobs']} job(s), heap peak {lp['heap_peak_mb']} MB"
        )
        ta = e["tick_after_staging"]
        print(
            f"  tick after staging {ta['seconds_best']:.3f}s, {ta['broker_round_trips']} "
            f"round trips, heap peak {ta['heap_peak_mb']} MB"
        )
    print(f"  process max RSS    {e['process_max_rss_mb']} MB")


if __name__ == "__main__":
    sys.exit(main())
