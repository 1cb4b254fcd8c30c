"""The native kernel stages keyed change topics exactly as the Python path does.

The Python path (``KeyedRangeStager``, ``ChangeLayout.body``) is the reference. Every test
stages the same messages both ways and requires identical committed files (avro, dead-letter
and done files, byte for byte), identical counts — tombstones included — and that the kernel
staged the records it should, so equality is not that of a kernel handing everything back.
The seeded differential fuzz (change_fuzz.py) runs a slice by default;
``--kernel-fuzz-cases 1000000 --timeout 0`` runs a million messages.
"""

from __future__ import annotations

import io

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.demo.debezium import ROW_V1, ROW_V2, CustomersTable, envelope_schema, frame
from kbqe_dagster.demo.debezium_changes import Change, value_record
from kbqe_dagster_tests.formats.json_fuzz import FUZZ_HMAC_ENV
from kbqe_dagster_tests.keyed import change_fuzz
from kbqe_dagster_tests.staging.kernel_equality import (
    Msg,
    Staged,
    assert_same,
    differential_fuzz,
    stage,
)

kernel = pytest.importorskip(
    "kbqe_dagster_kernel", reason="the native stage kernel is not built (no cargo)"
)
if not hasattr(kernel.StageKernel, "count_tombstones"):
    pytest.skip(
        "the installed kernel predates keyed topics (make install)", allow_module_level=True
    )

NS = "dbserver1.inventory.customers"
TOPIC = "dbserver1.inventory.customers"
STATIC = {"mode": "static", "dataset": "inventory", "table": "customers"}


def debezium(**topic):
    return parse_pipeline_config({
        "version": 1,
        "topics": [{"name": TOPIC, "format": "debezium", "keyed": {"key": ["id"]},
                    "routing": STATIC, **topic}],
        "enrichment": {"key_column": "_kafka_key", "headers_column": "_kafka_headers"},
    }, source="test")  # fmt: skip


def both(tmp_path, config, schemas, msgs, batch_size=64) -> tuple[Staged, Staged]:
    python = stage(tmp_path, config, TOPIC, schemas, msgs, native=False)
    native = stage(tmp_path, config, TOPIC, schemas, msgs, native=True, batch_size=batch_size)
    assert_same(python, native)
    return python, native


def table_stream(schema_ids: dict[int, dict], seed: int = 3) -> list[Msg]:
    """A customers table's changes (snapshot, inserts, updates, deletes each followed by its
    tombstone, re-creations, redeliveries, late versions), a column added mid-stream."""
    table = CustomersTable(seed=seed)
    table.snapshot(20)
    for round_ in range(6):
        if round_ == 3:
            table.schema_version = 2
        table.round(5, 5, 3)
    (v1, s1), (v2, s2) = schema_ids.items()
    return [
        Msg(TOPIC, 0, offset,
            None if c.is_tombstone else frame(*((v1, s1) if c.schema_version == 1 else (v2, s2)),
                                              value_record(c, NS)),
            key=b"%d" % c.id, headers=[("source", b"pg")])
        for offset, c in enumerate(table.changes)
    ]  # fmt: skip


def test_a_debezium_table_stream_is_staged_by_the_kernel_into_identical_files(tmp_path):
    schemas = {4: envelope_schema(NS, ROW_V1), 5: envelope_schema(NS, ROW_V2, ts_precision=True)}
    msgs = table_stream(schemas)
    python, native = both(tmp_path, debezium(), schemas, msgs, batch_size=1000)
    tombstones = sum(m.value() is None for m in msgs)
    assert tombstones > 0 and python.result.records == len(msgs) - tombstones
    # Tombstones are counted and skipped, never dead-lettered, on both paths; the kernel
    # counts them itself and stages every change: nothing goes back to the Python path.
    assert native.result.tombstones == python.result.tombstones == tombstones
    assert python.result.dead_letters == {}
    assert native.kernel_messages == len(msgs)
    assert native.handbacks == {}


