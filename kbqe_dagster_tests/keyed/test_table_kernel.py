"""The native kernel stages topics keyed by their Kafka key (``keyed.key_from: kafka_key``) with
Avro, ``format: json`` or ``format: json_schema`` values exactly as the Python path does (keyed/table_stage.py,
keyed/table_changes.py).

Every test stages the same messages both ways and requires identical committed files (avro,
dead-letter and done files, byte for byte) and identical counts, tombstones included, and that
the kernel staged the messages it should — key columns, values made nullable, tombstones as
deletes — so equality is not that of a kernel handing everything back. The seeded differential
fuzz (table_fuzz.py, Avro and JSON values) runs a 6,400-message slice by default;
``--kernel-fuzz-cases 100000 --timeout 0`` runs 250 scenarios (100,000 messages, ~4.5 min).
"""

from __future__ import annotations

import io
import json
import random
from collections import Counter
from datetime import UTC, datetime
from typing import Any

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.resources.schema_registry import RegisteredSchema
from kbqe_dagster_tests.keyed import table_fuzz
from kbqe_dagster_tests.keyed.table_topics import (
    KAFKA_MS,
    KEY,
    KEY_ID,
    TOPIC,
    VALUE,
    VALUE_ID,
    avro,
    avro_key,
    changelog,
    customer,
    dead_letters,
    pipeline,
)
from kbqe_dagster_tests.staging.kernel_equality import (
    Msg,
    Staged,
    assert_same,
    fuzz_seeds,
    stage,
)
from kbqe_dagster_tests.support import protobuf_format as orders

kernel = pytest.importorskip(
    "kbqe_dagster_kernel", reason="the native stage kernel is not built (no cargo)"
)
if not hasattr(kernel.StageKernel, "add_table_layout"):
    pytest.skip(
        "the installed kernel predates table topics (make install)", allow_module_level=True
    )

SCHEMAS = {VALUE_ID: VALUE, KEY_ID: KEY}
DEFAULT_FUZZ_CASES = 16_000
SUITE_SCENARIOS = 16
"""The suite's slice of the fuzz (6,400 messages, ~20 s: CI's 90 minutes are nearly spent);
``--kernel-fuzz-cases`` above its default runs every seed it asks for."""


def both(tmp_path, config, messages, schemas=SCHEMAS, batch_size=64) -> tuple[Staged, Staged]:
    msgs = [Msg(TOPIC, 0, offset, value, key=key) for offset, (value, key) in enumerate(messages)]
    python = stage(tmp_path, config, TOPIC, schemas, msgs, native=False)
    native = stage(tmp_path, config, TOPIC, schemas, msgs, native=True, batch_size=batch_size)
    assert_same(python, native)
    return python, native


def table_rows(key: Any) -> list:
    """Upserts, a tombstone, a re-create and an update of two keys."""
    return [
        (customer(1, "Ada", "gold"), key(1)),
        (customer(2, "Bob"), key(2)),
        (None, key(1)),
        (customer(1, "Ada again"), key(1)),
        (customer(2, "Bob", "silver", updated_at=7), key(2)),
        (None, key(2)),
    ]


KEYS = {
    "avro": ({}, avro_key),
    "string": ({"key_format": "string", "key": ["customer_key"]}, lambda i: b"C-%d" % i),
    "json": (
        {"key_format": "json", "key": ["region", "id"], "key_types": {"id": "long"}},
        lambda i: json.dumps({"id": i, "region": "eu"}).encode(),
    ),
}


@pytest.mark.parametrize("key_format", sorted(KEYS))
def test_every_message_tombstones_included_is_staged_by_the_kernel_as_python_stages_it(
    tmp_path, key_format
) -> None:
    keyed, key = KEYS[key_format]
    python, native = both(tmp_path, pipeline(keyed), table_rows(key))
    assert native.kernel_messages == 6 and native.handbacks == {}
    assert native.result.tombstones == python.result.tombstones == 2
    rows = [(r["_op"], r["_deleted"], r.get("name")) for _, r in changelog(python)]
    assert rows == [
        ("u", False, "Ada"), ("u", False, "Bob"), ("d", True, None), ("u", False, "Ada again"),
        ("u", False, "Bob"), ("d", True, None),
    ]  # fmt: skip


def json_customer(id_: int, name: str, tier: str | None = None, updated_at: int = 5) -> bytes:
    return json.dumps({"id": id_, "name": name, "tier": tier, "updated_at": updated_at}).encode()


