"""Stage-job benchmark on the local stack: the stage job against the raw Kafka consume rate.

In one run:

1. a fresh topic with 4 partitions; the 16-field order schema of bench_hot_path.py
   registered in the local Apicurio registry; N Confluent-framed messages (~240-byte values,
   16-byte keys) produced by an idempotent confluent-kafka producer (rate reported);
2. the baseline: a plain confluent-kafka consumer reading every partition from offset 0 to
   the high watermarks with ``consume(10_000)``, in 1 process and in 2 processes of 2
   partitions each (what Spark ``local[2]`` can use), with librdkafka's defaults and with its
   1 s fetch-queue backoff turned off (``raw_tuned``) and with the stage consumer's own tuning
   (``raw_stage_tuned``), the fastest of which is the reference of the ratio, plus the stage job's own reader (``read_range``) in 2 processes; then each
   per-message step of a stage task timed alone (``--breakdown``, in a child process);
3. the stage job, ``run_stage`` on Spark ``local[2]`` over the whole backlog, staging to a
   local directory and to the fake-GCS bucket, each run on a SparkContext and a JVM of its
   own (as each Dagster run starts one; its two workers warmed first), while the driver (this
   process + the Spark JVM) and the Python workers are sampled at 5 Hz for RSS and CPU (the
   stack's services are left out, also those this bench started and so are its children);
4. optionally (``--profile``) one more stage run with py-spy on the Python workers, and
   (``--scale10``) the produce and both stage runs again at 10× N for the memory figures.

Everything it creates (topics, staging files) is deleted at the end, and stack services it
had to start are stopped; services that were running are left alone.

    .venv/bin/python bench/bench_stage.py [--messages 1000000] [--scale10] [--profile]
    .venv/bin/python bench/bench_stage.py --debezium   # Debezium envelopes into a keyed topic
    .venv/bin/python bench/bench_stage.py --json-values   # schemaless JSON (format: json)
    .venv/bin/python bench/bench_stage.py --json-schema-values   # framed JSON (format: json_schema)
    .venv/bin/python bench/bench_stage.py --protobuf-values   # framed Protobuf (format: protobuf)
    .venv/bin/python bench/bench_stage.py --raw-values   # the Avro backlog archived undecoded (format: raw)
    .venv/bin/python bench/bench_stage.py --hour-tables   # the same, into HOUR-partitioned tables
    .venv/bin/python bench/bench_stage.py --transforms   # Avro with transforms the kernel does
    .venv/bin/python bench/bench_stage.py --json-values --json-transforms   # JSON masked, converted
    .venv/bin/python bench/bench_stage.py --file-codec null   # staged files uncompressed

Each stage run at N runs twice when the native stage kernel is built: with the kernel and on
the Python path (``StageContext.native_kernel``), so one report has ``ratios.ratio_kernel``
and ``ratios.ratio_python`` (``_gcs`` for the fake-GCS target) against the reference
baseline, and the breakdown has the kernel's per-message cost next to the Python steps'.
Memory is reported as peak RSS per role and as peak PSS (``peak_pss_mb``: pages the forked
PySpark workers share with their daemon counted once; ``total`` is the whole tree).

Prints a table and writes ``bench/results/stage.json`` (``stage_debezium.json``,
``stage_json.json``, ``stage_json_schema.json``, ``stage_protobuf.json``, ``stage_raw.json``;
``--hour-tables`` adds ``_hour``: ``stage_hour.json``, ``stage_json_hour.json``, ...). Target:
stage with the kernel ≥ 0.8× baseline.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import logging
import os
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

BENCH = Path(__file__).resolve().parent
ROOT = BENCH.parent
sys.path[:0] = [str(BENCH), str(ROOT)]
os.environ.setdefault("KBQE_LOCAL_HOME", str(ROOT / ".kbqe-local"))

import _kafka_bench as kb  # noqa: E402
from _breakdown import run_in_child as breakdown  # noqa: E402
from _debezium_bench import KEY_FIELD, variant_schema  # noqa: E402
from _json_bench import JSON_SCHEMA  # noqa: E402
from _profile import WorkerProfile, summarize  # noqa: E402
from _protobuf_bench import PROTO  # noqa: E402
from _stage_support import (  # noqa: E402
    TreeSampler,
    cpu_seconds,
    disk_write_mb_per_s,
    machine_facts,
    process_tree,
)
from bench_hot_path import SCHEMA  # noqa: E402

from kbqe_dagster.cli.logs import setup_logging  # noqa: E402
from kbqe_dagster.core.config.pipeline import parse_pipeline_config  # noqa: E402
from kbqe_dagster.core.config.sections import FileCodec  # noqa: E402
from kbqe_dagster.core.record.partitioning import (  # noqa: E402
    Partitioning,
    TablesConfig,
    TableSettings,
)
from kbqe_dagster.localstack import stack  # noqa: E402
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT, local_endpoints  # noqa: E402
from kbqe_dagster.resources.kafka.clients import KafkaSettings  # noqa: E402
from kbqe_dagster.resources.schema_registry import RegistrySettings  # noqa: E402
from kbqe_dagster.resources.staging_store import StagingLocation  # noqa: E402
from kbqe_dagster.stager_registry import stage_context  # noqa: E402
from kbqe_dagster.staging.context import StageContext  # noqa: E402
from kbqe_dagster.staging.job import run_stage  # noqa: E402
from kbqe_dagster.staging.native_kernel import kernel_status  # noqa: E402

PARTITIONS = 4
SERVICES = ("kafka", "apicurio", "gcs")  # the BigQuery emulator is not needed here
TARGET_RATIO = 0.8
KERNEL = kernel_status()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=1_000_000, help="N (default 1,000,000)")
    parser.add_argument("--scale10", action="store_true", help="also stage 10×N for peak RSS")
    parser.add_argument(
        "--profile",
        action="store_true",
        help="one extra stage run under py-spy (bench/results/stage_profile.txt)",
    )
    parser.add_argument(
        "--range-size",
        type=int,
        default=500_000,
        help="max_messages_per_range (default: the config default, 500,000)",
    )
    parser.add_argument(
        "--breakdown",
        type=int,
        default=100_000,
        metavar="M",
        help="time each per-message step over M messages (0: skip)",
    )
    parser.add_argument("--compression", default="none", help="producer compression.type")
    parser.add_argument(
        "--file-codec",
        default="snappy",
        choices=["snappy", "null", "deflate"],
        help="the staged files' codec (staging.file_codec) of the stage runs (default snappy)",
    )
    parser.add_argument(
        "--debezium",
        action="store_true",
        help="Debezium envelopes of the same row into a keyed topic "
        "(writes bench/results/stage_debezium.json unless --json)",
    )
    parser.add_argument(
        "--debezium-postgres",
        action="store_true",
        help="--debezium with the real Postgres connector's envelope of a table of 24 column "
        "types (bench/_debezium_bench.py; writes bench/results/stage_debezium_postgres.json)",
    )
    parser.add_argument(
        "--native-only",
        action="store_true",
        help="stage on the native kernel only, not also on the Python path (which takes "
        "many minutes per target at N = 1,000,000 for slow rows such as --debezium-postgres)",
    )
    parser.add_argument(
        "--json-values",
        action="store_true",
        help="the same row as schemaless JSON into a format: json topic "
        "(writes bench/results/stage_json.json unless --json)",
    )
    parser.add_argument(
        "--json-schema-values",
        action="store_true",
        help="the same row as Confluent-framed JSON under a registry JSON Schema "
        "into a format: json_schema topic (writes "
        "bench/results/stage_json_schema.json unless --json)",
    )
    parser.add_argument(
        "--protobuf-values",
        action="store_true",
        help="the same row as Confluent-framed Protobuf under a registry .proto, "
        "into a format: protobuf topic (writes bench/results/stage_protobuf.json "
        "unless --json)",
    )
    parser.add_argument(
        "--raw-values",
        action="store_true",
        help="the Avro backlog archived undecoded into a format: raw topic (one static "
        "table; writes bench/results/stage_raw.json unless --json)",
    )
    parser.add_argument(
        "--hour-tables",
        action="store_true",
        help="every destination table HOUR-partitioned (tables: {sales.*: {partitioning: "
        "hour}}): the records carry the event hour column (not with --debezium: keyed "
        "tables stay DAY)",
    )
    parser.add_argument(
        "--json-transforms",
        action="store_true",
        help="with --json-values: the topic masks and converts fields (JSON_TRANSFORMS: an "
        "hmac mask, a null mask, a numeric timestamp; writes "
        "bench/results/stage_json_transforms.json unless --json)",
    )
    parser.add_argument(
        "--transforms",
        action="store_true",
        help="the Avro topic with the transforms the native kernel does (a rename, a drop of "
        "two fields, a long cast to string, a constant: TRANSFORMS; writes "
        "bench/results/stage_transforms.json unless --json)",
    )
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--keep", action="store_true", help="keep the topics and staged files")
    parser.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        help="every library's log lines (Dagster, httpx, librdkafka, ...)",
    )
    return parser.parse_args(argv)


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.2f}] {text}", flush=True)


TRANSFORMS = [
    {"rename": "sessionId", "to": "session"},
    {"drop": ["ip", "isTest"]},
    {"cast": "userId", "to": "string"},
    {"add": "pipeline", "value": "bench"},
]
"""``--transforms``: kinds the native kernel does (core/transforms/kernel_transforms.py), on fields
routing and event time do not read."""


def pipeline(
    topic: str,
    range_size: int,
    debezium: bool | str = False,
    json_values: bool = False,
    json_schema_values: bool = False,
    protobuf_values: bool = False,
    raw_values: bool = False,
    hour_tables: bool = False,
    transforms: bool = False,
    json_transforms: bool = False,
    file_codec: str = "snappy",
):
    config = _pipeline(topic, range_size, debezium, json_values, json_schema_values,
                       protobuf_values, raw_values, transforms, json_transforms)  # fmt: skip
    codec = FileCodec(file_codec)  # every topic's staged files (staging.file_codec)
    config = dataclasses.replace(config, topics=tuple(
        dataclasses.replace(t, staging=dataclasses.replace(t.staging, file_codec=codec))
        for t in config.topics
    ))  # fmt: skip
    if not hour_tables:
        return config
    # Every table of the bench's dataset HOUR: what `tables: {sales.*: {partitioning: hour}}`
    # parses to (the allow-list and static routes are all in `sales`).
    hourly = TablesConfig({"sales.*": TableSettings(Partitioning.HOUR)})
    return dataclasses.replace(config, tables=hourly)


def _pipeline(
    topic: str,
    range_size: int,
    debezium: bool | str,
    json_values: bool,
    json_schema_values: bool,
    protobuf_values: bool,
    raw_values: bool,
    transforms: bool = False,
    json_transforms: bool = False,
):
    if transforms and (debezium or json_values or json_schema_values or protobuf_values
                       or raw_values):  # fmt: skip
        raise SystemExit("--transforms: the Avro topic's (the other formats have fuzzes of theirs)")
    if raw_values:  # the same framed Avro bytes, never decoded: one row each, key and headers
        return parse_pipeline_config({
            "version": 1,
            "topics": [{"name": topic, "format": "raw",
                        "routing": {"mode": "static", "dataset": "sales", "table": "archive"}}],
            "staging": {"max_messages_per_range": range_size, "file_codec": "snappy"},
        }, source="bench")  # fmt: skip
    if protobuf_values:  # framed Protobuf, its Avro form derived from the registry .proto
        return parse_pipeline_config({
            "version": 1,
            "topics": [{"name": topic, "format": "protobuf",
                        "routing": {"mode": "fields"}, "event_time": {"fields": ["eventTime"]}}],
            "allowed_destinations": ["sales.*"],
            "staging": {"max_messages_per_range": range_size, "file_codec": "snappy"},
        }, source="bench")  # fmt: skip
    if json_schema_values:  # framed JSON, its Avro form derived from the registry JSON Schema
        return parse_pipeline_config({
            "version": 1,
            "topics": [{"name": topic, "format": "json_schema",
                        "routing": {"mode": "fields"}, "event_time": {"fields": ["eventTime"]}}],
            "allowed_destinations": ["sales.*"],
            "staging": {"max_messages_per_range": range_size, "file_codec": "snappy"},
        }, source="bench")  # fmt: skip
    if json_values:  # the same row as schemaless JSON, staged under the declared schema
        return parse_pipeline_config({
            "version": 1,
            "topics": [{"name": topic, "format": "json", "schema": SCHEMA,
                        "routing": {"mode": "fields"}, "event_time": {"fields": ["eventTime"]},
                        **({"transforms": JSON_TRANSFORMS} if json_transforms else {})}],
            "allowed_destinations": ["sales.*"],
            "staging": {"max_messages_per_range": range_size, "file_codec": "snappy"},
        }, source="bench")  # fmt: skip
    if debezium:  # keyed: every change into sales.orders_changelog (core/keyed/contract.py)
        key = KEY_FIELD[debezium if isinstance(debezium, str) else "orders"]
        return parse_pipeline_config({
            "version": 1,
            "topics": [{"name": topic, "format": "debezium", "keyed": {"key": [key]},
                        "routing": {"mode": "static", "dataset": "sales", "table": "orders"}}],
            "staging": {"max_messages_per_range": range_size, "file_codec": "snappy"},
        }, source="bench")  # fmt: skip
    return parse_pipeline_config({
        "version": 1,
        "topics": [{"name": topic, "routing": {"mode": "fields"}, "event_time": {"fields": ["eventTime"]},
                    **({"transforms": TRANSFORMS} if transforms else {})}],
        "allowed_destinations": ["sales.*"],
        "staging": {"max_messages_per_range": range_size, "file_codec": "snappy"},
    }, source="bench")  # fmt: skip


JSON_HMAC_ENV = "KBQE_BENCH_HMAC_KEY"
JSON_TRANSFORMS = [
    {"mask": "ip", "key_env": JSON_HMAC_ENV},
    {"mask": "sessionId", "method": "null"},
    # The row has no top-level numeric time: its long userId read as epoch milliseconds
    # costs what a real one would (the conversion, not the meaning, is measured).
    {"timestamp": "userId", "to": "epoch_s", "epoch_unit": "ms"},
]
"""``--json-transforms``: a mask and a timestamp per record, which the native kernel rewrites
(kernel/src/rewrite.rs) and the Python path computes."""


def end_spark_jvm() -> None:
    """End the JVM of the SparkContext just stopped. PySpark keeps its JVM (the Py4J gateway)
    for the rest of the process and starts every later SparkContext on it: measured that way,
    the second to fourth stage runs had a JVM 4-14 MB larger than the first, which a Dagster
    run, whose JVM ends with its process, never has. The JVM exits when its stdin closes."""
    from pyspark import SparkContext

    gateway, SparkContext._gateway, SparkContext._jvm = SparkContext._gateway, None, None
    if gateway is None:
        return
    gateway.close()
    proc = getattr(gateway, "proc", None)
    if proc is not None:
        proc.stdin.close()
        proc.wait(timeout=60)


class Bench:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.endpoints = local_endpoints()
        self.kafka = KafkaSettings(self.endpoints.kafka_bootstrap)
        self.registry = RegistrySettings(self.endpoints.registry_url)
        self.topics: list[str] = []
        self.cleanups: list = []
        self.spark = None
        self.services = {s.name: s for s in stack.build(SERVICES)}

    def service_pids(self) -> frozenset[int]:
        """The stack services' pids, which the sampler leaves out: those this bench started
        are its children (a Kafka broker and Apicurio are JVMs of ~500 MB together), yet they
        serve the machine, not the stage run measured."""
        return frozenset(pid for s in self.services.values() if (pid := s.pid()) is not None)

    def service_cpu(self) -> dict[str, float | None]:
        return {
            name: cpu_seconds(service.pid())
            for name, service in self.services.items()
            if name != "apicurio"
        }

    def service_cpu_since(self, before: dict) -> dict[str, float]:
        """CPU seconds the Kafka broker and fake GCS used since ``before``: work done for the
        run measured, on the same two cores, that the process tree's figures leave out."""
        now = self.service_cpu()
        return {
            k: round(now[k] - before[k], 2)
            for k in now
            if now[k] is not None and before.get(k) is not None
        }

    # --- Kafka -------------------------------------------------------------------------------
    def backlog(self, count: int) -> dict:
        topic = f"bench.stage.t{uuid.uuid4().hex[:8]}"
        kb.create_topic(self.endpoints.kafka_bootstrap, topic, PARTITIONS)
        self.topics.append(topic)
        schema = variant_schema(self.args.debezium) if self.args.debezium else SCHEMA
        if self.args.json_schema_values:
            schema_id = kb.register_schema(
                self.endpoints.registry_url, f"{topic}-value", JSON_SCHEMA, "JSON"
            )
        elif self.args.protobuf_values:
            schema_id = kb.register_schema(
                self.endpoints.registry_url, f"{topic}-value", PROTO, "PROTOBUF"
            )
        else:
            schema_id = kb.register_schema(self.endpoints.registry_url, f"{topic}-value", schema)
        say(f"producing {count:,} messages into {topic} (schema id {schema_id})")
        produced = kb.produce(
            self.endpoints.kafka_bootstrap,
            topic,
            count,
            PARTITIONS,
            schema_id,
            compression=self.args.compression,
            debezium=self.args.debezium,
            json_values=self.args.json_values,
            json_schema_values=self.args.json_schema_values,
            protobuf_values=self.args.protobuf_values,
        )
        ends = kb.high_watermarks(self.endpoints.kafka_bootstrap, topic, PARTITIONS)
        if sum(ends.values()) != count:
            raise RuntimeError(f"{topic}: high watermarks {ends} do not add up to {count}")
        say(f"produced {produced['messages_per_s']:,} msg/s, {produced['mb_per_s']} MB/s")
        return {"topic": topic, "schema_id": schema_id, "ends": ends, "produce": produced,
                "input_bytes": produced["value_bytes"] + produced["key_bytes"]}  # fmt: skip

    def baselines(self, data: dict) -> list[dict]:
        rows = []
        for processes, kind in (
            (1, "raw"),
            (2, "raw"),
            (1, "raw_tuned"),
            (2, "raw_tuned"),
            (1, "raw_stage_tuned"),
            (2, "raw_stage_tuned"),
            (2, "read_range"),
        ):
            say(f"baseline: {kind} reader, {processes} process(es)")
            before = self.service_cpu()
            row = kb.consume(
                self.endpoints.kafka_bootstrap, data["topic"], data["ends"], processes, kind
            )
            row["service_cpu_seconds"] = self.service_cpu_since(before)
            if row["messages"] != sum(data["ends"].values()):
                raise RuntimeError(
                    f"baseline read {row['messages']} of {sum(data['ends'].values())}"
                )
            row["load_1min_after"] = round(os.getloadavg()[0], 2)
            rows.append(row)
            say(
                f"  {row['messages_per_s']:,} msg/s, {row['mb_per_s']} MB/s; "
                f"CPU s of the services: {row['service_cpu_seconds']}"
            )
        return rows

    # --- Spark -------------------------------------------------------------------------------
    def session(self, fresh: bool = False):
        """The SparkContext, started (and its two workers warmed) if needed. ``fresh``: a new
        one on a new JVM, as every Dagster stage run starts in its own process, so no run
        inherits the workers (and their imports, e.g. the GCS client) or the JVM (its grown
        heap and loaded classes) of the run measured before it."""
        if fresh and self.spark is not None:
            self.spark.stop()
            end_spark_jvm()
            self.spark = None
        if self.spark is None:
            from kbqe_dagster.resources.spark import local_spark_config, spark_resource

            started = time.perf_counter()
            # The stage asset's resource and what it asks of it: a SparkContext.
            self.spark = spark_resource(local_spark_config("local[2]")).spark_context
            self.spark.setLogLevel("WARN")
            # Start both Python workers and import the stage code in them, so the measured
            # runs see warm workers (spark.python.worker.reuse), as every run after a
            # Dagster run's first does.
            self.spark.parallelize([0, 1], 2).map(
                lambda _: __import__("kbqe_dagster.staging.task") and 0
            ).collect()
            if not hasattr(self, "spark_start_seconds"):
                self.spark_start_seconds = round(time.perf_counter() - started, 2)
        return self.spark

    def location(self, target: str) -> StagingLocation:
        if target == "local":
            directory = tempfile.mkdtemp(prefix="kbqe-bench-stage-")
            self.cleanups.append(lambda: shutil.rmtree(directory, ignore_errors=True))
            return StagingLocation(directory)
        location = StagingLocation(
            f"gs://{LOCAL_BUCKET}/bench-{uuid.uuid4().hex[:8]}",
            self.endpoints.gcs_url,
            LOCAL_PROJECT,
        )

        def remove() -> None:
            store = location.open()
            for f in store.list(""):
                store.delete(f.name)

        self.cleanups.append(remove)
        return location

    def context(self, data: dict, target: str) -> StageContext:
        return stage_context(
            self.kafka,
            self.registry,
            self.location(target),
            pipeline(
                data["topic"],
                self.args.range_size,
                self.args.debezium,
                self.args.json_values,
                self.args.json_schema_values,
                self.args.protobuf_values,
                self.args.raw_values,
                self.args.hour_tables,
                self.args.transforms,
                self.args.json_transforms,
                self.args.file_codec,
            ),
            data["topic"],
        )

    def stage(
        self, data: dict, target: str, profile: Path | None = None, native: bool = True
    ) -> dict:
        spark = self.session(fresh=True)
        ctx = dataclasses.replace(self.context(data, target), native_kernel=native)
        count = sum(data["ends"].values())
        say(
            f"stage job -> {target}, {'native kernel' if native else 'Python path'}"
            f"{' (profiled)' if profile else ''}: {count:,} messages"
        )
        before = self.service_cpu()
        with TreeSampler(interval=0.2, exclude=self.service_pids()) as sampler:
            if profile:
                workers = [s for s in process_tree(os.getpid()) if s.role == "worker"]
                daemon = next(s.pid for s in workers if s.ppid not in {w.pid for w in workers})
                with WorkerProfile(daemon, profile):
                    summary = self._run(spark, ctx, data)
            else:
                summary = self._run(spark, ctx, data)
        seconds = summary.seconds
        task_seconds = [r.seconds for r in summary.results]
        bad = sum(summary.dead_letters.values()) + sum(summary.skipped.values())
        row = {
            "target": target, "stage_path": summary.stage_path,
            "kernel_handbacks": summary.kernel_handbacks,
            "profiled": profile is not None, "messages": summary.messages,
            "records": summary.records, "bad_input": bad,
            "exact": summary.messages == count and summary.records == count and bad == 0,
            "seconds": round(seconds, 3), "messages_per_s": round(summary.messages / seconds),
            "mb_per_s": round(data["input_bytes"] / seconds / 1e6, 1),
            "ranges": len(summary.results), "files": len(summary.files),
            "avro_mb_written": round(summary.bytes_written / 1e6, 1),
            "task_seconds": {"sum": round(sum(task_seconds), 2), "max": round(max(task_seconds), 2)},
            "task_messages_per_s": round(summary.messages / sum(task_seconds)),
            **sampler.report(),
            "service_cpu_seconds": self.service_cpu_since(before),
        }  # fmt: skip
        cpu = sum(row["cpu_seconds"].values())
        row["cpu_us_per_message"] = round(cpu / count * 1e6, 2)
        say(
            f"  {row['messages_per_s']:,} msg/s, {row['mb_per_s']} MB/s, peak RSS "
            f"driver {row['peak_rss_mb'].get('driver')} MB, workers {row['peak_rss_mb'].get('worker')} MB; "
            f"CPU s of the services: {row['service_cpu_seconds']}"
        )
        if not row["exact"]:
            raise RuntimeError(f"stage run did not stage exactly the backlog: {row}")
        return row

    def _run(self, spark, ctx: StageContext, data: dict):
        # The whole backlog in one run: a partition's first range anchors its chain and
        # commits alone, so a range must cover the partition (at 10×N as at N: memory is
        # per block, not per range, which is what the 10×N figures show).
        largest = max(data["ends"].values())
        return run_stage(
            spark,
            ctx,
            max_messages_per_run=largest,
            max_messages_per_range=max(self.args.range_size, largest),
        )

    def close(self) -> None:
        if self.spark is not None:
            self.spark.stop()
        if self.args.keep:
            return
        for cleanup in self.cleanups:
            cleanup()
        for topic in self.topics:
            try:
                kb.delete_topic(self.endpoints.kafka_bootstrap, topic)
            except Exception as e:  # noqa: BLE001 - a leftover topic must not hide the results
                say(f"could not delete topic {topic}: {e}")


