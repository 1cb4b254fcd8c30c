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
import gc
import io
import random
import sys
import threading

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.staging import native_kernel
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging, kernel_status
from kbqe_dagster.staging.stager import RangeStager
from kbqe_dagster_tests.staging.hourly_fuzz import (
    hour_edge_scenario,
    needs_hour_kernel,
    with_hour_tables,
)
from kbqe_dagster_tests.staging.kernel_equality import Msg, assert_same, differential_fuzz, stage
from kbqe_dagster_tests.staging.kernel_fuzz import scenario

kbqe_dagster_kernel = pytest.importorskip(
    "kbqe_dagster_kernel", reason="the native stage kernel is not built (no cargo)"
)

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
            "payload": {"eventTime": dt.datetime(2024, 9, 13, tzinfo=dt.UTC)},
            "note": None, "createdDate": dt.date(2024, 9, 13),
        })  # fmt: skip
        out.append(
            Msg(
                "orders",
                0,
                offset,
                b"\x00" + (5).to_bytes(4, "big") + body.getvalue(),
                key=b"k%d" % offset,
                headers=[("trace", b"t")],
            )
        )
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
    native = stage(
        tmp_path, pipeline(), "orders", {5: BENCH_SCHEMA}, messages, native=True, batch_size=1000
    )
    assert_same(python, native)
    assert python.result.records == 3000 and len(python.result.files) == 2
    # The kernel is taught the schema and each route when it first stops at them (the Python
    # path's decisions: the registry's schema, the router's destination), then stages every
    # message itself: the Python path never stages one, so it never compiles its probe.
    assert native.kernel_messages == 3000
    assert native.handbacks == {}


UUID_SPELLINGS = [
    "0b7e1c52-6a5d-4a6e-9f1e-3d2c1b0a9f8e",  # canonical: the kernel stages it
    "0B7E1C52-6A5D-4A6E-9F1E-3D2C1B0A9F8E",  # upper case: canonical too
    "0b7e1c526a5d4a6e9f1e3d2c1b0a9f8e",  # no dashes: uuid.UUID accepts it, the Python path decides
    "{0b7e1c52-6a5d-4a6e-9f1e-3d2c1b0a9f8e}",
    "urn:uuid:0b7e1c52-6a5d-4a6e-9f1e-3d2c1b0a9f8e",
    "0b7e1c52-6a5d-4a6e-9f1e-3d2c1b0a9f8g",  # not hex: a dead letter
    "0b7e1c5-26a5d-4a6e-9f1e-3d2c1b0a9f8e",  # a dash out of place
    "0b7e1c52-6a5d-4a6e-9f1e-3d2c1b0a9f8",  # one digit short
    "0b7e1c52-6a5d-4a6e-9f1e-3d2c1b0a9f8ee",  # one digit too many
    "",
]


def test_every_uuid_spelling_gets_the_python_paths_verdict(tmp_path):
    """The kernel stages canonical uuids itself and hands every other spelling back."""
    parsed = fastavro.parse_schema(BENCH_SCHEMA)
    template = orders(1)[0]
    messages = []
    for offset, spelling in enumerate(UUID_SPELLINGS * 3):
        body = io.BytesIO()
        record = fastavro.schemaless_reader(io.BytesIO(template.value()[5:]), parsed)
        fastavro.schemaless_writer(
            body, parsed, {**record, "eventId": spelling, "tableName": "orders"}
        )
        messages.append(
            Msg("orders", 0, offset, b"\x00" + (5).to_bytes(4, "big") + body.getvalue())
        )
    python = stage(tmp_path, pipeline(), "orders", {5: BENCH_SCHEMA}, messages, native=False)
    native = stage(
        tmp_path, pipeline(), "orders", {5: BENCH_SCHEMA}, messages, native=True, batch_size=1000
    )
    assert_same(python, native)
    assert native.kernel_messages >= 2 * 3 - 2  # both canonical spellings, after learning
    assert python.result.dead_letters  # the bad spellings are dead letters, on both paths


def test_differential_fuzz(tmp_path_factory, pytestconfig):
    """Seeded random scenarios, 400 messages each: identical commits on both paths."""
    tally = differential_fuzz(
        "avro",
        "fuzz.events",
        scenario,
        pytestconfig,
        tmp_path_factory,
        schemas_of=lambda case: case.schemas,
    )
    # Most messages are adversarial (bad bodies, frames, routes, event times: the Python path's
    # verdicts); of the records that stage, the kernel must have staged most.
    assert tally.share > 0.5, "the kernel staged too few records to prove anything"


