"""Confluent Avro topics with ``destinations`` on the native kernel stage exactly what the
Python path stages (formats/destination_stage.py, ``DestinationFanOut``, the reference).

The kernel (formats/avro_destination_kernel.py, kernel/src/destinations.rs) walks each body
once and builds every destination's record from its top-level field spans: the composed
transforms' drops, digits and constants, the projection's order. A message it is not certain
about goes back whole; a topic or schema it does not do stays on the Python path. Each test
stages the same messages both ways and requires identical commits; the seeded differential
fuzz (``avro_destination_fuzz``) draws random destinations over the Avro kernel's random
schemas and encodings.
"""

from __future__ import annotations

import io
from typing import Any

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.formats.avro_destination_kernel import AvroDestinationKernelStaging
from kbqe_dagster.formats.transform_stage import TransformRangeStager
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging
from kbqe_dagster_tests.formats.avro_destination_fuzz import scenario
from kbqe_dagster_tests.formats.avro_transform_fuzz import zigzag
from kbqe_dagster_tests.formats.json_fuzz import FUZZ_HMAC_ENV
from kbqe_dagster_tests.staging.hourly_fuzz import needs_hour_kernel, with_hour_tables
from kbqe_dagster_tests.staging.kernel_equality import Msg, assert_same, differential_fuzz, stage

kernel = pytest.importorskip(
    "kbqe_dagster_kernel", reason="the native stage kernel is not built (no cargo)"
)
if not hasattr(kernel.StageKernel, "add_destination_schema"):
    pytest.skip(
        "the installed kernel predates Avro destinations (make install)", allow_module_level=True
    )

TOPIC = "fix.executions"
EXECUTION, QUOTE = 5, 6

EXECUTION_SCHEMA = {
    "type": "record", "name": "ExecutionReport", "namespace": "fix",
    "fields": [
        {"name": "at", "type": "long"},
        {"name": "symbol", "type": "string"},
        {"name": "qty", "type": "long"},
        {"name": "px", "type": "double"},
        {"name": "venue", "type": ["null", "string"]},
    ],
}  # fmt: skip
QUOTE_SCHEMA = {
    "type": "record", "name": "Quote", "namespace": "fix",
    "fields": [{"name": "at", "type": "long"}, {"name": "symbol", "type": "string"}],
}  # fmt: skip
SCHEMAS = {EXECUTION: EXECUTION_SCHEMA, QUOTE: QUOTE_SCHEMA}


def pipeline(destinations: list[dict], transforms: list[dict] | None = None):
    return parse_pipeline_config({
        "version": 1,
        "topics": [{
            "name": TOPIC,
            "event_time": {"fields": ["at"], "epoch_unit": "ms"},
            "transforms": transforms or [],
            "destinations": destinations,
        }],
        "allowed_destinations": ["fix.*"],
    }, source="test")  # fmt: skip


def static(table: str, **destination: Any) -> dict:
    return {"routing": {"mode": "static", "dataset": "fix", "table": table}, **destination}


def message(offset: int, schema_id: int, record: dict) -> Msg:
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(SCHEMAS[schema_id]), record)
    return Msg(TOPIC, 0, offset, b"\x00" + schema_id.to_bytes(4, "big") + body.getvalue())


def execution(offset: int, **overrides: Any) -> Msg:
    record = {"at": 1_726_238_205_123 + offset * 3_600_000, "symbol": "ACME", "qty": 100 + offset,
              "px": 12.5, "venue": "XNYS" if offset % 2 else None, **overrides}  # fmt: skip
    return message(offset, EXECUTION, record)


def staged_both_ways(tmp_path, config, messages):
    python = stage(tmp_path, config, TOPIC, SCHEMAS, messages, native=False)
    native = stage(tmp_path, config, TOPIC, SCHEMAS, messages, native=True)
    assert_same(python, native)
    return python, native


def records(staged, table: str) -> list[dict]:
    """The records of ``table``'s avro files, without the enrichment columns."""
    out = []
    for name, data in sorted(staged.files.items()):
        if name.endswith(".avro") and f".0.fix.{table}." in name:  # topic.partition.dataset.table
            out += [{k: v for k, v in r.items() if not k.startswith("_")}
                    for r in fastavro.reader(io.BytesIO(data))]  # fmt: skip
    return out