@pytest.mark.parametrize(
    ("op", "before", "after", "reason"),
    [
        ("m", None, None, "not_a_change"),  # a message event
        ("d", None, None, "not_a_change"),  # a delete without its before image
        ("u", {"id": 1, "first_name": "A", "last_name": "B", "email": "e"}, None, "not_a_change"),
    ],
)
def test_what_is_not_a_row_change_is_handed_back_and_dead_lettered_with_python_reason(
    tmp_path, op, before, after, reason
):
    schema = envelope_schema(NS, ROW_V1)
    good = value_record_of("c", None, {"id": 1, "first_name": "A", "last_name": "B", "email": "e"})
    bad = value_record_of(op, before, after)
    msgs = [Msg(TOPIC, 0, i, frame(4, schema, r)) for i, r in enumerate([good, bad, good])]
    python, native = both(tmp_path, debezium(), {4: schema}, msgs)
    assert python.result.dead_letters == {reason: 1}
    assert native.kernel_messages == 2 and native.handbacks == {"change_uncertain": 1}


def test_a_truncate_is_handed_back_and_staged_by_the_python_path(tmp_path):
    """The kernel cuts only c, r, u and d; a truncate (op t, no images, a null Kafka key) is
    the Python path's: a changelog row, not a dead letter, in the same files."""
    schema = envelope_schema(NS, ROW_V1)
    good = value_record_of("c", None, {"id": 1, "first_name": "A", "last_name": "B", "email": "e"})
    records = [good, value_record_of("t", None, None), good]
    msgs = [Msg(TOPIC, 0, i, frame(4, schema, r)) for i, r in enumerate(records)]
    msgs[1] = Msg(TOPIC, 0, 1, msgs[1].value(), key=None)
    python, native = both(tmp_path, debezium(), {4: schema}, msgs)
    assert python.result.dead_letters == native.result.dead_letters == {}
    assert python.result.records == native.result.records == 3
    assert native.kernel_messages == 2 and native.handbacks == {"change_uncertain": 1}


def value_record_of(op, before, after, ts_ms=1_732_000_000_123):
    return value_record(Change(1, op, before, after, ts_ms), NS)


def test_a_null_version_is_python_verdict(tmp_path):
    schema = envelope_schema(NS, ROW_V1)
    source = next(f for f in schema["fields"] if f["name"] == "source")["type"]
    next(f for f in source["fields"] if f["name"] == "ts_ms")["type"] = ["null", "long"]
    row = {"id": 1, "first_name": "A", "last_name": "B", "email": "e"}
    records = [value_record_of("c", None, row), value_record_of("c", None, row)]
    records[1]["source"]["ts_ms"] = None
    msgs = [Msg(TOPIC, 0, i, frame(4, schema, r)) for i, r in enumerate(records)]
    python, native = both(tmp_path, debezium(), {4: schema}, msgs)
    assert python.result.dead_letters == {"not_a_change": 1}
    assert native.kernel_messages == 1


FLAT_TAIL = [
    {"name": "__op", "type": ["null", "string"], "default": None},
    {"name": "__source_ts_ms", "type": ["null", "long"], "default": None},
]


@pytest.mark.parametrize("deleted_type", [["null", "string"], "boolean"])
def test_extract_new_record_state_is_cut_natively_with_python_fallbacks(tmp_path, deleted_type):
    """``__op`` missing or empty falls back to ``d`` when ``__deleted`` says so (``"true"`` or
    ``true``), else ``u``; a ``__deleted`` of any other spelling is not a delete."""
    schema = {"type": "record", "name": "Value", "namespace": NS,
              "fields": [*ROW_V2, *FLAT_TAIL, {"name": "__deleted", "type": deleted_type}]}  # fmt: skip
    spellings = [True, False] if deleted_type == "boolean" else ["true", "false", "TRUE", None]
    row = {"id": 7, "first_name": "A", "last_name": "B", "email": "e", "phone": None}
    records = [{**row, "__op": op, "__source_ts_ms": 99, "__deleted": deleted}
               for op in ("c", "u", "d", "r", None, "") for deleted in spellings]  # fmt: skip
    msgs = [Msg(TOPIC, 0, i, frame(6, schema, r)) for i, r in enumerate(records)]
    python, native = both(tmp_path, debezium(), {6: schema}, msgs)
    assert python.result.records == len(records)
    assert native.kernel_messages == len(records)