@needs_hour_kernel
def test_differential_fuzz_with_hour_tables(tmp_path_factory, pytestconfig):
    """The same scenarios with some of their tables HOUR-partitioned: the kernel writes those
    records' event hour column and counts their hours exactly as the Python path does."""
    tally = differential_fuzz(
        "avrohour",
        "fuzz.events",
        with_hour_tables(scenario),
        pytestconfig,
        tmp_path_factory,
        schemas_of=lambda case: case.schemas,
    )
    assert tally.share > 0.5, "the kernel staged too few records to prove anything"


@needs_hour_kernel
def test_differential_fuzz_of_event_times_on_hour_and_day_edges(tmp_path_factory, pytestconfig):
    """Event times on and next to hour and day boundaries, in every kind of value, routed to
    DAY and HOUR tables of one topic: identical commits, and the kernel stages most."""
    tally = differential_fuzz(
        "avroedge",
        "fuzz.events",
        hour_edge_scenario,
        pytestconfig,
        tmp_path_factory,
        schemas_of=lambda case: case.schemas,
    )
    assert tally.share > 0.7, "the kernel staged too few records to prove anything"


def test_the_switch_forces_the_python_path(monkeypatch):
    monkeypatch.setenv(native_kernel.SWITCH, "off")
    assert kernel_status().path == "python"
    assert "KBQE_STAGE_KERNEL=off" in str(kernel_status())
    monkeypatch.delenv(native_kernel.SWITCH)
    assert kernel_status().path == "native"


def test_a_kernel_made_on_one_thread_is_dropped_cleanly_on_another(tmp_path, monkeypatch):
    """Stage tasks' objects may be collected on another thread than the one that made them;
    dropping a kernel there must neither raise nor leak it."""
    raised = []
    monkeypatch.setattr(sys, "unraisablehook", raised.append)
    ctx = StageContext(
        KafkaSettings("127.0.0.1:9"),
        RegistrySettings("http://127.0.0.1:9"),
        StagingLocation(str(tmp_path / "staging")),
        pipeline(),
        "orders",
        native_kernel=True,
    )
    made = []
    worker = threading.Thread(
        target=lambda: made.append(
            NativeStaging.for_stager(RangeStager(ctx, OffsetRange("orders", 0, 0, 10), tmp_path))
        )
    )
    worker.start()
    worker.join()
    assert made[0] is not None and made[0].kernel.messages == 0
    made.clear()
    gc.collect()
    assert raised == []


def test_messages_past_the_range_are_never_staged(tmp_path):
    messages = orders(300)
    python = stage(
        tmp_path, pipeline(), "orders", {5: BENCH_SCHEMA}, messages, native=False, end_exclusive=170
    )
    native = stage(tmp_path, pipeline(), "orders", {5: BENCH_SCHEMA}, messages, native=True,
                   batch_size=100, end_exclusive=170)  # fmt: skip
    assert_same(python, native)
    assert native.result.committed_last == 169 and native.result.messages == 170


def _stager(tmp_path, config, **context):
    from kbqe_dagster.core.protocol.offsets import OffsetRange
    from kbqe_dagster.resources.kafka.clients import KafkaSettings
    from kbqe_dagster.resources.schema_registry import RegistrySettings
    from kbqe_dagster.resources.staging_store import StagingLocation
    from kbqe_dagster.stager_registry import stager_class
    from kbqe_dagster.staging.context import StageContext

    ctx = StageContext(
        KafkaSettings("127.0.0.1:9"),
        RegistrySettings("http://127.0.0.1:9"),
        StagingLocation(str(tmp_path)),
        config,
        "orders",
        **context,
    )
    return stager_class(ctx)(ctx, OffsetRange("orders", 0, 0, 10), tmp_path)


def test_what_stays_on_the_python_path(tmp_path):
    assert NativeStaging.for_stager(_stager(tmp_path, pipeline())) is not None
    # The run's switch (KBQE_STAGE_KERNEL where the run starts).
    assert NativeStaging.for_stager(_stager(tmp_path, pipeline(), native_kernel=False)) is None
    # A user's routing function.
    function = pipeline(
        routing={
            "mode": "function",
            "function": "kbqe_dagster_tests.staging.test_native_kernel:route",
        }
    )
    assert NativeStaging.for_stager(_stager(tmp_path, function)) is None
    # Stagers of their own: JSON values and keyed topics take the kernel through their own
    # drivers (their native_driver: formats/json_stage.py, keyed/native_stage.py), unless
    # transforms compute values (renames, drops, constants, parts of the message, masks,
    # numeric timestamps and exact casts are the JSON kernel's: test_json_kernel.py).
    json_topic = pipeline(format="json", schema=BENCH_SCHEMA)
    driver = NativeStaging.for_stager(_stager(tmp_path, json_topic))
    if hasattr(kbqe_dagster_kernel.StageKernel, "add_json_schema"):
        assert type(driver).__name__ == "JsonKernelStaging"
    else:  # a kernel built before it staged JSON: the Python path
        assert driver is None
    transformed = pipeline(
        format="json",
        schema=BENCH_SCHEMA,
        transforms=[{"compute": "n", "expression": "1", "type": "long"}],
    )
    assert NativeStaging.for_stager(_stager(tmp_path, transformed)) is None
    keyed = pipeline(
        format="debezium",
        keyed={"key": ["id"]},
        routing={"mode": "static", "dataset": "acme_sales", "table": "orders"},
    )
    driver = NativeStaging.for_stager(_stager(tmp_path, keyed))
    if hasattr(kbqe_dagster_kernel.StageKernel, "count_tombstones"):
        assert type(driver).__name__ == "KeyedNativeStaging"
    else:  # a kernel built before it staged keyed topics: the Python path
        assert driver is None


