"""A ``format: debezium`` topic stages Debezium change events written by Kafka Connect's
JsonConverter (schema embedded) into the same changelog records as the same events written by
the Avro converter; a topic may mix both. The native kernel hands the JSON values back to the
Python path, never dead-letters them (keyed/connect_json.py, keyed/stage.py)."""

from __future__ import annotations

import io
import json

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.formats.connect_json_avro import schema_id
from kbqe_dagster.core.protocol.naming import AvroFileName, parse_name
from kbqe_dagster.demo.debezium import ROW_V1, ROW_V2, CustomersTable, envelope_schema, frame
from kbqe_dagster.demo.debezium_changes import value_record
from kbqe_dagster.demo.debezium_json import connect_value_schema, json_key, json_value
from kbqe_dagster_tests.staging.kernel_equality import Msg, Staged, assert_same, stage

NS = "dbserver1.inventory.customers"
TOPIC = "dbserver1.inventory.customers"
STATIC = {"mode": "static", "dataset": "inventory", "table": "customers"}
AVRO_IDS = {4: envelope_schema(NS, ROW_V1), 5: envelope_schema(NS, ROW_V2)}


def debezium(**topic):
    return parse_pipeline_config({
        "version": 1,
        "topics": [{"name": TOPIC, "format": "debezium", "keyed": {"key": ["id"]},
                    "routing": STATIC, **topic}],
        "dead_letter": {"dataset": "dead", "table": "letters"},
    }, source="test")  # fmt: skip


def changes(seed: int = 3) -> list:
    """Snapshot reads, inserts, updates, deletes with their tombstones, re-creations,
    redeliveries, late versions; a column added mid-stream (schema v2)."""
    table = CustomersTable(seed=seed)
    table.snapshot(12)
    for round_ in range(4):
        if round_ == 2:
            table.schema_version = 2
        table.round(4, 4, 2)
    return table.changes


def avro_value(change) -> bytes | None:
    if change.is_tombstone:
        return None
    schema_id_ = 4 if change.schema_version == 1 else 5
    record = value_record(change, NS)
    return frame(schema_id_, AVRO_IDS[schema_id_], record)


def messages(encodings: str | list[str], stream=None) -> list[Msg]:
    """The stream, message ``i`` written by the Avro or the JSON converter (``encodings``: one
    for all, or one per message); the Kafka key as the same converter writes it."""
    stream = stream or changes()
    out = []
    for offset, change in enumerate(stream):
        encoding = encodings if isinstance(encodings, str) else encodings[offset]
        if encoding == "json":
            value = None if change.is_tombstone else json_value(change, NS)
            key = json_key(change, NS)
        else:
            value, key = avro_value(change), b"%d" % change.id
        out.append(Msg(TOPIC, 0, offset, value, key=key))
    return out


def changelog_records(staged: Staged) -> list[dict]:
    """Every changelog record committed, by offset, as Avro reads it back."""
    records = []
    for name, data in staged.files.items():
        parsed = parse_name(name)
        if isinstance(parsed, AvroFileName) and parsed.key.table == "customers_changelog":
            records += list(fastavro.reader(io.BytesIO(data)))
    return sorted(records, key=lambda r: r["_kafka_offset"])


def schema_ids(staged: Staged) -> set[int]:
    return {
        parsed.key.schema_id
        for parsed in map(parse_name, staged.files)
        if isinstance(parsed, AvroFileName) and parsed.key.table == "customers_changelog"
    }


def test_json_converter_events_stage_as_the_avro_converter_s_changelog_records(tmp_path):
    stream = changes()
    by_avro = stage(tmp_path / "avro", debezium(), TOPIC, AVRO_IDS, messages("avro", stream),
                    native=False)  # fmt: skip
    by_json = stage(tmp_path / "json", debezium(), TOPIC, {}, messages("json", stream),
                    native=False)  # fmt: skip
    tombstones = sum(c.is_tombstone for c in stream)
    assert by_json.result.dead_letters == {} and by_json.result.tombstones == tombstones
    assert by_json.result.records == by_avro.result.records == len(stream) - tombstones
    # The same rows, change columns and enrichment, record by record; only the key column
    # differs, each converter writing its own key bytes.
    strip = [{k: v for k, v in r.items() if k != "_kafka_key"} for r in changelog_records(by_json)]
    assert strip == [{k: v for k, v in r.items() if k != "_kafka_key"}
                     for r in changelog_records(by_avro)]  # fmt: skip
    # Files carry the declared id of each Connect schema: one per schema version.
    assert schema_ids(by_json) == {
        schema_id(connect_value_schema(NS, 1)),
        schema_id(connect_value_schema(NS, 2)),
    }


def test_a_topic_may_mix_both_encodings(tmp_path):
    stream = changes(seed=5)
    mixed = ["json" if i % 3 else "avro" for i in range(len(stream))]
    by_avro = stage(tmp_path / "avro", debezium(), TOPIC, AVRO_IDS, messages("avro", stream),
                    native=False)  # fmt: skip
    by_mix = stage(tmp_path / "mix", debezium(), TOPIC, AVRO_IDS, messages(mixed, stream),
                   native=False)  # fmt: skip
    assert by_mix.result.dead_letters == {}
    drop_key = lambda records: [{k: v for k, v in r.items() if k != "_kafka_key"} for r in records]  # noqa: E731
    assert drop_key(changelog_records(by_mix)) == drop_key(changelog_records(by_avro))
    assert {4, 5} <= schema_ids(by_mix)


