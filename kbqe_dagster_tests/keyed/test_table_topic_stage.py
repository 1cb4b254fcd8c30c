"""A topic keyed by its Kafka key (``keyed.key_from: kafka_key``: a compacted topic, a KTable)
stages every message as a change of its key (keyed/table_stage.py, keyed/table_changes.py):
the key columns come from the Kafka key, the value's fields follow them, NULLABLE, a tombstone
is a delete of its key, and a key that cannot be read is bad input naming why. (The native
kernel's staging of the same topics is held equal to this path by test_table_kernel.py.)"""

from __future__ import annotations

import hmac
import io
import json
from typing import Any

import fastavro
import pytest

from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.staging.native_kernel import NativeStaging
from kbqe_dagster_tests.keyed.table_topics import (
    KAFKA_MS,
    KEY_ID,
    TOPIC,
    VALUE,
    avro_key,
    changelog,
    customer,
    dead_letters,
    pipeline,
    staged,
)
from kbqe_dagster_tests.staging.kernel_equality import Msg, assert_same, stage


def test_an_avro_key_s_fields_come_first_and_the_value_s_fields_follow_nullable(tmp_path) -> None:
    result = staged(tmp_path, pipeline({}), [(customer(1, "Ada", "gold"), avro_key(1))])
    [(columns, record)] = changelog(result)
    # The value's own ``id`` is left out: the Kafka key identifies the row.
    assert columns == ["_op", "_source_ts_ms", "_deleted", "id", "name", "tier", "updated_at"]
    assert {k: record[k] for k in columns} == {
        "_op": "u", "_source_ts_ms": KAFKA_MS, "_deleted": False,
        "id": 1, "name": "Ada", "tier": "gold", "updated_at": record["updated_at"],
    }  # fmt: skip
    [schema] = [
        fastavro.reader(io.BytesIO(data)).writer_schema
        for name, data in result.files.items()
        if "customers_changelog" in name and name.endswith(".avro")
    ]
    types = {f["name"]: f["type"] for f in schema["fields"]}
    assert types["id"] == "long"  # the key's column as the key's schema says
    assert types["name"] == ["null", "string"]  # a tombstone has no values: every one NULLABLE
    assert types["tier"] == ["null", "string"]


def test_a_tombstone_deletes_its_key_with_the_key_columns_alone(tmp_path) -> None:
    result = staged(tmp_path, pipeline({}), [
        (customer(1, "Ada"), avro_key(1)),
        (None, avro_key(1)),
        (customer(1, "Ada again"), avro_key(1)),  # re-created
    ])  # fmt: skip
    rows = changelog(result)
    assert [(r["_op"], r["_deleted"], r["id"], r.get("name")) for _, r in rows] == [
        ("u", False, 1, "Ada"), ("d", True, 1, None), ("u", False, 1, "Ada again"),
    ]  # fmt: skip
    value_columns, tombstone_columns = rows[0][0], rows[1][0]
    assert tombstone_columns == ["_op", "_source_ts_ms", "_deleted", "id"]
    assert value_columns[: len(tombstone_columns)] == tombstone_columns  # a prefix: loads by name
    assert result.result.tombstones == 1 and result.result.records == 3
    assert result.result.dead_letters == {}


def test_the_version_field_is_the_version_s_time_when_the_producer_has_one(tmp_path) -> None:
    result = staged(tmp_path, pipeline({"version": "updated_at"}),
                    [(customer(1, "Ada", updated_at=1_700_000_000_000), avro_key(1))])  # fmt: skip
    [(_, record)] = changelog(result)
    assert record["_source_ts_ms"] == 1_700_000_000_000


def test_a_string_key_is_one_column_named_by_the_config(tmp_path) -> None:
    config = pipeline({"key_format": "string", "key": ["customer_key"]})
    result = staged(tmp_path, config, [(customer(1, "Ada"), b"C-1"), (None, b"C-1")])
    rows = changelog(result)
    assert [r["customer_key"] for _, r in rows] == ["C-1", "C-1"]
    assert rows[0][0][3:5] == ["customer_key", "id"]  # the value's id is a column of its own