def plain_topic(**keyed):
    return parse_pipeline_config({
        "version": 1,
        "topics": [{"name": TOPIC, "routing": STATIC, "event_time": {"fields": ["updated_at"]},
                    "keyed": {"key": ["sku"], "version": "updated_at", **keyed}}],
    }, source="test")  # fmt: skip


@pytest.mark.parametrize("logical", ["timestamp-millis", "timestamp-micros", None])
def test_plain_keyed_records_are_versioned_and_deleted_as_python_does(tmp_path, logical):
    """A timestamp version is epoch milliseconds, floored (micros before 1970 included)."""
    version = {"type": "long", "logicalType": logical} if logical else "long"
    schema = {"type": "record", "name": "Price", "namespace": "shop", "fields": [
        {"name": "sku", "type": "string"}, {"name": "updated_at", "type": version},
        {"name": "discontinued", "type": ["null", "boolean"]}]}  # fmt: skip
    parsed = fastavro.parse_schema(schema)
    values = [1_732_017_600_123_457, -1_500, -1, 0] if logical else [1_732_017_600_123, -7, 0]
    msgs = []
    for i, (at, gone) in enumerate((v, g) for v in values for g in (None, False, True)):
        out = io.BytesIO()
        when = at // 1000 if logical == "timestamp-millis" else at
        fastavro.schemaless_writer(out, parsed, {"sku": f"A-{i}", "updated_at": when,
                                                 "discontinued": gone})  # fmt: skip
        msgs.append(Msg(TOPIC, 0, i, b"\x00\x00\x00\x00\x09" + out.getvalue()))
    python, native = both(tmp_path, plain_topic(delete_field="discontinued"), {9: schema}, msgs)
    assert native.kernel_messages == python.result.records > 0


def test_a_block_written_with_its_byte_size_is_cut_by_python(tmp_path):
    """Python's skippers jump over an array block by its byte size, the kernel walks its items:
    a body with a sized block (no Avro writer of Debezium's makes one) is handed back."""
    row = [*ROW_V1, {"name": "tags", "type": {"type": "array", "items": "string"}}]
    schema = envelope_schema(NS, row)
    record = value_record_of("c", None, {"id": 1, "first_name": "A", "last_name": "B",
                                         "email": "e", "tags": []})  # fmt: skip
    plain = frame(4, schema, record)
    # The empty array is one 0x00 count byte at the end of the row image; write it as one
    # sized block of one item ("x") instead: count -1 (0x01), size 2, the item, then 0.
    at = plain.index(b"\x02e\x00") + 2
    sized = plain[:at] + b"\x01\x04\x02x\x00" + plain[at + 1 :]
    msgs = [Msg(TOPIC, 0, 0, plain), Msg(TOPIC, 0, 1, sized)]
    python, native = both(tmp_path, debezium(), {4: schema}, msgs)
    assert python.result.records == 2
    assert native.kernel_messages == 1 and native.handbacks == {"change_uncertain": 1}


def test_keyed_differential_fuzz(tmp_path_factory, pytestconfig):
    """Seeded random keyed scenarios, 400 messages each: identical commits and tombstone
    counts on both paths, and the kernel stages (nearly) every record that stages."""
    tally = differential_fuzz(
        "keyed",
        change_fuzz.TOPIC,
        change_fuzz.scenario,
        pytestconfig,
        tmp_path_factory,
        schemas_of=lambda case: case.schemas,
    )
    # What it leaves to Python: schemas with an `op` enum (the kernel reads no enums).
    assert tally.share > 0.9, "the kernel staged too few records to prove anything"


def test_keyed_differential_fuzz_with_row_transforms(tmp_path_factory, pytestconfig, monkeypatch):
    """The same scenarios with transforms over the row that the kernel does (renames, drops,
    casts, masks, timestamps, constants; change_fuzz.with_row_transforms): identical commits,
    and the kernel stages most records that stage."""
    if not hasattr(kernel.StageKernel, "add_transformed_change_schema"):
        pytest.skip("the installed kernel predates keyed transforms (make install)")
    monkeypatch.setenv(FUZZ_HMAC_ENV, "fuzz-key")
    tally = differential_fuzz(
        "keyed transformed",
        change_fuzz.TOPIC,
        change_fuzz.with_row_transforms(change_fuzz.scenario),
        pytestconfig,
        tmp_path_factory,
        schemas_of=lambda case: case.schemas,
    )
    assert tally.share > 0.8, "the kernel staged too few records to prove anything"


