"""Where the storage_write path's time per row goes (bench/bench_latency.py's ``breakdown``).

The same backlog (``count`` messages of the latency bench's schema, round-robin over
``partitions``) is staged twice, one range per partition, by ``stage_range`` in this process
(no Spark: one core, as one Spark task uses it), with the stage context the stage loop builds
(``stager_registry.stage_context`` and the Storage Write delivery sink):

1. ``ours``: the sink's writer replaced at the client boundary by :class:`NullWriter`, which
   answers every AppendRows as appended at its offset without sending it. What is left is
   our own path: read, decode, stage the Avro record files, encode them as proto rows, cut
   requests, intents and done files on fake GCS. CPU µs per row of this process;
2. ``emulator``: the real writer against the local BigQuery emulator. CPU µs per row of this
   process (ours plus the gRPC client's serialization) and of the emulator's process (its
   ``/proc/<pid>/stat``: AppendRows decode, Arrow, the DuckDB insert), both over the same
   rows.

The two runs use tables of their own, so the second appends to a fresh table as the first
did. ``us_per_row`` divided into 1e6 is the rows a second one core sustains at that stage:
the ceiling of a path whose every row passes through it (the emulator is one process whose
Python runs one thread at a time, whatever the partitions).
"""

from __future__ import annotations

import datetime as dt
import os
import struct
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.resources.bigquery.storage_write import AppendOutcome, StreamState

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


@dataclass
class NullWriter:
    """A Storage Write client that sends nothing: every append is answered ``appended`` at
    the stream's next offset (a COMMITTED stream's answer), so the sink does all its own work
    and none of the API's."""

    next_offset: dict[str, int] = field(default_factory=dict)
    rows: int = 0

    def create_stream(self, dataset: str, table: str, kind: str = "committed") -> str:
        name = f"projects/null/datasets/{dataset}/tables/{table}/streams/{len(self.next_offset)}"
        self.next_offset[name] = 0
        return name

    def append(self, stream: str, rows: Any, offset: int | None) -> AppendOutcome:
        at = self.next_offset[stream]
        if offset is not None and offset != at:
            kind = "already_exists" if offset < at else "out_of_range"
            return AppendOutcome(kind, f"offset {offset}, next expected {at}")
        count = len(rows.rows)
        self.next_offset[stream] = at + count
        self.rows += count
        return AppendOutcome("appended", offset=at)

    def finalize(self, stream: str) -> int:
        return self.next_offset[stream]

    def commit(self, dataset: str, table: str, streams: Any) -> None:
        return None

    def stream_state(self, stream: str) -> StreamState | None:
        if stream not in self.next_offset:
            return None
        return StreamState(stream, "committed", dt.datetime.now(dt.UTC), None)

    def release(self, stream: str) -> None:
        return None

    def close(self) -> None:
        return None


_NULL = NullWriter()


@dataclass(frozen=True)
class NullWriterSettings:
    """Picklable settings whose :meth:`writer` is this process's :class:`NullWriter`."""

    def writer(self) -> NullWriter:
        return _NULL


