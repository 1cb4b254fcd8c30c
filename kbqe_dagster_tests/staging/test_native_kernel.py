"""The native stage kernel stages exactly what the Python path stages.

The Python path (``RangeStager.add``) is the reference. Every test here stages the same
messages both ways and requires identical committed files — avro files, dead-letter files
and done files, byte for byte — and identical counts; and it requires that the kernel did
stage messages itself, so that equality is not the trivial equality of a kernel that hands
everything back.

The seeded differential fuzz runs a fast slice by default; ``--kernel-fuzz-cases 1000000``
runs a million messages (docs/architecture.md, "Two stage paths").
"""

from __future__ import annotations

import datetime as dt
import io
import random

import fastavro
import pytest

from kbqe_dagster.core.config import parse_pipeline_config
from kbqe_dagster.staging import native_kernel
from kbqe_dagster.staging.native_kernel import NativeStaging, kernel_status
from kbqe_dagster_tests.staging.kernel_equality import Msg, assert_same, stage
from kbqe_dagster_tests.staging.kernel_fuzz import scenario

pytest.importorskip("kbqe_dagster_kernel", reason="the native stage kernel is not built (no cargo)")

BENCH_SCHEMA = {
    "type": "record", "name": "OrderEvent", "namespace": "com.acme.events",
    "fields": [
        {"name": "eventId", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "eventTime", "type": "string"},
        {"name": "datasetName", "type": "string"},
        {"name": "tableName", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "attributes", "type": {"type": "map", "values": "string"}},
        {"name": "payload", "type": {"type": "record", "name": "Payload", "fields": [
            {"name": "eventTime", "type": {"type": "long", "logicalType": "timestamp-millis"}}]}},
        {"name": "note", "type": ["null", "string"]},
        {"name": "createdDate", "type": {"type": "int", "logicalType": "date"}},
    ],
}  # fmt: skip


def orders(count: int, seed: int = 1) -> list[Msg]:
    rng = random.Random(seed)
    parsed = fastavro.parse_schema(BENCH_SCHEMA)
    out = []
    for offset in range(count):
        body = io.BytesIO()
        fastavro.schemaless_writer(body, parsed, {
            "eventId": "0b7e1c52-6a5d-4a6e-9f1e-3d2c1b0a9f8e",
            "eventTime": f"2024-09-{rng.randint(1, 30):02d}T14:36:45.123+02:00[Europe/Paris]",
            "datasetName": "acme_sales", "tableName": rng.choice(["orders", "refunds"]),
            "amount": rng.random(), "tags": ["web"], "attributes": {"c": "x"},
            "payload": {"eventTime": dt.datetime(2024, 9, 13, tzinfo=dt.timezone.utc)},
            "note": None, "createdDate": dt.date(2024, 9, 13),
        })  # fmt: skip
        out.append(Msg("orders", 0, offset, b"\x00" + (5).to_bytes(4, "big") + body.getvalue(),
                       key=b"k%d" % offset, headers=[("trace", b"t")]))
    return out


def pipeline(**topic):
    return parse_pipeline_config({
        "version": 1,
        "topics": [{"name": "orders", "routing": {"mode": "fields"},
                    "event_time": {"fields": ["eventTime"]}, **topic}],
        "enrichment": {"key_column": "_kafka_key", "headers_column": "_kafka_headers"},
        "allowed_destinations": ["acme_sales.*"],
    }, source="test")  # fmt: skip


def test_the_benchmark_row_is_staged_by_the_kernel_into_identical_files(tmp_path):
    messages = orders(3000)
    python = stage(tmp_path, pipeline(), "orders", {5: BENCH_SCHEMA}, messages, native=False)
    native = stage(tmp_path, pipeline(), "orders", {5: BENCH_SCHEMA}, messages, native=True, batch_size=1000)
    assert_same(python, native)
    assert python.result.records == 3000 and len(python.result.files) == 2
    # The first message of the schema and of each route teaches the kernel; it stages the rest.
    assert native.kernel_messages == 3000 - 3
    assert native.handbacks == {"schema_unknown": 1, "route_unknown": 2}


def fuzz_seeds(config) -> list[int]:
    cases = config.getoption("--kernel-fuzz-cases")
    return list(range(max(1, cases // 400)))


def test_differential_fuzz(tmp_path_factory, pytestconfig):
    """Seeded random scenarios, 400 messages each: identical commits on both paths."""
    seeds = fuzz_seeds(pytestconfig)
    staged_natively = records = total = 0
    for seed in seeds:
        case = scenario(seed, 400)
        tmp = tmp_path_factory.mktemp(f"fuzz{seed}")
        python = stage(tmp, case.pipeline, "fuzz.events", case.schemas, case.messages, native=False)
        native = stage(tmp, case.pipeline, "fuzz.events", case.schemas, case.messages, native=True,
                       batch_size=random.Random(seed).choice([1, 7, 64, 1000]))  # fmt: skip
        assert_same(python, native, f"seed {seed}")
        staged_natively += native.kernel_messages
        records += python.result.records if python.result else 0
        total += len(case.messages)
    print(f"kernel fuzz: {len(seeds)} scenarios, {total} messages, {records} records staged, "
          f"{staged_natively} of them by the kernel")
    # Most messages are adversarial (bad bodies, frames, routes, event times: the Python path's
    # verdicts); of the records that stage, the kernel must have staged most.
    assert staged_natively > records * 0.5, "the kernel staged too few records to prove anything"


def test_the_switch_forces_the_python_path(monkeypatch):
    monkeypatch.setenv(native_kernel.SWITCH, "off")
    assert kernel_status().path == "python"
    assert "KBQE_STAGE_KERNEL=off" in str(kernel_status())
    monkeypatch.delenv(native_kernel.SWITCH)
    assert kernel_status().path == "native"