def test_a_json_key_gives_its_named_fields_in_their_types(tmp_path) -> None:
    config = pipeline({"key_format": "json", "key": ["region", "id"],
                       "key_types": {"id": "long"}})  # fmt: skip
    key = json.dumps({"id": 1, "region": "eu", "extra": True}).encode()
    [(columns, record)] = changelog(staged(tmp_path, config, [(customer(1, "Ada"), key)]))
    assert columns[3:6] == ["region", "id", "name"]
    assert (record["region"], record["id"]) == ("eu", 1)


@pytest.mark.parametrize(
    ("keyed", "key", "error"),
    [
        ({}, None, "the Kafka key is null: a table topic's key identifies the row"),
        ({}, b"C-1", "the Kafka key is not Confluent-framed Avro (keyed.key_format: avro"),
        ({}, encode_frame(99, b"\x02"), "the key's schema id 99 is not in the registry"),
        ({}, encode_frame(KEY_ID, b"\x02\x00"), "the Avro key does not decode with its schema"),
        ({"key_format": "string", "key": ["k"]}, b"\xff", "the Kafka key is not UTF-8 text"),
        ({"key_format": "json", "key": ["id"]}, b"[1]", "the Kafka key is JSON list, not an object"),
        ({"key_format": "json", "key": ["id"]}, b"{}", "the JSON key has no value for key field 'id'"),
        ({"key_format": "json", "key": ["id"], "key_types": {"id": "long"}}, b'{"id": "1"}',
         "the JSON key's field 'id' is \"1\", not a long (keyed.key_types)"),
        ({"key_format": "json", "key": ["id"]}, b'{"id": "\\ud800"}',
         "the JSON key's field 'id' is not Unicode text"),  # a lone surrogate: no UTF-8
    ],
)  # fmt: skip
def test_a_key_that_cannot_be_read_is_bad_input_naming_why(tmp_path, keyed, key, error) -> None:
    result = staged(tmp_path, pipeline(keyed), [(customer(1, "Ada"), key), (None, key)])
    letters = dead_letters(result)
    assert [reason for reason, _ in letters] == ["bad_key", "bad_key"]
    assert all(f"{TOPIC}[0] offset {i}: {error}" in text for i, (_, text) in enumerate(letters))
    assert changelog(result) == []


def test_a_json_topic_stages_its_values_the_same_way(tmp_path) -> None:
    schema = {k: v for k, v in VALUE.items() if k != "namespace"}
    config = pipeline({"key_format": "string", "key": ["customer_key"]}, format="json",
                      schema=schema)  # fmt: skip
    value = json.dumps({"id": 1, "name": "Ada", "tier": None, "updated_at": 5}).encode()
    rows = changelog(staged(tmp_path, config, [(value, b"C-1"), (b"{", b"C-1"), (None, b"C-1")]))
    assert [(r["_op"], r["customer_key"], r.get("name")) for _, r in rows] == [
        ("u", "C-1", "Ada"), ("d", "C-1", None),
    ]  # fmt: skip


SHORT = {"type": "record", "name": "Customer", "fields": [
    {"name": "id", "type": "long"}, {"name": "name", "type": "string"}]}  # fmt: skip
JSON_SCHEMA = {"type": "object", "title": "Customer", "additionalProperties": False,
               "properties": {"id": {"type": "integer"}, "name": {"type": "string"}},
               "required": ["id", "name"]}  # fmt: skip
PROTO = 'syntax = "proto3"; message Customer { int64 id = 1; string name = 2; }'


def decode_customer(raw: Any) -> tuple[dict, dict]:
    """A user decoder (``format: decoder``): ``id,name`` text."""
    id_, name = raw.value.decode().split(",")
    return {"id": int(id_), "name": name}, SHORT


def _proto_customer(id_: int, name: str) -> bytes:
    """``Customer {id, name}`` in the Protobuf wire format, written by hand."""
    text = name.encode()
    return b"\x08" + encode_long_unsigned(id_) + b"\x12" + bytes([len(text)]) + text