def test_two_static_destinations_with_projections_in_different_orders(tmp_path):
    """Each table keeps its fields in its own order; every message is the kernel's."""
    config = pipeline([
        static("executions"),
        static("fills", fields=["px", "symbol", "qty"]),
        static("venues", fields=["venue", "at"]),
    ])  # fmt: skip
    messages = [execution(i) for i in range(6)]
    python, native = staged_both_ways(tmp_path, config, messages)
    assert native.kernel_messages == 6 and not native.handbacks
    assert python.result is not None and python.result.records == 18
    fills = records(python, "fills")
    assert list(fills[0]) == ["px", "symbol", "qty"]
    assert fills[1] == {"px": 12.5, "symbol": "ACME", "qty": 101}
    assert [list(r) for r in records(python, "venues")][:1] == [["venue", "at"]]


def test_a_destination_with_its_own_drop_rename_constant_and_cast_after_the_topics(tmp_path):
    """The topic's transforms, then the destination's, then its projection: constants last."""
    config = pipeline(
        [
            static("executions"),
            static("fills", transforms=[
                {"drop": ["venue"]}, {"cast": "qty", "to": "string"},
                {"rename": "qty", "to": "quantity"}, {"add": "desk", "value": "eq"},
            ], fields=["quantity", "symbol", "desk", "source"]),
        ],
        transforms=[{"add": "source", "value": "kafka"}, {"rename": "px", "to": "price"}],
    )  # fmt: skip
    messages = [execution(i) for i in range(4)]
    python, native = staged_both_ways(tmp_path, config, messages)
    assert native.kernel_messages == 4 and not native.handbacks
    assert records(python, "fills")[0] == {
        "quantity": "100",
        "symbol": "ACME",
        "desk": "eq",
        "source": "kafka",
    }
    assert list(records(python, "executions")[0]) == [
        "at",
        "symbol",
        "qty",
        "price",
        "venue",
        "source",
    ]


def test_a_destination_with_its_own_hmac_mask_and_a_topic_null_mask_some_leave_out(
    tmp_path, monkeypatch
):
    """The topic nulls ``venue`` once; ``fills`` keeps it (after ``qty``), ``symbols`` leaves
    it out, ``masked`` hmacs ``symbol`` with its own key and casts ``qty`` to a double: each
    table is the Python path's, every message the kernel's."""
    monkeypatch.setenv(FUZZ_HMAC_ENV, "dest-key")
    config = pipeline(
        [
            static("fills", fields=["qty", "venue", "symbol"]),
            static("symbols", fields=["symbol", "at"]),
            static("masked", transforms=[
                {"mask": "symbol", "key_env": FUZZ_HMAC_ENV},
                {"cast": "qty", "to": "double"},
            ]),
        ],
        transforms=[{"mask": "venue", "method": "null"}],
    )  # fmt: skip
    messages = [execution(i) for i in range(4)]
    python, native = staged_both_ways(tmp_path, config, messages)
    assert native.kernel_messages == 4 and not native.handbacks
    assert [r["venue"] for r in records(python, "fills")] == [None] * 4
    assert list(records(python, "symbols")[0]) == ["symbol", "at"]
    masked = records(python, "masked")[0]
    assert masked["symbol"] != "ACME" and masked["qty"] == 100.0 and masked["venue"] is None


def test_a_topic_timestamp_one_projection_leaves_out_still_runs_for_every_message(tmp_path):
    """Python converts ``qty`` (epoch seconds here) once, before ``symbols`` projects it away:
    the kernel's rewrite still runs for that destination (its checks decide a hand-back, its
    output is left out), and ``all`` gets the converted value."""
    config = pipeline(
        [static("symbols", fields=["symbol"]), static("all")],
        transforms=[{"timestamp": "qty", "to": "epoch_ms", "epoch_unit": "s"}],
    )  # fmt: skip
    python, native = staged_both_ways(tmp_path, config, [execution(i) for i in range(3)])
    assert native.kernel_messages == 3 and not native.handbacks
    assert [r["qty"] for r in records(python, "all")] == [100_000, 101_000, 102_000]
    assert records(python, "symbols")[0] == {"symbol": "ACME"}