def route(message):  # the routing function of the test above
    return ("acme_sales", "orders")


def with_field(field: dict, values: list) -> tuple[dict, list[Msg]]:
    """BENCH_SCHEMA plus ``field``, and the bench rows each given one of ``values`` for it."""
    schema = {**BENCH_SCHEMA, "fields": BENCH_SCHEMA["fields"] + [field]}
    parsed = fastavro.parse_schema(schema)
    messages = []
    for offset, msg in enumerate(orders(len(values))):
        record = fastavro.schemaless_reader(
            io.BytesIO(msg.value()[5:]), fastavro.parse_schema(BENCH_SCHEMA)
        )
        body = io.BytesIO()
        fastavro.schemaless_writer(body, parsed, {**record, field["name"]: values[offset]})
        messages.append(
            Msg("orders", 0, offset, b"\x00" + (5).to_bytes(4, "big") + body.getvalue())
        )
    return schema, messages


def test_a_schema_the_kernel_does_not_implement_stays_on_the_python_path(tmp_path):
    # Event time read from an array: not a value the kernel reads.
    schema, messages = with_field({"name": "at", "type": {"type": "array", "items": "long"}},
                                  [[1_726_238_205]] * 50)  # fmt: skip
    config = pipeline(event_time={"fields": ["at", "eventTime"]})
    python = stage(tmp_path, config, "orders", {5: schema}, messages, native=False)
    native = stage(tmp_path, config, "orders", {5: schema}, messages, native=True)
    assert_same(python, native)
    assert native.kernel_messages == 0 and native.handbacks == {"schema_unknown": 50}


@pytest.mark.parametrize(
    ("logical", "base", "hour"), [("time-millis", "int", 3_600_000), ("time-micros", "long", 3_600_000_000)]
)  # fmt: skip
def test_times_of_day_are_checked_natively_as_fastavro_reads_them(tmp_path, logical, base, hour):
    """fastavro's time readers take the hour as ``int(value / hour)``, truncated toward zero:
    values down to just above minus one hour are accepted, 24:00 and past are not (the probe
    dead-letters those; the kernel hands them back)."""
    edges = [-hour - 1, -hour, -hour + 1, -1, 0, 1, 24 * hour - 1, 24 * hour, 2**31 - 1, -(2**31)]
    schema, messages = with_field({"name": "at", "type": {"type": base, "logicalType": logical}},
                                  edges * 3)  # fmt: skip
    python = stage(tmp_path, pipeline(), "orders", {5: schema}, messages, native=False)
    native = stage(tmp_path, pipeline(), "orders", {5: schema}, messages, native=True)
    assert_same(python, native)
    valid = [v for v in edges if -hour < v < 24 * hour]
    assert python.result.records == native.kernel_messages == 3 * len(valid)
    assert sum(python.result.dead_letters.values()) == 3 * (len(edges) - len(valid))


def test_a_panic_in_the_kernel_fails_the_range_naming_where_instead_of_aborting(tmp_path):
    import kbqe_dagster_kernel

    from kbqe_dagster.staging.native_kernel import StageKernelError
    from kbqe_dagster_tests.staging.kernel_equality import ListReader

    with pytest.raises(BaseException) as raised:
        kbqe_dagster_kernel._panic_for_tests()
    assert type(raised.value).__name__ == "PanicException"  # and this interpreter lives on

    class Panicking:
        messages = 0

        def run(self, *args):
            kbqe_dagster_kernel._panic_for_tests()

    driver = NativeStaging.for_stager(_stager(tmp_path, pipeline()))
    driver.kernel = Panicking()
    with pytest.raises(
        StageKernelError, match=r"orders\[0\] near offset 0: .*KBQE_STAGE_KERNEL=off"
    ):
        driver.stage(ListReader(orders(3), 0, 3))