def test_the_native_kernel_hands_json_values_back_and_stages_the_same_files(tmp_path):
    pytest.importorskip("kbqe_dagster_kernel", reason="the native stage kernel is not built")
    stream = changes(seed=7)
    mixed = ["json" if i % 2 else "avro" for i in range(len(stream))]
    msgs = messages(mixed, stream)
    python = stage(tmp_path, debezium(), TOPIC, AVRO_IDS, msgs, native=False)
    native = stage(tmp_path, debezium(), TOPIC, AVRO_IDS, msgs, native=True, batch_size=1000)
    assert_same(python, native)
    json_changes = sum(1 for m in msgs if m.value() is not None and m.value()[:1] == b"{")
    assert native.result.dead_letters == {}
    # Every JSON change went back to the Python path and was staged there; the kernel staged
    # the Avro ones (and counted every tombstone itself).
    # (Its first five bytes are no frame it was taught: "schema_unknown", then the driver's
    # frame() finds no schema to teach, so the message goes to the Python path.)
    assert native.handbacks == {"schema_unknown": json_changes}
    assert sum(native.handed_back_records.values()) == json_changes
    assert native.kernel_messages == len(msgs) - json_changes


def test_a_json_value_without_its_schema_is_dead_lettered_saying_to_enable_schemas(tmp_path):
    schemaless = json.dumps({"before": None, "after": {"id": 1}, "op": "c"}).encode()
    msgs = [Msg(TOPIC, 0, 0, schemaless, key=b'{"id": 1}'), Msg(TOPIC, 0, 1, b"\x07garbage")]
    staged = stage(tmp_path, debezium(), TOPIC, {}, msgs, native=False)
    assert staged.result.dead_letters == {"unsupported_schema": 1, "bad_magic": 1}
    [letters] = [
        d for n, d in staged.files.items() if ".dead.letters." in n and n.endswith(".avro")
    ]
    by_offset = {r["offset"]: r for r in fastavro.reader(io.BytesIO(letters))}
    assert "value.converter.schemas.enable=true" in by_offset[0]["error"]
    assert by_offset[0]["schema_id"] is None  # a JSON value has no framed schema id
    assert by_offset[0]["raw_value"] == schemaless


@pytest.mark.parametrize(
    ("payload_change", "reason"),
    [
        (lambda p: {**p, "op": "m"}, "not_a_change"),  # a message event
        (lambda p: {**p, "after": {**p["after"], "id": "seven"}}, "json_schema_mismatch"),
        (lambda p: None, "not_a_change"),
    ],
)
def test_a_bad_json_change_is_dead_lettered_with_its_reason(tmp_path, payload_change, reason):
    stream = [c for c in changes() if c.op == "c"][:1]
    message = json.loads(json_value(stream[0], NS))
    message["payload"] = payload_change(message["payload"])
    bad = json.dumps(message, separators=(",", ":")).encode()
    msgs = [Msg(TOPIC, 0, 0, json_value(stream[0], NS)), Msg(TOPIC, 0, 1, bad)]
    staged = stage(tmp_path, debezium(), TOPIC, {}, msgs, native=False)
    assert staged.result.dead_letters == {reason: 1}
    assert staged.result.records == 1


FLAT_SCHEMA = {
    "type": "struct",
    "fields": [
        {"type": "int32", "optional": False, "field": "id"},
        {"type": "string", "optional": False, "field": "email"},
        {"type": "string", "optional": True, "field": "__op"},
        {"type": "int64", "optional": True, "field": "__source_ts_ms"},
        {"type": "string", "optional": True, "field": "__deleted"},
    ],
    "optional": False,
    "name": f"{NS}.Value",
}
"""ExtractNewRecordState (add.fields=op,source.ts_ms, delete.handling.mode=rewrite) through
JsonConverter: the row's fields, then the transform's."""


def test_extract_new_record_state_s_flat_form_stages_through_json_too(tmp_path):
    rows = [
        ({"id": 1, "email": "a@x", "__op": "c", "__source_ts_ms": 100, "__deleted": "false"}),
        ({"id": 1, "email": "b@x", "__op": "u", "__source_ts_ms": 200, "__deleted": "false"}),
        ({"id": 1, "email": "b@x", "__op": "d", "__source_ts_ms": 300, "__deleted": "true"}),
    ]
    key = b'{"schema":{"type":"struct","fields":[{"type":"int32","optional":false,"field":"id"}],' \
          b'"optional":false,"name":"%s.Key"},"payload":{"id":1}}' % NS.encode()  # fmt: skip
    msgs = [
        Msg(TOPIC, 0, i, envelope_bytes(FLAT_SCHEMA, row), key=key) for i, row in enumerate(rows)
    ]
    msgs.append(Msg(TOPIC, 0, 3, None, key=key))  # the tombstone after the delete
    staged = stage(tmp_path, debezium(), TOPIC, {}, msgs, native=False)
    assert staged.result.dead_letters == {} and staged.result.tombstones == 1
    records = changelog_records(staged)
    assert [
        (r["_op"], r["_source_ts_ms"], r["_deleted"], r["id"], r["email"]) for r in records
    ] == [
        ("c", 100, False, 1, "a@x"),
        ("u", 200, False, 1, "b@x"),
        ("d", 300, True, 1, "b@x"),
    ]
    # The changelog holds the row's fields only: the transform's fields became change columns.
    assert [k for k in records[0] if not k.startswith("_")] == ["id", "email"]


def envelope_bytes(schema: dict, payload: dict) -> bytes:
    return json.dumps({"schema": schema, "payload": payload}, separators=(",", ":")).encode()