def test_parts_of_the_message_land_where_each_projection_puts_them(tmp_path):
    """The topic adds the offset (after a constant) and a header; ``traces`` projects the
    header first and leaves the offset out, ``offsets`` keeps the offset between two declared
    fields, ``all`` has them last in transform order, with its own key add. A key that is not
    UTF-8 for a string fails the step on the Python path: that message goes back whole."""
    config = pipeline(
        [
            static("traces", fields=["trace", "symbol"]),
            static("offsets", fields=["qty", "off", "at"]),
            static("all", transforms=[{"add": "k", "message": "key"}]),
        ],
        transforms=[
            {"add": "source", "value": "kafka"},
            {"add": "off", "message": "offset"},
            {"add": "trace", "header": "trace-id"},
        ],
    )  # fmt: skip
    messages = [
        Msg(m.topic(), 0, m.offset(), m.value(), key, headers)
        for m, key, headers in zip(
            [execution(i) for i in range(4)],
            [b"a", None, b"\xff", b"d"],
            [[("trace-id", b"one"), ("trace-id", b"two")], None, None, [("x", b"y")]],
        )
    ]
    python, native = staged_both_ways(tmp_path, config, messages)
    assert native.kernel_messages == 3
    assert sum(native.handbacks.values()) == 1
    assert records(python, "traces")[0] == {"trace": "two", "symbol": "ACME"}
    assert list(records(python, "offsets")[0]) == ["qty", "off", "at"]
    assert [r["off"] for r in records(python, "offsets")] == [0, 1, 3]
    assert list(records(python, "all")[0])[-4:] == ["source", "off", "trace", "k"]


def test_schema_names_leave_one_schema_out_of_a_destination(tmp_path):
    """Quotes go to one table, executions to two; a schema no destination takes is the
    Python path's unroutable dead letter."""
    config = pipeline([
        static("all", fields=["symbol", "at"]),
        static("fills", schema_names=["fix.ExecutionReport"], fields=["qty"]),
    ])  # fmt: skip
    messages = [execution(0), message(1, QUOTE, {"at": 1_726_238_205_123, "symbol": "Q"}),
                execution(2)]  # fmt: skip
    python, native = staged_both_ways(tmp_path, config, messages)
    assert native.kernel_messages == 3
    assert len(records(python, "all")) == 3 and len(records(python, "fills")) == 2

    only_fills = pipeline([static("fills", schema_names=["fix.ExecutionReport"])])
    python, native = staged_both_ways(tmp_path / "unroutable", only_fills, messages)
    assert python.result is not None and python.result.dead_letters == {"unroutable": 1}
    assert native.kernel_messages == 2


def test_a_message_one_destination_hands_back_goes_to_the_python_path_whole(tmp_path):
    """An over-long varint in ``qty``: fastavro re-encodes it; the kernel hands the message
    back, and nothing of it is in any table the kernel writes (all or nothing)."""
    config = pipeline([static("executions", fields=["symbol"]), static("fills", fields=["qty"])])
    good = execution(0)
    bad_body = (zigzag(1_726_238_205_123) + zigzag(4) + b"ACME" + b"\x8a\x00"
                + b"\x00" * 8 + b"\x00")  # fmt: skip
    bad = Msg(TOPIC, 0, 1, b"\x00" + EXECUTION.to_bytes(4, "big") + bad_body)
    python, native = staged_both_ways(tmp_path, config, [good, bad, execution(2)])
    assert native.kernel_messages == 2
    assert native.handbacks == {"transform_uncertain": 1}
    assert [r["qty"] for r in records(python, "fills")] == [100, 5, 102]


def test_a_destination_the_kernel_does_not_do_keeps_the_whole_topic_on_the_python_path(
    tmp_path,
):
    """``when`` (per record) or field routing: the Python path, for the whole topic."""
    for destinations in (
        [static("all"), static("fills", when='symbol == "ACME"')],
        [static("all"), {"routing": {"mode": "fields"}}],
    ):
        config = pipeline(destinations)
        ctx = StageContext(KafkaSettings("127.0.0.1:9"), RegistrySettings("http://127.0.0.1:9"),
                           StagingLocation(str(tmp_path)), config, TOPIC, native_kernel=True)  # fmt: skip
        stager = TransformRangeStager(ctx, OffsetRange(TOPIC, 0, 0, 1), tmp_path)
        assert NativeStaging.for_stager(stager) is None


