"""Micro-benchmark of the stage job's per-record hot path (DESIGN.md §5).

Builds N Confluent-style Avro bodies (~250 bytes, a 16-field order event with nested record,
array, map, union, enum and logical types) in memory, then measures records/s and MB/s of:

* the slow way — fastavro decode + re-encode with the enrichment fields (the baseline);
* fastavro validation alone (``schemaless_reader`` + position check), and cavro if installed;
* the probe: fast path (regex) and exact decoder only (what non-matching bodies cost);
* the enrichment prefix encoder;
* container append with snappy to a file on disk;
* the combined per-record path: probe + enrichment + append.

Rates are computed from CPU time of this process (``time.process_time``), which stays
meaningful on a shared, loaded machine; wall-clock rates are reported too. Each stage runs
``--repeat`` times and keeps its best. The slow baselines run on ``--slow-sample`` records.

    .venv/bin/python bench/bench_hot_path.py [-n 1000000] [--repeat 3]

Prints a table and writes ``bench/results/hot_path.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import io
import json
import os
import platform
import random
import re
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import fastavro

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kbqe_dagster.core.record.enrichment import (  # noqa: E402
    EnrichmentConfig,
    EnrichmentEncoder,
    extended_schema,
)
from kbqe_dagster.staging.avro_container import AvroContainerWriter  # noqa: E402
from kbqe_dagster.staging.probe.record_probe import RecordProbe  # noqa: E402

UTC = dt.UTC
SCHEMA = {
    "type": "record", "name": "OrderEvent", "namespace": "com.acme.events",
    "fields": [
        {"name": "eventId", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "eventTime", "type": "string"},
        {"name": "datasetName", "type": "string"},
        {"name": "tableName", "type": "string"},
        {"name": "userId", "type": "long"},
        {"name": "sessionId", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "currency", "type": {"type": "enum", "name": "Currency", "symbols": ["EUR", "USD", "GBP", "JPY"]}},
        {"name": "quantity", "type": "int"},
        {"name": "isTest", "type": "boolean"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attributes", "type": {"type": "map", "values": "string"}},
        {"name": "payload", "type": {"type": "record", "name": "Payload", "fields": [
            {"name": "eventTime", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "source", "type": "string"},
            {"name": "version", "type": "int"}]}},
        {"name": "note", "type": ["null", "string"], "default": None},
        {"name": "createdDate", "type": {"type": "int", "logicalType": "date"}},
        {"name": "ip", "type": "string"},
    ],
}  # fmt: skip
WANTED = (
    "datasetName",
    "tableName",
    "eventTime",
)  # routing fields + event time, as the stage job reads
TOPIC, PARTITION, DAY, TIMESTAMP_MS = "com.acme.events", 3, 19979, 1_726_238_205_123


def make_record(rng: random.Random) -> dict[str, Any]:
    return {
        "eventId": str(uuid.UUID(int=rng.getrandbits(128))),
        "eventTime": "2024-09-13T14:36:%02d.%03d+02:00[Europe/Paris]" % (rng.randrange(60), rng.randrange(1000)),
        "datasetName": "sales",
        "tableName": rng.choice(["orders", "refunds", "carts"]),
        "userId": rng.randrange(1, 10**12),
        "sessionId": f"sess-{rng.getrandbits(64):016x}",
        "amount": round(rng.random() * 1000, 2),
        "currency": rng.choice(["EUR", "USD", "GBP", "JPY"]),
        "quantity": rng.randrange(1, 500),
        "isTest": rng.random() < 0.1,
        "tags": rng.sample(["web", "mobile", "promo", "gift", "b2b", "retry"], 3),
        "attributes": {"channel": rng.choice(["email", "ads", "direct"]), "campaign": "c-%d" % rng.randrange(1000)},
        "payload": {"eventTime": dt.datetime(2024, 9, 13, 12, 36, rng.randrange(60), tzinfo=UTC),
                    "source": "checkout-service", "version": 3},
        "note": None if rng.random() < 0.7 else "customer asked for gift wrap",
        "createdDate": dt.date(2024, 9, 13),
        "ip": "10.%d.%d.%d" % (rng.randrange(256), rng.randrange(256), rng.randrange(256)),
    }  # fmt: skip


def build_bodies(count: int, unique: int, seed: int) -> list[bytes]:
    """``count`` bodies cycling over ``unique`` distinct ones (encoding 1M with fastavro
    would take longer than the benchmark itself)."""
    rng = random.Random(seed)
    parsed = fastavro.parse_schema(SCHEMA)
    distinct = []
    for _ in range(min(unique, count)):
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, make_record(rng))
        distinct.append(out.getvalue())
    return [distinct[i % len(distinct)] for i in range(count)]


def measure(
    name: str, run: Callable[[Sequence[bytes]], int], bodies: Sequence[bytes], repeat: int
) -> dict[str, Any]:
    """Best of ``repeat`` runs; ``run`` returns the bytes it processed."""
    best_cpu = best_wall = float("inf")
    processed = 0
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        processed = run(bodies)
        best_cpu = min(best_cpu, time.process_time() - cpu)
        best_wall = min(best_wall, time.perf_counter() - wall)
    n = len(bodies)
    return {
        "stage": name, "records": n, "cpu_seconds": round(best_cpu, 3), "wall_seconds": round(best_wall, 3),
        "records_per_s": round(n / best_cpu), "mb_per_s": round(processed / best_cpu / 1e6, 1),
        "wall_records_per_s": round(n / best_wall), "us_per_record": round(best_cpu / n * 1e6, 2),
    }  # fmt: skip


def stages(workdir: Path) -> dict[str, Callable[[Sequence[bytes]], int]]:
    config = EnrichmentConfig()
    extended = extended_schema(SCHEMA, config)
    parsed, parsed_extended = fastavro.parse_schema(SCHEMA), fastavro.parse_schema(extended)
    enrichment_values = {
        "_event_date": dt.date(2024, 9, 13), "_kafka_topic": TOPIC, "_kafka_partition": PARTITION,
        "_kafka_offset": 0, "_kafka_timestamp": dt.datetime(2024, 9, 13, 14, 36, 45, tzinfo=UTC),
    }  # fmt: skip
    fast = RecordProbe(SCHEMA, WANTED)
    exact = RecordProbe(SCHEMA, WANTED, fast_path=False)
    reader, writer = fastavro.schemaless_reader, fastavro.schemaless_writer

    def fastavro_roundtrip(bodies: Sequence[bytes]) -> int:
        out = io.BytesIO()
        for offset, body in enumerate(bodies):
            record = reader(io.BytesIO(body), parsed)
            record.update(enrichment_values, _kafka_offset=offset)
            writer(out, parsed_extended, record)
        return sum(map(len, bodies))

    def fastavro_validate(bodies: Sequence[bytes]) -> int:
        for body in bodies:
            stream = io.BytesIO(body)
            reader(stream, parsed)
            if stream.tell() != len(body):
                raise AssertionError("trailing bytes")
        return sum(map(len, bodies))

    def probe_with(probe: RecordProbe) -> Callable[[Sequence[bytes]], int]:
        def run(bodies: Sequence[bytes]) -> int:
            call = probe.probe
            for body in bodies:
                call(body)
            return sum(map(len, bodies))

        return run

    def enrich(bodies: Sequence[bytes]) -> int:
        encode = EnrichmentEncoder(config, TOPIC, PARTITION).encode
        size = 0
        for offset in range(len(bodies)):
            size += len(encode(DAY, 10**9 + offset, TIMESTAMP_MS + offset))
        return size

    prefix = EnrichmentEncoder(config, TOPIC, PARTITION).encode(DAY, 10**9, TIMESTAMP_MS)

    def append(bodies: Sequence[bytes]) -> int:
        with open(workdir / "append.avro", "wb") as sink:
            container = AvroContainerWriter(sink, extended, "snappy")
            add = container.append
            for body in bodies:
                add(prefix, body)
            return container.close().record_bytes

    def combined(bodies: Sequence[bytes]) -> int:
        encode = EnrichmentEncoder(config, TOPIC, PARTITION).encode
        call = fast.probe
        with open(workdir / "combined.avro", "wb") as sink:
            container = AvroContainerWriter(sink, extended, "snappy")
            add = container.append
            for offset, body in enumerate(bodies):
                call(body)
                add(encode(DAY, 10**9 + offset, TIMESTAMP_MS + offset), body)
            return container.close().record_bytes

    out: dict[str, Callable[[Sequence[bytes]], int]] = {
        "fastavro decode + re-encode (baseline)": fastavro_roundtrip,
        "fastavro validate (reader + tell)": fastavro_validate,
    }
    try:
        import cavro  # optional: a Cython Avro codec, measured when installed

        schema = cavro.Schema(SCHEMA, record_decodes_to_dict=True)
        out["cavro decode (no length check)"] = lambda bodies: (
            [schema.binary_decode(b) for b in bodies] and sum(map(len, bodies))
        )
    except ImportError:
        pass
    out.update({
        "probe (fast path)": probe_with(fast),
        "probe (exact decoder only)": probe_with(exact),
        "enrichment encode": enrich,
        "container append (snappy)": append,
        "combined: probe + enrich + append": combined,
    })  # fmt: skip
    return out


SLOW = ("fastavro", "cavro", "exact")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", "--records", type=int, default=1_000_000)
    parser.add_argument("--unique", type=int, default=50_000, help="distinct bodies to cycle over")
    parser.add_argument(
        "--slow-sample", type=int, default=100_000, help="records for the slow stages"
    )
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--output", type=Path, default=ROOT / "bench" / "results" / "hot_path.json")
    args = parser.parse_args(argv)

    load_before = os.getloadavg()
    bodies = build_bodies(args.records, args.unique, args.seed)
    sizes = [len(b) for b in bodies[: args.unique]]
    re.purge()  # time the probe's compilation without the process-wide pattern cache
    started = time.perf_counter()
    probe = RecordProbe(SCHEMA, WANTED)
    build_ms = (time.perf_counter() - started) * 1000
    hits = sum(probe._fast(b) is not None for b in bodies[: args.unique])  # noqa: SLF001
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for name, run in stages(Path(tmp)).items():
            sample = bodies[: args.slow_sample] if any(word in name for word in SLOW) else bodies
            results.append(measure(name, run, sample, args.repeat))
            print(f"  measured {name}", file=sys.stderr, flush=True)

    header = f"{'stage':40s} {'records':>9s} {'rec/s (cpu)':>12s} {'µs/rec':>7s} {'MB/s':>7s} {'rec/s (wall)':>13s}"
    print(header)
    print("-" * len(header))
    for r in results:
        print(f"{r['stage']:40s} {r['records']:>9,d} {r['records_per_s']:>12,d} {r['us_per_record']:>7.2f} "
              f"{r['mb_per_s']:>7.1f} {r['wall_records_per_s']:>13,d}")  # fmt: skip
    report = {
        "generated_at": dt.datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": {"python": platform.python_version(), "platform": platform.platform(),
                    "cpus": os.cpu_count(), "load_average_before": [round(x, 2) for x in load_before],
                    "load_average_after": [round(x, 2) for x in os.getloadavg()]},
        "data": {"records": len(bodies), "distinct_bodies": min(args.unique, len(bodies)),
                 "mean_body_bytes": round(sum(sizes) / len(sizes), 1), "fields": len(SCHEMA["fields"]),
                 "wanted_paths": list(WANTED), "fast_path_hit_rate": round(hits / len(sizes), 4),
                 "probe_build_ms": round(build_ms, 1),
                 "fastavro_version": fastavro.__version__},
        "method": "best of --repeat runs; rates from process CPU time (time.process_time), wall too",
        "results": results,
    }  # fmt: skip
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(report, indent=2) + "\n")
    print(f"\nwritten {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