# --- Kafka Connect semantic types (core/formats/connect_types.py) -----------------------------
def semantic(name, avro):
    return {"type": avro, "connect.version": 1, "connect.name": name}


SAME_BYTES_ROW = [
    {"name": "id", "type": "int"},
    {"name": "born", "type": ["null", semantic("io.debezium.time.Date", "int")], "default": None},
    {"name": "seen", "type": semantic("io.debezium.time.MicroTimestamp", "long")},
    {"name": "doc", "type": ["null", semantic("io.debezium.data.Json", "string")], "default": None},
]
ZONED_ROW = [
    *SAME_BYTES_ROW,
    {"name": "at", "type": semantic("io.debezium.time.ZonedTimestamp", "string")},
]


def semantic_stream(schema, rows):
    return [
        Msg(TOPIC, 0, i, frame(7, schema, value_record_of("c", None, row)))
        for i, row in enumerate(rows)
    ]


def staged_avro(staged):
    (name,) = [n for n in staged.files if n.endswith(".avro") and ".customers_changelog." in n]
    reader = fastavro.reader(io.BytesIO(staged.files[name]))
    return reader.writer_schema, list(reader)


def test_semantic_types_that_keep_their_bytes_are_sliced_by_the_kernel_under_logical_types(
    tmp_path,
):
    schema = envelope_schema(NS, SAME_BYTES_ROW)
    rows = [{"id": i, "born": 19979 if i % 2 else None, "seen": 1_726_238_205_123_456,
             "doc": '{"k": 1}'} for i in range(20)]  # fmt: skip
    python, native = both(tmp_path, debezium(), {7: schema}, semantic_stream(schema, rows))
    assert native.kernel_messages == 20 and native.handbacks == {}
    writer, records = staged_avro(python)
    types = {f["name"]: f["type"] for f in writer["fields"]}
    assert types["born"][1]["logicalType"] == "date"
    assert types["seen"]["logicalType"] == "timestamp-micros"
    assert types["doc"][1]["sqlType"] == "JSON"
    assert records[1]["born"].isoformat() == "2024-09-13"


def test_a_zoned_timestamp_is_re_encoded_by_the_kernel_and_a_value_it_is_unsure_of_handed_back(
    tmp_path,
):
    schema = envelope_schema(NS, ZONED_ROW)
    rows = [{"id": i, "born": None, "seen": 0, "doc": None,
             "at": "2024-09-13T14:36:45.5+02:00" if i != 3 else "not a time"}
            for i in range(6)]  # fmt: skip
    python, native = both(tmp_path, debezium(), {7: schema}, semantic_stream(schema, rows))
    # The kernel converts the five times itself; the one it cannot read goes back to the
    # Python path, which dead-letters it naming the column.
    assert native.kernel_messages == 5 and native.handbacks == {"change_uncertain": 1}
    assert python.result.dead_letters == {"unconvertible_value": 1}
    writer, records = staged_avro(python)
    assert {f["name"]: f["type"] for f in writer["fields"]}["at"]["logicalType"] == (
        "timestamp-micros"
    )
    assert [r["at"].isoformat() for r in records] == ["2024-09-13T12:36:45.500000+00:00"] * 5