def encode_long_unsigned(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    return bytes([*out, value])


@pytest.mark.parametrize("fmt", ["json_schema", "protobuf", "decoder"])
def test_every_decoding_format_stages_its_values_the_same_way(tmp_path, fmt) -> None:
    from kbqe_dagster.resources.schema_registry import RegisteredSchema
    from kbqe_dagster_tests.support.fakes import FakeSchemaRegistry
    from kbqe_dagster_tests.support.framing import json_framed, protobuf_framed

    registered = {
        "json_schema": RegisteredSchema(31, "JSON", json.dumps(JSON_SCHEMA)),
        "protobuf": RegisteredSchema(31, "PROTOBUF", PROTO),
    }
    value = {
        "json_schema": json_framed(31, {"id": 1, "name": "Ada"}),
        "protobuf": protobuf_framed(31, _proto_customer(1, "Ada")),
        "decoder": b"1,Ada",
    }[fmt]
    extra = {"decoder": f"{__name__}:decode_customer"} if fmt == "decoder" else {}
    config = pipeline({"key_format": "string", "key": ["customer_key"]}, format=fmt, **extra)
    msgs = [Msg(TOPIC, 0, 0, value, key=b"C-1"), Msg(TOPIC, 0, 1, None, key=b"C-1")]
    registry = FakeSchemaRegistry({31: registered[fmt]} if fmt in registered else {})
    result = stage(tmp_path, config, TOPIC, {}, msgs, native=False, lookup=registry)
    rows = changelog(result)
    assert dead_letters(result) == []
    assert [(r["_op"], r["customer_key"], r.get("id"), r.get("name")) for _, r in rows] == [
        ("u", "C-1", 1, "Ada"), ("d", "C-1", None, None),
    ]  # fmt: skip
    assert rows[0][0][3:] == ["customer_key", "id", "name"]


TRANSFORMS = [
    {"mask": "name", "key_env": "KBQE_TEST_MASK_KEY"},
    {"rename": "id", "to": "customer_id"},
    {"add": "source", "value": "crm"},
    {"compute": "id_text", "expression": "str(customer_id)", "type": "string"},
]


@pytest.mark.parametrize("fmt", ["avro", "json", "json_schema", "protobuf", "decoder"])
def test_transforms_reshape_every_format_s_value_and_leave_the_key_and_tombstones_alone(
    tmp_path, monkeypatch, fmt
) -> None:
    """The changelog (so the current table and the history) holds the transformed value: an
    hmac-masked name, a renamed field, an added constant and a computed one; the key column is
    the Kafka key's, and a tombstone is its key's delete as without transforms. A range with
    transforms stays on the Python path (keyed/table_native.py)."""
    from kbqe_dagster.resources.schema_registry import RegisteredSchema
    from kbqe_dagster_tests.support.fakes import FakeSchemaRegistry
    from kbqe_dagster_tests.support.framing import json_framed, protobuf_framed

    monkeypatch.setenv("KBQE_TEST_MASK_KEY", "k")
    registered = {
        "avro": RegisteredSchema(31, "AVRO", SHORT),
        "json_schema": RegisteredSchema(31, "JSON", json.dumps(JSON_SCHEMA)),
        "protobuf": RegisteredSchema(31, "PROTOBUF", PROTO),
    }
    value = {
        "avro": encode_frame(31, _avro(SHORT, {"id": 1, "name": "Ada"})),
        "json": json.dumps({"id": 1, "name": "Ada"}).encode(),
        "json_schema": json_framed(31, {"id": 1, "name": "Ada"}),
        "protobuf": protobuf_framed(31, _proto_customer(1, "Ada")),
        "decoder": b"1,Ada",
    }[fmt]
    extra: dict[str, Any] = {"decoder": f"{__name__}:decode_customer"} if fmt == "decoder" else {}
    if fmt == "json":
        extra["schema"] = SHORT
    keyed = {"key_format": "string", "key": ["customer_key"]}
    config = pipeline(keyed, format=fmt, transforms=TRANSFORMS, **extra)
    msgs = [Msg(TOPIC, 0, 0, value, key=b"C-1"), Msg(TOPIC, 0, 1, None, key=b"C-1")]
    registry = FakeSchemaRegistry({31: registered[fmt]} if fmt in registered else {})
    python = stage(tmp_path, config, TOPIC, {}, msgs, native=False, lookup=registry)
    native = stage(tmp_path, config, TOPIC, {}, msgs, native=True, lookup=registry,
                   kernel_declines=True)  # fmt: skip
    assert_same(python, native)
    assert dead_letters(python) == []
    rows = changelog(python)
    masked = hmac.new(b"k", b"Ada", "sha256").hexdigest()
    assert rows[0][0][3:] == ["customer_key", "customer_id", "name", "source", "id_text"]
    assert {k: rows[0][1][k] for k in rows[0][0]} == {
        "_op": "u", "_source_ts_ms": KAFKA_MS, "_deleted": False, "customer_key": "C-1",
        "customer_id": 1, "name": masked, "source": "crm", "id_text": "1",
    }  # fmt: skip
    assert (rows[1][1]["_op"], rows[1][1]["customer_key"], rows[1][1].get("name")) == (
        "d", "C-1", None
    )  # fmt: skip


def _avro(schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


@pytest.mark.parametrize("fmt", ["avro", "json", "json_schema", "protobuf", "decoder"])
def test_the_native_kernel_takes_table_topics_of_its_formats_and_names_why_it_leaves_the_others(
    tmp_path, caplog, fmt
) -> None:
    """A table topic's range with Avro, JSON, JSON Schema or Protobuf values gets the kernel's
    table driver (keyed/table_native.py); a user decoder's stays on the Python path, named,
    not silent."""
    from kbqe_dagster.core.protocol.offsets import OffsetRange
    from kbqe_dagster.keyed.table_native import (
        DECODED_REASON,
        JSON_SCHEMA_METHOD,
        PROTOBUF_METHOD,
        TableNativeStaging,
    )
    from kbqe_dagster.resources.kafka.clients import KafkaSettings
    from kbqe_dagster.resources.schema_registry import RegistrySettings
    from kbqe_dagster.resources.staging_store import StagingLocation
    from kbqe_dagster.stager_registry import stager_class
    from kbqe_dagster.staging import native_kernel
    from kbqe_dagster.staging.context import StageContext

    schema = {k: v for k, v in VALUE.items() if k != "namespace"}
    string_key = {"key_format": "string", "key": ["k"]}
    config = {
        "avro": lambda: pipeline({}),
        "json": lambda: pipeline(string_key, format="json", schema=schema),
        "json_schema": lambda: pipeline(string_key, format="json_schema"),
        "protobuf": lambda: pipeline(string_key, format="protobuf"),
        "decoder": lambda: pipeline(
            string_key, format="decoder", decoder=f"{__name__}:decode_customer"
        ),  # fmt: skip
    }[fmt]()
    ctx = StageContext(KafkaSettings("127.0.0.1:9"), RegistrySettings("http://127.0.0.1:9"),
                       StagingLocation(str(tmp_path / "staging")), config, TOPIC,
                       native_kernel=True)  # fmt: skip
    stager = stager_class(ctx)(ctx, OffsetRange(TOPIC, 0, 0, 10), tmp_path)
    with caplog.at_level("DEBUG", logger="kbqe_dagster.keyed.table_native"):
        driver = NativeStaging.for_stager(stager)
    method = {"json": "table_json_values", "json_schema": JSON_SCHEMA_METHOD,
              "protobuf": PROTOBUF_METHOD}.get(fmt)  # fmt: skip
    kernel_takes = fmt == "avro" or (
        method is not None and hasattr(native_kernel._extension.StageKernel, method)
    ) if _kernel_built() else False  # fmt: skip
    if not _kernel_built():  # without a kernel every range is the Python path anyway
        assert driver is None
    elif kernel_takes:
        assert isinstance(driver, TableNativeStaging)
    else:  # (a kernel built before a format's values says so too)
        assert driver is None and DECODED_REASON in caplog.text


def _kernel_built() -> bool:
    from kbqe_dagster.staging import native_kernel

    return native_kernel._extension is not None


@pytest.mark.parametrize(
    ("kind", "value", "decoded"),
    [("string", "eu-1", "eu-1"), ("long", -42, -42), ("double", 2, 2.0), ("boolean", True, True)],
)
def test_a_json_key_field_is_encoded_as_its_key_type(tmp_path, kind, value, decoded) -> None:
    config = pipeline({"key_format": "json", "key": ["k"], "key_types": {"k": kind}})
    key = json.dumps({"k": value}).encode()
    [(_, record)] = changelog(staged(tmp_path, config, [(customer(1, "Ada"), key)]))
    assert record["k"] == decoded and type(record["k"]) is type(decoded)