def test_a_projection_puts_constants_between_declared_fields(tmp_path):
    """An Avro record is its fields' encodings in order: a constant listed first, or between
    two declared fields, is its encoding there."""
    config = pipeline([
        static("all", transforms=[{"add": "k", "value": 1}, {"add": "tag", "value": "t"}],
               fields=["k", "at", "tag", "symbol"]),
    ])  # fmt: skip
    python, native = staged_both_ways(tmp_path, config, [execution(0), execution(1)])
    assert native.kernel_messages == 2
    assert records(python, "all")[0] == {
        "k": 1, "at": 1_726_238_205_123, "tag": "t", "symbol": "ACME"
    }  # fmt: skip


def test_a_schema_two_destinations_route_into_one_table_is_the_python_paths_unroutable(
    tmp_path,
):
    """A static table and the schema-name route of the same table: Python's verdict (a row
    would be doubled), the kernel refuses the schema."""
    config = pipeline([
        static("execution_report"),
        {"routing": {"mode": "schema_name", "dataset": "fix"}},
    ])  # fmt: skip
    python, native = staged_both_ways(tmp_path, config, [execution(0)])
    assert python.result is not None and python.result.dead_letters == {"unroutable": 1}
    assert native.kernel_messages == 0


def test_the_destination_driver_is_picked_for_a_topic_with_destinations(tmp_path):
    config = pipeline([static("all"), static("fills", fields=["qty"])])
    ctx = StageContext(KafkaSettings("127.0.0.1:9"), RegistrySettings("http://127.0.0.1:9"),
                       StagingLocation(str(tmp_path)), config, TOPIC, native_kernel=True)  # fmt: skip
    stager = TransformRangeStager(ctx, OffsetRange(TOPIC, 0, 0, 1), tmp_path)
    assert isinstance(NativeStaging.for_stager(stager), AvroDestinationKernelStaging)


def test_differential_fuzz(tmp_path_factory, pytestconfig, monkeypatch):
    """Seeded random destinations (static and schema-name tables, projections, their own
    transforms, schema_names) over the Avro
    transforms fuzz's schemas and encodings, 400 messages each: identical commits on both
    paths. The kernel's share is of staged messages (each is several records here). The
    transforms drawn may mask with hmac (the key a stage task reads where it runs)."""
    monkeypatch.setenv(FUZZ_HMAC_ENV, "fuzz-key")
    tally = differential_fuzz(
        "avrodest", "fuzz.events", scenario, pytestconfig, tmp_path_factory,
        schemas_of=lambda case: case.schemas,
    )  # fmt: skip
    # Of the messages staged (not dead-lettered nor skipped): the kernel's, or the Python
    # path's after a hand-back.
    staged = tally.natively + sum(tally.handed_back_records.values())
    share = tally.natively / max(staged, 1)
    print(f"avro destinations: {tally.natively} of {staged} staged messages by the kernel "
          f"({share:.1%}), {tally.records} records, {tally.messages} messages")  # fmt: skip
    assert share > 0.5, "the kernel staged too few messages to prove anything"


@needs_hour_kernel
def test_differential_fuzz_with_hour_tables(tmp_path_factory, pytestconfig, monkeypatch):
    """The same scenarios with some of their tables HOUR-partitioned (one message often into
    an HOUR and a DAY table): each slot's event hour column and hour counts are the Python
    path's too."""
    monkeypatch.setenv(FUZZ_HMAC_ENV, "fuzz-key")
    tally = differential_fuzz(
        "avrodesthour", "fuzz.events", with_hour_tables(scenario), pytestconfig,
        tmp_path_factory, schemas_of=lambda case: case.schemas,
    )  # fmt: skip
    staged = tally.natively + sum(tally.handed_back_records.values())
    assert tally.natively / max(staged, 1) > 0.5, "the kernel staged too few messages"