def ratios(stage: dict, baselines: list[dict]) -> dict:
    return {f"{b['reader']}_{b['processes']}p": round(stage["messages_per_s"] / b["messages_per_s"], 3)
            for b in baselines}  # fmt: skip


def reference(baselines: list[dict]) -> dict:
    """The baseline the target is judged against: the fastest of the tuned plain consumers
    (``raw_tuned`` and ``raw_stage_tuned``, 1 or 2 processes; on a busy 2-core machine two
    readers and the broker do not always beat one). The stricter choice: the JSON has the
    ratio to every baseline."""
    return max(
        (b for b in baselines if b["reader"] in ("raw_tuned", "raw_stage_tuned")),
        key=lambda b: b["messages_per_s"],
    )


def headline_ratios(stage: list[dict], ref: dict) -> dict:
    """``ratio_kernel`` / ``ratio_python`` (local directory) and their ``_gcs`` variants: stage
    msg/s over the reference baseline's, from the unprofiled runs at N."""
    out: dict = {}
    for row in stage:
        if row["profiled"]:
            continue
        name = "ratio_kernel" if row["stage_path"] == "native" else "ratio_python"
        suffix = "" if row["target"] == "local" else "_gcs"
        out[name + suffix] = round(row["messages_per_s"] / ref["messages_per_s"], 3)
    return out