def process_cpu_s(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` (all its threads) so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def emulator_pid() -> int | None:
    """The local stack's BigQuery emulator process (its pid file), when it runs here."""
    from kbqe_dagster.localstack import stack

    for service in stack.build():
        if service.name == "bigquery":
            return service.pid()
    return None


def produce_backlog(bootstrap: str, topic: str, count: int, partitions: int, schema_id: int):
    """``count`` messages of the latency bench's schema, round-robin over the partitions."""
    from _latency_producer import encode_body
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 50,
                         "queue.buffering.max.messages": 1_000_000})  # fmt: skip
    now = int(time.time() * 1000)
    for i in range(count):
        body = encode_body(i, now, b"breakdown", struct.pack("<d", i * 0.5))
        while True:
            try:
                producer.produce(topic, encode_frame(schema_id, body), None, i % partitions)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        raise RuntimeError(f"{topic}: the breakdown's backlog was not all delivered")


def _stage_all(ctx: Any, topic: str, count: int, partitions: int) -> dict:
    """Stage every partition's messages as one range each; CPU and wall seconds of this
    process, and of the emulator's over the same time."""
    from kbqe_dagster.staging.task import stage_range

    per = [len(range(p, count, partitions)) for p in range(partitions)]
    ranges = [OffsetRange(topic, p, 0, n) for p, n in enumerate(per) if n]
    pid = emulator_pid()
    emulator_before = process_cpu_s(pid) if pid else None
    wall, cpu = time.perf_counter(), time.process_time()
    messages = 0
    for rng in ranges:
        result = stage_range(ctx, rng)
        if result.committed_last != rng.last:
            raise RuntimeError(f"breakdown: {rng} not committed whole: {result}")
        messages += rng.size
    out = {
        "messages": messages,
        "wall_s": round(time.perf_counter() - wall, 3),
        "cpu_s": round(time.process_time() - cpu, 3),
    }
    if pid and emulator_before is not None:
        out["emulator_cpu_s"] = round(process_cpu_s(pid) - emulator_before, 3)
    return out


def storage_write_breakdown(bench: Any, count: int, partitions: int = 4) -> dict:
    """Both runs over one backlog of ``count`` messages on a topic of its own (``bench``: the
    latency bench, for its endpoints, dataset and pipeline); µs per row of each stage."""
    import _kafka_bench as kb
    from _latency_producer import SCHEMA

    from kbqe_dagster.core.config.pipeline import parse_pipeline_config
    from kbqe_dagster.delivery.sink import stage_run_sink
    from kbqe_dagster.localstack.endpoints import LOCAL_PROJECT
    from kbqe_dagster.resources.environment import local_resources
    from kbqe_dagster.resources.kafka.clients import KafkaSettings
    from kbqe_dagster.resources.schema_registry import RegistrySettings
    from kbqe_dagster.resources.staging_store import StagingLocation
    from kbqe_dagster.stager_registry import stage_context

    endpoints = bench.endpoints
    topic = f"bench_latency.{bench.run_id}.breakdown"
    kb.create_topic(endpoints.kafka_bootstrap, topic, partitions)
    bench.topics.append(topic)
    schema_id = kb.register_schema(endpoints.registry_url, f"{topic}-value", SCHEMA)
    produce_backlog(endpoints.kafka_bootstrap, topic, count, partitions, schema_id)
    runs: dict[str, dict] = {}
    stores = []
    try:
        for name in ("ours", "emulator"):
            table = f"breakdown_{name}"
            raw = bench.pipeline_dict()
            raw["topics"] = [
                {"name": topic, "event_time": {"fields": ["eventTime"]},
                 "routing": {"mode": "static", "dataset": bench.dataset, "table": table}}
            ]  # fmt: skip
            raw["tables"] = {f"{bench.dataset}.{table}": {"delivery": "storage_write"}}
            config = parse_pipeline_config(raw, source=f"breakdown {name}")
            sink = stage_run_sink(config, local_resources()["bigquery"])
            if name == "ours":
                sink = replace(sink, writer=NullWriterSettings())
            staging = StagingLocation(
                f"{bench.staging_url}-breakdown-{name}", endpoints.gcs_url, LOCAL_PROJECT
            )
            stores.append(staging.open())
            ctx = stage_context(
                KafkaSettings(endpoints.kafka_bootstrap),
                RegistrySettings(endpoints.registry_url),
                staging,
                config,
                topic,
                sink=sink,
            )
            runs[name] = _stage_all(ctx, topic, count, partitions)
    finally:
        for store in stores:
            for f in store.list("") + store.list("_kbqe/"):
                store.delete(f.name)
    return summarize(runs, count, partitions)


def summarize(runs: dict[str, dict], count: int, partitions: int) -> dict:
    """µs per row: ours (the null writer's run), the client side of the real appends (the
    real run's CPU minus ours), and the emulator's (its process's CPU in the real run)."""

    def us(seconds: float | None, rows: int) -> float | None:
        return None if seconds is None or not rows else round(seconds / rows * 1e6, 1)

    ours, real = runs["ours"], runs["emulator"]
    rows = real["messages"]
    out = {
        "messages": count,
        "partitions": partitions,
        "method": "one range per partition staged by stage_range in one process (no Spark); "
        "CPU time of this process and of the emulator's (/proc/<pid>/stat)",
        "ours_us_per_row": us(ours["cpu_s"], ours["messages"]),
        "ours_wall_us_per_row": us(ours["wall_s"], ours["messages"]),
        "client_append_us_per_row": us(max(real["cpu_s"] - ours["cpu_s"], 0.0), rows),
        "emulator_us_per_row": us(real.get("emulator_cpu_s"), rows),
        "real_wall_us_per_row": us(real["wall_s"], rows),
        "runs": runs,
    }
    if out["ours_us_per_row"] and out["emulator_us_per_row"]:
        out["rows_per_core_s"] = {
            "ours": round(1e6 / out["ours_us_per_row"]),
            "emulator": round(1e6 / out["emulator_us_per_row"]),
        }
        out["dominated_by"] = (
            "emulator" if out["emulator_us_per_row"] > out["ours_us_per_row"] else "ours"
        )
    return out