def test_semantic_types_false_keeps_the_types_as_sent_for_tables_created_before(tmp_path):
    """``keyed.semantic_types: false``: a table created before the mapping keeps loading (a
    date column stays INT64 instead of a refused INT64 → DATE)."""
    schema = envelope_schema(NS, ZONED_ROW)
    rows = [{"id": 1, "born": 19979, "seen": 0, "doc": None, "at": "2024-09-13T14:36:45Z"}]
    config = parse_pipeline_config({
        "version": 1,
        "topics": [{"name": TOPIC, "format": "debezium", "routing": STATIC,
                    "keyed": {"key": ["id"], "semantic_types": False}}],
    }, source="test")  # fmt: skip
    python, native = both(tmp_path, config, {7: schema}, semantic_stream(schema, rows))
    assert native.kernel_messages == 1 and native.handbacks == {}  # nothing to re-encode
    writer, records = staged_avro(python)
    types = {f["name"]: f["type"] for f in writer["fields"]}
    assert "logicalType" not in types["born"][1] and types["at"]["type"] == "string"
    assert (records[0]["born"], records[0]["at"]) == (19979, "2024-09-13T14:36:45Z")


@pytest.mark.parametrize(
    ("text", "kernel_reads"),
    [
        ("2024-09-13T12:36:45.123456789Z", True),  # 3.11's fromisoformat keeps 6 digits
        ("1969-12-31T23:59:59.9999999-00:00", True),
        ("0001-01-01T00:00:00Z", True),
        ("9999-12-31T23:59:59.999999Z", True),
        ("2024-09-13 12:36:45,5+0200", True),  # other spellings fromisoformat reads alike
        ("2024-09-13T12:36:45.+00", True),
        ("2024-09-13T12:36:45Z[UTC]", False),  # refused by fromisoformat
        ("2024-09-13T12:36:45", False),  # no offset: refused by _zoned_timestamp
        ("2024-09-13T23:59:60Z", False),  # a leap second: refused by datetime
        ("2024-09-13T12:36:45z", False),
        ("0001-01-01T00:00:00+00:01", False),  # before year 1 in UTC: out of range
    ],
)
def test_zoned_timestamp_spellings_are_the_kernel_s_only_where_it_reads_them_as_python(
    tmp_path, text, kernel_reads
):
    schema = envelope_schema(NS, ZONED_ROW)
    rows = [{"id": 1, "born": None, "seen": 0, "doc": None, "at": text}]
    python, native = both(tmp_path, debezium(), {7: schema}, semantic_stream(schema, rows))
    if kernel_reads:
        assert native.kernel_messages == 1 and native.handbacks == {}
    else:
        assert native.kernel_messages == 0 and native.handbacks == {"change_uncertain": 1}