def print_table(report: dict) -> None:
    produce = report["produce"]
    print(f"\nN = {report['config']['messages']:,} messages, mean value {report['config']['mean_value_bytes']} B"
          f" + key {report['config']['key_bytes']} B, {PARTITIONS} partitions, range size "
          f"{report['config']['range_size']:,}, {report['machine']['cpus']} cores")  # fmt: skip
    machine, load = report["machine"], report.get("load_average", {})
    print(f"machine: {machine['cpu_model']} at {machine.get('cpu_mhz')} MHz, {machine['cpus']} cores,"
          f" {machine['memory_gb']} GB; disk writes {machine.get('disk_write_mb_per_s')} MB/s;"
          f" load {load.get('before')} before, {load.get('after')} after")  # fmt: skip
    head = f"{'what':34s} {'msg/s':>10s} {'MB/s':>7s} {'s':>7s} {'CPU µs/msg':>10s} {'ratio*':>7s} {'RSS drv/wrk, PSS MB':>24s}"
    print(head + "\n" + "-" * len(head))
    base = reference(report["baselines"])["messages_per_s"]
    print(
        f"{'produce (idempotent)':34s} {produce['messages_per_s']:>10,d} {produce['mb_per_s']:>7.1f} "
        f"{produce['seconds']:>7.2f} {produce['cpu_seconds'] / produce['messages'] * 1e6:>10.2f}"
    )
    for b in report["baselines"]:
        name = f"baseline {b['reader']}, {b['processes']} proc"
        print(
            f"{name:34s} {b['messages_per_s']:>10,d} {b['mb_per_s']:>7.1f} {b['seconds']:>7.2f} "
            f"{b['cpu_seconds'] / b['messages'] * 1e6:>10.2f} {b['messages_per_s'] / base:>7.2f}"
        )
    for s in report["stage"] + report.get("scale10", {}).get("stage", []):
        name = f"stage {s['stage_path']} -> {s['target']}{' (py-spy)' if s['profiled'] else ''} N={s['messages']:,}"
        rss = (
            f"{s['peak_rss_mb'].get('driver', 0):.0f}/{s['peak_rss_mb'].get('worker', 0):.0f}"
            f" pss {s.get('peak_pss_mb', {}).get('total', 0):.0f}"
        )
        print(
            f"{name:34s} {s['messages_per_s']:>10,d} {s['mb_per_s']:>7.1f} {s['seconds']:>7.2f} "
            f"{s['cpu_us_per_message']:>10.2f} {s['messages_per_s'] / base:>7.2f} {rss:>24s}"
        )
    ref = reference(report["baselines"])
    print(
        f"* ratio to the best baseline ({ref['reader']}, {ref['processes']} proc); target stage >= "
        f"{TARGET_RATIO}x. Load average (1 min) before/after: {report['load_average']}"
    )
    print(f"stage kernel: {report.get('stage_kernel')}; ratios: {report.get('ratios')}")
    print(
        f"ratios to raw_tuned (backoff 0, the issue's first baseline): {report.get('ratios_vs_raw_tuned')}"
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    # --debezium is True (the order row) or, from here on, the envelope variant's name.
    args.debezium = "postgres" if args.debezium_postgres else "orders" if args.debezium else ""
    if args.json is None:
        variant = (
            f"_debezium{'_postgres' if args.debezium == 'postgres' else ''}"
            if args.debezium
            else "_json"
            if args.json_values
            else "_json_schema"
            if args.json_schema_values
            else "_protobuf"
            if args.protobuf_values
            else "_raw"
            if args.raw_values
            else "_transforms"
            if args.transforms
            else ""
        )
        hour = "_hour" if args.hour_tables else ""
        transformed = "_transforms" if args.json_transforms else ""
        args.json = BENCH / "results" / f"stage{variant}{transformed}{hour}.json"
    if args.json_transforms and not args.json_values:
        raise SystemExit("--json-transforms: with --json-values")
    if args.json_transforms:
        os.environ.setdefault(JSON_HMAC_ENV, "bench-hmac-key")  # read where the stage runs
    if args.hour_tables and args.debezium:
        raise SystemExit("--hour-tables: a keyed topic's tables stay DAY (docs/architecture.md)")
    # say() prints the bench's progress; the package's INFO lines (one per range) stay off.
    setup_logging(
        args.verbose, fmt="%(levelname)s %(name)s: %(message)s", ours_from=logging.WARNING
    )
    services = stack.build(SERVICES)
    started = [s for s in services if s.pid() is None]
    if started:
        say(f"starting local stack services: {', '.join(s.name for s in started)}")
    stack.up_services(services)
    bench = Bench(args)
    load_before = [round(x, 2) for x in os.getloadavg()]
    report: dict = {"generated_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
                    "machine": {**machine_facts(), "disk_write_mb_per_s": disk_write_mb_per_s()},
                    # Started here, so children of this process: left out of the memory and
                    # CPU figures all the same (Bench.service_pids).
                    "services_started_by_bench": [s.name for s in started]}  # fmt: skip
    try:
        data = bench.backlog(args.messages)
        report["config"] = {
            "messages": args.messages, "partitions": PARTITIONS, "range_size": args.range_size,
            "schema_fields": len(SCHEMA["fields"]), "key_bytes": kb.VALUE_KEY_BYTES,
            "mean_value_bytes": round(data["produce"]["value_bytes"] / args.messages, 1),
            "compression": args.compression, "spark_master": "local[2]", "file_codec": args.file_codec,
            "format": ("debezium" if args.debezium == "orders" else "debezium_postgres")
                      if args.debezium else "json" if args.json_values
                      else "json_schema" if args.json_schema_values
                      else "protobuf" if args.protobuf_values
                      else "raw" if args.raw_values else "avro",
            "partitioning": "hour" if args.hour_tables else "day",
            "transforms": TRANSFORMS if args.transforms
                          else JSON_TRANSFORMS if args.json_transforms else [],
        }  # fmt: skip
        report["produce"] = data["produce"]
        report["baselines"] = bench.baselines(data)
        if args.breakdown and not (
            args.debezium
            or args.json_values
            or args.json_schema_values
            or args.protobuf_values
            or args.raw_values
            or args.transforms
        ):  # the breakdown times the append path's steps
            say(f"per-message steps of a stage task over {args.breakdown:,} messages")
            report["breakdown_cpu_us_per_message"] = breakdown(
                bench.context(data, "local"), SCHEMA, args.breakdown
            )
        paths = [True] if args.native_only else [True, False] if KERNEL.available else [False]
        if args.native_only and not KERNEL.available:
            raise SystemExit("--native-only: the native stage kernel is not built")
        report["stage_kernel"] = str(KERNEL)
        report["stage"] = [
            bench.stage(data, target, native=native)
            for target in ("local", "gcs")
            for native in paths
        ]
        report["spark_start_seconds"] = bench.spark_start_seconds
        if args.profile:
            out = args.json.parent / "stage_profile.txt"
            report["stage"].append(bench.stage(data, "local", profile=out, native=paths[0]))
            report["profile"] = {"raw": str(out), **summarize(out)}
        if args.scale10:
            big = bench.backlog(10 * args.messages)
            report["scale10"] = {
                "messages": 10 * args.messages,
                "produce": big["produce"],
                "stage": [bench.stage(big, target, native=paths[0]) for target in ("local", "gcs")],
            }
        ref = reference(report["baselines"])
        report["reference_baseline"] = f"{ref['reader']}_{ref['processes']}p"
        for row in report["stage"] + report.get("scale10", {}).get("stage", []):
            row["ratio_to_baseline"] = ratios(row, report["baselines"])
        report["ratios"] = headline_ratios(report["stage"], ref)
        # Against the tuned consumer the target was set with (fetch.queue.backoff.ms
        # 0, whose broker thread spins): for comparison with figures from before the stage
        # consumer found its own tuning, which made the plain consumer twice as fast too.
        spinning = max(
            (b for b in report["baselines"] if b["reader"] == "raw_tuned"),
            key=lambda b: b["messages_per_s"],
        )
        report["ratios_vs_raw_tuned"] = headline_ratios(report["stage"], spinning)
    finally:
        report["load_average"] = {
            "before": load_before,
            "after": [round(x, 2) for x in os.getloadavg()],
        }
        bench.close()
        if started:
            stack.down_services([s for s in started if s.pid() is not None])
    print_table(report)
    if "breakdown_cpu_us_per_message" in report:
        steps = dict(report["breakdown_cpu_us_per_message"])
        print(
            f"\nstage task per-message steps, each alone over {steps.pop('messages'):,} messages "
            "(CPU µs/message):"
        )
        phases = steps.pop("kernel phases", None)
        for name, us in steps.items():
            print(f"  {us:>8.2f}  {name}")
        if phases:
            print("\nthe native kernel path by phase, one partition's range (CPU µs/message):")
            for name, us in phases.items():
                print(f"  {us:>8.2f}  {name}")
    if "profile" in report:
        print("\nprofile of the Python workers (self time, % of samples):")
        for name, pct in report["profile"]["self_by_function"][:12]:
            print(f"  {pct:5.1f}%  {name}")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