@pytest.mark.parametrize("key_format", sorted(KEYS))
def test_format_json_values_are_encoded_as_declared_then_staged_by_the_kernel_as_python_does(
    tmp_path, key_format
) -> None:
    if not hasattr(kernel.StageKernel, "table_json_values"):
        pytest.skip("the installed kernel predates table topics' JSON values (make install)")
    keyed, key = KEYS[key_format]
    config = pipeline({**keyed, "version": "updated_at"}, format="json", schema=VALUE)
    rows = [
        (json_customer(1, "Ada", "gold"), key(1)),
        (b'{"updated_at": 6, "name": "Bob", "id": 2}', key(2)),  # tier left out: its default
        (None, key(1)),
        (b'{"id": 1, "name": "Ada again"', key(1)),  # not JSON: back, and dead-lettered
        (b'{"id": 1, "name": "Ada", "updated_at": "7"}', key(1)),  # not as declared: the same
        (json_customer(2, "Bob", "silver", updated_at=7), key(2)),
        (None, key(2)),
    ]
    python, native = both(tmp_path, config, rows, schemas={KEY_ID: KEY})
    assert native.kernel_messages == 5 and native.handbacks == {"json_uncertain": 2}
    assert [reason for reason, _ in dead_letters(native)] == [
        "json_decode_error", "json_schema_mismatch"
    ]  # fmt: skip
    rows = [
        (r["_op"], r["_source_ts_ms"], r.get("name"), r.get("tier")) for _, r in changelog(python)
    ]
    assert rows == [
        ("u", 5, "Ada", "gold"), ("u", 6, "Bob", None), ("d", KAFKA_MS, None, None),
        ("u", 7, "Bob", "silver"), ("d", KAFKA_MS, None, None),
    ]  # fmt: skip


CUSTOMER_JSON_SCHEMA = {
    "type": "object",
    "required": ["id", "name", "updated-at"],
    "properties": {
        "id": {"type": "integer"},
        "name": {"type": "string", "minLength": 1},
        "tier": {"type": ["string", "null"]},
        "updated-at": {"type": "integer"},  # the Avro field updated_at: found by its JSON key
        "since": {"type": "string", "format": "date-time"},
    },
}
JSON_SCHEMA_ID = 9


@pytest.mark.parametrize("key_format", sorted(KEYS))
def test_format_json_schema_values_are_validated_and_encoded_then_staged_by_the_kernel_as_python_does(
    tmp_path, key_format
) -> None:
    if not hasattr(kernel.StageKernel, "table_json_schema_id"):
        pytest.skip("the installed kernel predates table topics' JSON Schema values (make install)")
    keyed, key = KEYS[key_format]
    config = pipeline({**keyed, "version": "updated_at"}, format="json_schema")
    registered = RegisteredSchema(JSON_SCHEMA_ID, "JSON", json.dumps(CUSTOMER_JSON_SCHEMA))

    def framed(value: dict | str) -> bytes:
        text = value if isinstance(value, str) else json.dumps(value)
        return encode_frame(JSON_SCHEMA_ID, text.encode())

    rows = [
        (framed({"id": 1, "name": "Ada", "tier": "gold", "updated-at": 5,
                 "since": "2024-09-13T14:36:45.5+02:00"}), key(1)),
        (framed({"updated-at": 6, "name": "Bob", "id": 2}), key(2)),  # tier and since left out
        (None, key(1)),
        (framed({"id": 1, "name": "", "updated-at": 7}), key(1)),  # minLength: back, dead letter
        (framed('{"id": 1, "name": "Ada"'), key(1)),  # not JSON: back, and dead-lettered
        (encode_frame(99, b"{}"), key(1)),  # an unknown schema id: the Python path's verdict
        (framed({"id": 2, "name": "Bob", "tier": "silver", "updated-at": 7}), key(2)),
        (None, key(2)),
    ]  # fmt: skip
    schemas = {KEY_ID: KEY, JSON_SCHEMA_ID: registered}
    python, native = both(tmp_path, config, rows, schemas=schemas)
    assert native.kernel_messages == 5
    assert native.handbacks == {"json_uncertain": 2, "table_unknown": 1}
    assert sorted(reason for reason, _ in dead_letters(native)) == [
        "json_decode_error", "json_schema_mismatch", "unknown_schema_id"
    ]  # fmt: skip
    rows = [
        (r["_op"], r["_source_ts_ms"], r.get("name"), r.get("tier"), r.get("since"))
        for _, r in changelog(python)
    ]
    since = datetime(2024, 9, 13, 12, 36, 45, 500000, tzinfo=UTC)
    assert rows == [
        ("u", 5, "Ada", "gold", since), ("u", 6, "Bob", None, None), ("d", KAFKA_MS, None, None, None),
        ("u", 7, "Bob", "silver", None), ("d", KAFKA_MS, None, None, None),
    ]  # fmt: skip