def vsd_type(named=False):
    if named:
        return "io.debezium.data.VariableScaleDecimal"
    return {"type": "record", "name": "VariableScaleDecimal", "namespace": "io.debezium.data",
            "connect.version": 1, "connect.name": "io.debezium.data.VariableScaleDecimal",
            "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}]}  # fmt: skip


def vsd(scale, unscaled, size=None):
    size = size or max(1, (unscaled.bit_length() + 8) // 8)
    return {"scale": scale, "value": unscaled.to_bytes(size, "big", signed=True)}


NUMERIC_ROW = [
    {"name": "id", "type": "int"},
    {"name": "amount", "type": ["null", vsd_type()], "default": None},
    {"name": "rate", "type": [vsd_type(named=True), "null"]},  # the branch index is kept
    {"name": "at_ns", "type": ["null", semantic("io.debezium.time.NanoTimestamp", "long")]},
    {"name": "of_day_ns", "type": semantic("io.debezium.time.NanoTime", "long")},
]


def test_variable_scale_decimals_and_nanoseconds_are_re_encoded_by_the_kernel_in_their_unions(
    tmp_path,
):
    schema = envelope_schema(NS, NUMERIC_ROW)
    amounts = [vsd(2, 12345), None, vsd(0, -1, size=8), vsd(12, 5000), vsd(-28, 9), vsd(9, -128),
               vsd(0, 0), vsd(12, 5001)]  # fmt: skip
    rows = [{"id": i, "amount": amount, "rate": vsd(4, 1) if i % 2 else None,
             "at_ns": None if i % 3 == 0 else -1_001 * i, "of_day_ns": 45_296_789_999_999}
            for i, amount in enumerate(amounts)]  # fmt: skip
    python, native = both(tmp_path, debezium(), {7: schema}, semantic_stream(schema, rows))
    # The last amount has 12 decimal places: no exact NUMERIC, the Python path dead-letters it.
    assert native.kernel_messages == 7 and native.handbacks == {"change_uncertain": 1}
    assert python.result.dead_letters == {"unconvertible_value": 1}
    writer, records = staged_avro(python)
    types = {f["name"]: f["type"] for f in writer["fields"]}
    assert types["rate"][1] == "null" and types["rate"][0]["logicalType"] == "decimal"
    assert [str(r["amount"]) for r in records[:3]] == ["123.450000000", "None", "-1.000000000"]
    assert records[1]["at_ns"].timestamp() == -0.000002  # -1001 ns, floored to -2 µs
    assert str(records[0]["of_day_ns"]) == "12:34:56.789999"


def test_a_semantic_value_the_kernel_does_not_re_encode_leaves_its_schema_to_python(tmp_path):
    row = [{"name": "id", "type": "int"},
           {"name": "ats", "type": {"type": "array",
                                    "items": semantic("io.debezium.time.ZonedTimestamp", "string")}}]  # fmt: skip
    schema = envelope_schema(NS, row)
    rows = [{"id": i, "ats": ["2024-09-13T12:36:45Z"]} for i in range(3)]
    python, native = both(tmp_path, debezium(), {7: schema}, semantic_stream(schema, rows))
    assert native.handbacks == {"schema_unknown": 3}
    assert python.result.dead_letters == {}


def test_an_event_time_inside_a_re_encoded_row_is_read_by_the_kernel_as_it_re_encodes(tmp_path):
    # The image is walked field by field to re-encode `at`; `after.seen` is read on the way.
    config = debezium(event_time={"fields": ["after.seen"], "epoch_unit": "us"})
    schema = envelope_schema(NS, ZONED_ROW)
    rows = [{"id": i, "born": None, "seen": 1_726_238_205_123_456 + i * 86_400_000_000,
             "doc": None, "at": "2024-09-13T12:36:45Z"} for i in range(4)]  # fmt: skip
    python, native = both(tmp_path, config, {7: schema}, semantic_stream(schema, rows))
    assert native.kernel_messages == 4 and native.handbacks == {}
    _, records = staged_avro(python)
    assert [r["_event_date"].isoformat() for r in records] == [
        "2024-09-13", "2024-09-14", "2024-09-15", "2024-09-16"
    ]  # fmt: skip


KEYED_TRANSFORMS = [
    {"rename": "id", "to": "customer_id"},
    {"cast": "customer_id", "to": "string"},
    {"mask": "email", "key_env": "KBQE_TEST_MASK_KEY"},
    {"drop": "last_name"},
    {"add": "source_db", "value": "inventory"},
    {"add": "kafka_key", "message": "key"},
    {"compute": "greeting", "expression": '"Hi " + first_name', "type": "string"},
]


def test_transforms_the_kernel_cannot_do_leave_each_schema_to_the_python_path(
    tmp_path, monkeypatch
):
    """A ``compute`` and a part of the message (the Kafka key) are the Python path's: each
    writer schema is left to it (``add_transformed_change_schema`` is not called), so a stage
    run with the kernel built commits exactly what the Python path commits."""
    monkeypatch.setenv("KBQE_TEST_MASK_KEY", "k")
    schemas = {4: envelope_schema(NS, ROW_V1), 5: envelope_schema(NS, ROW_V2, ts_precision=True)}
    msgs = table_stream(schemas)
    config = debezium(transforms=KEYED_TRANSFORMS)
    python = stage(tmp_path, config, TOPIC, schemas, msgs, native=False)
    native = stage(tmp_path, config, TOPIC, schemas, msgs, native=True)
    assert_same(python, native)
    # Only the tombstones (counted and skipped) are the kernel's: every change goes back.
    assert native.kernel_messages == sum(m.value() is None for m in msgs)
    assert python.result.dead_letters == {}
    assert python.result.records == sum(m.value() is not None for m in msgs)
    # Transformed changelog files carry their derived schema's own id, not the registry's.
    ids = {name.split(".")[-3] for name in python.files if name.endswith(".avro")}
    assert ids and not ids & {"4", "5"}
    rows = [r for name, data in python.files.items() if name.endswith(".avro")
            for r in fastavro.reader(io.BytesIO(data))]  # fmt: skip
    assert {r["kafka_key"] for r in rows} == {r["customer_id"] for r in rows}
    assert all(len(r["email"]) == 64 and "last_name" not in r for r in rows)


KERNEL_TRANSFORMS = [
    {"cast": "id", "to": "string"},  # a key field: to string keeps its identity
    {"rename": "id", "to": "customer_id"},  # (a cast of the renamed name would be a chain)
    {"mask": "email", "key_env": "KBQE_TEST_MASK_KEY"},
    {"mask": "first_name", "method": "null"},
    {"drop": "last_name"},
    {"add": "source_db", "value": "inventory"},
]


def test_renames_casts_masks_drops_and_constants_are_done_by_the_kernel_as_python_does(
    tmp_path, monkeypatch
):
    """Transforms the kernel does exactly (core/transforms/kernel_transforms.py) are taught
    with each writer schema's cut: every change, both images alike, is staged by the kernel
    into the Python path's files, byte for byte."""
    if not hasattr(kernel.StageKernel, "add_transformed_change_schema"):
        pytest.skip("the installed kernel predates keyed transforms (make install)")
    monkeypatch.setenv("KBQE_TEST_MASK_KEY", "k")
    schemas = {4: envelope_schema(NS, ROW_V1), 5: envelope_schema(NS, ROW_V2, ts_precision=True)}
    msgs = table_stream(schemas)
    config = debezium(transforms=KERNEL_TRANSFORMS)
    python, native = both(tmp_path, config, schemas, msgs)
    changes = sum(m.value() is not None for m in msgs)
    assert python.result.records == changes and python.result.dead_letters == {}
    assert native.kernel_messages == len(msgs) and native.handbacks == {}
    rows = [r for name, data in python.files.items() if name.endswith(".avro")
            for r in fastavro.reader(io.BytesIO(data))]  # fmt: skip
    assert all(isinstance(r["customer_id"], str) and len(r["email"]) == 64 for r in rows)
    assert all("last_name" not in r and r["first_name"] is None for r in rows)
    assert {r["source_db"] for r in rows} == {"inventory"}


PLACEHOLDER = "__debezium_unavailable_value"


def test_a_masked_field_holding_the_unavailable_value_goes_back_and_stays_the_placeholder(
    tmp_path, monkeypatch
):
    """Debezium's placeholder (an unchanged TOASTed column) means "unchanged" through a mask
    (core/transforms/keyed_rows.py): the kernel hands such a change back, the Python path
    keeps the placeholder, and the other changes are the kernel's."""
    if not hasattr(kernel.StageKernel, "add_transformed_change_schema"):
        pytest.skip("the installed kernel predates keyed transforms (make install)")
    monkeypatch.setenv("KBQE_TEST_MASK_KEY", "k")
    schemas = {4: envelope_schema(NS, ROW_V1)}
    rows = [
        {"id": 1, "first_name": "Ada", "last_name": "L", "email": "ada@x.org"},
        {"id": 1, "first_name": "Ada", "last_name": "L", "email": PLACEHOLDER},
        {"id": 2, "first_name": "Bob", "last_name": PLACEHOLDER, "email": "bob@x.org"},
    ]
    changes = [Change(r["id"], "u", None, r, 1_726_238_205_000 + i) for i, r in enumerate(rows)]
    msgs = [Msg(TOPIC, 0, i, frame(4, schemas[4], value_record(c, NS)), key=b"%d" % c.id)
            for i, c in enumerate(changes)]  # fmt: skip
    config = debezium(transforms=[{"mask": "email", "key_env": "KBQE_TEST_MASK_KEY"},
                                  {"drop": "last_name"}])  # fmt: skip
    python, native = both(tmp_path, config, schemas, msgs)
    assert native.kernel_messages == 2 and sum(native.handbacks.values()) == 1
    emails = [r["email"] for name, data in sorted(python.files.items()) if name.endswith(".avro")
              for r in fastavro.reader(io.BytesIO(data))]  # fmt: skip
    assert sorted(emails, key=len)[0] == PLACEHOLDER and sum(len(e) == 64 for e in emails) == 2