def test_format_protobuf_values_are_decoded_per_message_type_then_staged_by_the_kernel_as_python_does(
    tmp_path,
) -> None:
    if not hasattr(kernel.StageKernel, "table_protobuf_schema"):
        pytest.skip("the installed kernel predates table topics' Protobuf values (make install)")
    config = parse_pipeline_config({
        "version": 1,
        "topics": [{"name": orders.TOPIC, "format": "protobuf",
                    "routing": {"mode": "static", "dataset": "shop", "table": "orders"},
                    "keyed": {"key_from": "kafka_key", "key_format": "string", "key": ["order_key"]},
                    "event_time": {"fields": ["placed_at"], "kafka_timestamp_fallback": True}}],
        "dead_letter": {"dataset": "dead", "table": "letters"},
    })  # fmt: skip
    refund = orders.REFUND(order_id=1)
    refund.placed_at.seconds = 1_726_238_205
    values = [
        (orders.framed("v1", orders.order(i=1)), b"O-1"),
        (orders.framed("v1", refund, (1,)), b"O-1"),  # another message type of the same header
        (None, b"O-1"),
        (orders.framed("v2", orders.order(orders.ORDER_V2, 2, coupon="XMAS")), b"O-2"),
        (encode_frame(orders.IDS["v1"], b"\x00\x1a\xff"), b"O-2"),  # cut short: back, dead letter
        (encode_frame(orders.IDS["broken"], b"\x00"), b"O-2"),  # a schema that does not compile
        (orders.framed("v1", orders.order(i=3)), b"O-3"),
        (None, b"O-3"),
    ]
    msgs = [Msg(orders.TOPIC, 0, offset, value, key=key)
            for offset, (value, key) in enumerate(values)]  # fmt: skip
    inputs = (tmp_path, config, orders.TOPIC, {}, msgs)
    python = stage(*inputs, native=False, lookup=orders.fake_registry())
    native = stage(*inputs, native=True, batch_size=64, lookup=orders.fake_registry())
    assert_same(python, native)
    assert native.kernel_messages == 6
    assert native.handbacks == {"protobuf_uncertain": 1, "table_unknown": 1}
    assert sorted(reason for reason, _ in dead_letters(native)) == [
        "protobuf_decode_error", "unmappable_protobuf_schema"
    ]  # fmt: skip
    rows = [(r["_op"], r.get("id"), r.get("order_id"), r.get("coupon")) for _, r in
            _changelog_of(python, "orders_changelog")]  # fmt: skip
    assert rows == [
        ("u", 1, None, None), ("u", None, 1, None), ("d", None, None, None),
        ("u", 2, None, "XMAS"), ("u", 3, None, None), ("d", None, None, None),
    ]  # fmt: skip


def _changelog_of(result: Staged, table: str) -> list[tuple[list[str], dict[str, Any]]]:
    rows = []
    for name, data in result.files.items():
        if name.endswith(".avro") and table in name:
            rows += [([], record) for record in fastavro.reader(io.BytesIO(data))]
    return sorted(rows, key=lambda row: row[1]["_kafka_offset"])


def test_a_version_and_a_delete_field_are_read_by_the_kernel(tmp_path) -> None:
    value = {**VALUE, "fields": [*VALUE["fields"], {"name": "gone", "type": ["null", "boolean"]}]}
    rows = [
        (encode_frame(VALUE_ID, avro(value, {"id": 1, "name": "A", "tier": None,
                                             "updated_at": at, "gone": gone})), avro_key(1))
        for at, gone in ((5, None), (-7, False), (1_700_000_000_000, True))
    ]  # fmt: skip
    config = pipeline({"version": "updated_at", "delete_field": "gone"})
    python, native = both(tmp_path, config, rows, schemas={VALUE_ID: value, KEY_ID: KEY})
    assert native.kernel_messages == 3
    assert [(r["_op"], r["_source_ts_ms"]) for _, r in changelog(python)] == [
        ("u", 5),
        ("u", -7),
        ("d", 1_700_000_000_000),
    ]


BAD_KEYS = [
    ({}, None),
    ({}, b"C-1"),
    ({}, encode_frame(99, b"\x02")),
    ({}, encode_frame(KEY_ID, b"\x02\x00")),
    ({"key_format": "string", "key": ["k"]}, b"\xff"),
    ({"key_format": "json", "key": ["id"]}, b"[1]"),
    ({"key_format": "json", "key": ["id"]}, b"{}"),
    ({"key_format": "json", "key": ["id"], "key_types": {"id": "long"}}, b'{"id": "1"}'),
    ({"key_format": "json", "key": ["id"], "key_types": {"id": "double"}}, b'{"id": true}'),
]


@pytest.mark.parametrize(("keyed", "bad"), BAD_KEYS)
def test_a_key_the_kernel_cannot_read_goes_back_and_is_dead_lettered_with_python_s_reason(
    tmp_path, keyed, bad
) -> None:
    good = KEYS[keyed.get("key_format", "avro")][1](1)
    if keyed.get("key") == ["k"]:
        good = b"C-1"
    if keyed.get("key") == ["id"]:
        kind = keyed.get("key_types", {}).get("id", "string")
        good = {"string": b'{"id": "1"}', "long": b'{"id": 1}', "double": b'{"id": 1.5}'}[kind]
    messages = [(customer(1, "Ada"), good), (customer(1, "Ada"), bad), (None, bad), (None, good)]
    python, native = both(tmp_path, pipeline(keyed), messages)
    assert [reason for reason, _ in dead_letters(native)] == ["bad_key", "bad_key"]
    assert native.kernel_messages == 2


def test_connect_semantic_values_are_re_encoded_by_the_kernel_where_it_reads_them(tmp_path) -> None:
    zoned = {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}
    value = {**VALUE, "fields": [*VALUE["fields"], {"name": "at", "type": ["null", zoned]}]}
    rows = [
        (encode_frame(VALUE_ID, avro(value, {"id": 1, "name": "A", "tier": None, "updated_at": 5,
                                             "at": at})), avro_key(1))
        for at in ("2024-09-13T14:36:45.5+02:00", None, "not a time")
    ] + [(None, avro_key(1))]  # fmt: skip
    python, native = both(tmp_path, pipeline({}), rows, schemas={VALUE_ID: value, KEY_ID: KEY})
    # The time the kernel cannot read goes back; the Python path dead-letters it, naming it.
    assert native.kernel_messages == 3 and native.handbacks == {"change_uncertain": 1}
    assert python.result.dead_letters == {"unconvertible_value": 1}
    rows = changelog(python)
    assert rows[0][1]["at"].isoformat() == "2024-09-13T12:36:45.500000+00:00"
    assert rows[1][1]["at"] is None


def test_semantic_values_the_kernel_does_not_re_encode_leave_their_layout_to_python(
    tmp_path,
) -> None:
    zoned = {"type": "string", "connect.name": "io.debezium.time.ZonedTimestamp"}
    value = {**VALUE, "fields": [*VALUE["fields"],
                                 {"name": "ats", "type": {"type": "array", "items": zoned}}]}  # fmt: skip
    record = {"id": 1, "name": "A", "tier": None, "updated_at": 5, "ats": ["2024-09-13T12:36:45Z"]}
    rows = [(encode_frame(VALUE_ID, avro(value, record)), avro_key(1)), (None, avro_key(1))]
    python, native = both(tmp_path, pipeline({}), rows, schemas={VALUE_ID: value, KEY_ID: KEY})
    # The value's layout goes back; the tombstone's (key columns alone) is the kernel's.
    assert native.kernel_messages == 1 and python.result.records == 2


def test_table_differential_fuzz(tmp_path_factory, pytestconfig) -> None:
    """Seeded random table topics, 400 messages each, in consume batches of a seeded size:
    identical commits and tombstone counts on both paths, and the kernel stages nearly every
    message of the producer-like scenarios, of every key format."""
    share: dict[str, Counter[str]] = {}
    handbacks: Counter[str] = Counter()
    seeds = fuzz_seeds(pytestconfig)
    if pytestconfig.getoption("--kernel-fuzz-cases") <= DEFAULT_FUZZ_CASES:
        seeds = seeds[:SUITE_SCENARIOS]
    json_values = hasattr(kernel.StageKernel, "table_json_values")  # else: make install
    for seed in seeds:
        case = table_fuzz.scenario(seed, 400)
        if case.value_format == "json" and not json_values:
            continue
        tmp = tmp_path_factory.mktemp(f"tablefuzz{seed}")
        inputs = (tmp, case.pipeline, table_fuzz.TOPIC, case.schemas, case.messages)
        python = stage(*inputs, native=False, lookup=case.lookup)
        batch = random.Random(seed).choice([1, 7, 64, 1000])
        native = stage(*inputs, native=True, batch_size=batch, lookup=case.lookup)
        assert_same(python, native, f"seed {seed}")
        if python.result is None:
            continue
        plain = "" if case.adversarial else "plain "
        tally = share.setdefault(f"{plain}{case.key_format} key, {case.value_format}", Counter())
        tally["records"] += python.result.records
        tally["kernel"] += native.kernel_messages
        tally["tombstones"] += python.result.tombstones
        handbacks.update(native.handbacks or {})
    print(f"table kernel fuzz: {len(seeds)} scenarios, 0 disagreements; "
          f"{ {k: dict(v) for k, v in sorted(share.items())} }; hand-backs {dict(handbacks)}")  # fmt: skip
    for label, tally in share.items():
        if label.startswith("plain "):
            assert tally["kernel"] > 0.9 * tally["records"], (label, tally)
