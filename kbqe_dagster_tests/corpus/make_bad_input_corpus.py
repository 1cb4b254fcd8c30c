"""Writes the bad-input corpus (``bad_input/``) deterministically: the corpus schemas, one
directory per case with its raw bytes, and the manifest ``cases.yaml``.

    .venv/bin/python -m kbqe_dagster_tests.corpus.make_bad_input_corpus [--out DIR]

The committed files are the source of truth; this script shows how each case was made, and
``test_bad_input_corpus.py`` checks that it still reproduces them byte for byte. Random cases
come from one fixed seed. The expected reasons are written here from the rules of DESIGN.md
§2, not by running the stager; every framed body is checked against fastavro (an independent
decoder) so a case meant to fail routing or event time is not accidentally malformed, and a
case meant to be malformed really is.
"""

from __future__ import annotations

import argparse
import io
import json
import random
import shutil
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from fastavro import parse_schema, schemaless_reader, schemaless_writer

CORPUS_DIR = Path(__file__).resolve().parent / "bad_input"
SEED = 20240913
MAX_MESSAGE_SIZE = 1024  # the corpus topic's staging.max_message_size
UNKNOWN_SCHEMA_ID = 2_147_483_392  # 0x7fffff00: valid as an id, assigned by no test registry

_NS = "com.acme.corpus"
_ROUTE = [{"name": "datasetName", "type": "string"}, {"name": "tableName", "type": "string"}]
SCHEMAS: dict[str, tuple[str, Any]] = {
    "order": (
        "AVRO",
        {
            "type": "record",
            "name": "Order",
            "namespace": _NS,
            "fields": [
                *_ROUTE,
                {"name": "orderId", "type": "string"},
                {"name": "amountCents", "type": "long"},
                {"name": "eventTime", "type": ["null", "string"], "default": None},
            ],
        },
    ),
    "reading": (
        "AVRO",
        {
            "type": "record",
            "name": "Reading",
            "namespace": _NS,
            "fields": [
                *_ROUTE,
                {"name": "sensorId", "type": "string"},
                {"name": "celsius", "type": "double"},
                {"name": "eventEpochMs", "type": ["null", "long"], "default": None},
            ],
        },
    ),
    "click": (
        "AVRO",
        {
            "type": "record",
            "name": "Click",
            "namespace": _NS,
            "fields": [
                *_ROUTE,
                {"name": "url", "type": "string"},
                {"name": "occurredAt", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            ],
        },
    ),
    # Routable, but without any event-time candidate field.
    "ping": (
        "AVRO",
        {
            "type": "record",
            "name": "Ping",
            "namespace": _NS,
            "fields": [*_ROUTE, {"name": "note", "type": ["null", "string"], "default": None}],
        },
    ),
    # A valid Avro schema that is not a record: nothing to route, nothing to enrich.
    "string_value": ("AVRO", "string"),
    "json_object": ("JSON", {"type": "object", "properties": {"x": {"type": "string"}}}),
}
_FILE_SUFFIX = {"AVRO": ".avsc", "JSON": ".json"}

# The pipeline the expectations assume; the test fills in the topic name.
PIPELINE = {
    "version": 1,
    "topics": [
        {
            "name": "TOPIC",
            "routing": {"mode": "fields"},
            "event_time": {
                "fields": ["eventTime", "eventEpochMs", "occurredAt"],
                "epoch_unit": "ms",
            },
            "staging": {"max_message_size": MAX_MESSAGE_SIZE},
        }
    ],
    "allowed_destinations": ["acme_sales.*", "acme_web.*", "acme_iot.readings"],
}

GOOD_ORDER = {
    "datasetName": "acme_sales",
    "tableName": "orders",
    "orderId": "o-1",
    "amountCents": 1999,
    "eventTime": "2024-09-13T14:36:45.123+02:00[Europe/Paris]",
}
GOOD_READING = {
    "datasetName": "acme_iot",
    "tableName": "readings",
    "sensorId": "s-7",
    "celsius": 21.5,
    "eventEpochMs": 1_726_238_205_123,
}  # 2024-09-13T14:36:45.123Z
GOOD_CLICK = {
    "datasetName": "acme_web",
    "tableName": "clicks",
    "url": "/p/1",
    "occurredAt": 1_726_238_205_123,
}
MS_AT_YEAR_10000 = 253_402_300_800_000  # 10000-01-01T00:00:00Z: one ms after the last valid


@dataclass
class Case:
    name: str
    expect: str  # a Reason value, or "staged" for a good control message
    why: str
    value: bytes | None  # the Avro body when ``schema`` is set, else the whole value
    schema: str | None = None
    key: bytes | None = None
    headers: list[list[Any]] = field(default_factory=list)
    table: str | None = None
    event_date: str | None = None


def encode(schema_name: str, record: Any, *, raw_logical: bool = False) -> bytes:
    """The Avro body of ``record``; ``raw_logical`` writes logical longs as plain longs."""
    schema = SCHEMAS[schema_name][1]
    if raw_logical:
        text = json.dumps(schema).replace('"logicalType": "timestamp-millis"', '"x": 0')
        schema = json.loads(text)
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), record)
    return out.getvalue()


def frame(schema_id: int, body: bytes) -> bytes:
    return struct.pack(">BI", 0, schema_id) + body


def zigzag(n: int) -> bytes:
    """An Avro long (zig-zag varint), to hand-build malformed bodies."""
    z = (n << 1) ^ (n >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


def avro_string(raw: bytes) -> bytes:
    return zigzag(len(raw)) + raw


def decodes_exactly(schema_name: str, body: bytes) -> bool:
    """fastavro's verdict: the body decodes under the schema and consumes every byte."""
    stream = io.BytesIO(body)
    try:
        schemaless_reader(stream, parse_schema(SCHEMAS[schema_name][1]))
    except Exception:  # noqa: BLE001 - any decoder failure means "does not decode"
        return False
    return stream.tell() == len(body)


def _padded_order(total_value_size: int) -> bytes:
    """A valid order body whose framed value is exactly ``total_value_size`` bytes."""
    for pad in range(total_value_size):
        body = encode("order", {**GOOD_ORDER, "orderId": "o-" + "x" * pad})
        if 5 + len(body) == total_value_size:
            return body
    raise AssertionError(f"no order body frames to {total_value_size} bytes")


def _random_body(rnd: random.Random, schema_name: str, size: int) -> bytes:
    while True:  # redraw until fastavro agrees it is not a valid body (first draw, in practice)
        body = rnd.randbytes(size)
        if not decodes_exactly(schema_name, body):
            return body


def _wire_reason(value: bytes) -> str:
    """The framing rules of DESIGN.md §2 for a random whole value."""
    if len(value) < 5:
        return "too_short"
    if value[0] != 0:
        return "bad_magic"
    return "unknown_schema_id"


def build_cases() -> list[Case]:
    rnd = random.Random(SEED)
    order = encode("order", GOOD_ORDER)
    cases = [
        # --- controls: must be staged, proving the bad cases fail for their own reason ------
        Case(
            "control_order",
            "staged",
            "a valid order with an ISO event time and zone id",
            order,
            "order",
            key=b"order-1",
            headers=[["trace-id", "t-1"]],
            table="acme_sales.orders",
            event_date="2024-09-13",
        ),
        Case(
            "control_reading",
            "staged",
            "a valid reading with an epoch-ms event time",
            encode("reading", GOOD_READING),
            "reading",
            table="acme_iot.readings",
            event_date="2024-09-13",
        ),
        Case(
            "control_click",
            "staged",
            "a valid click with an Avro timestamp-millis event time",
            encode("click", GOOD_CLICK),
            "click",
            table="acme_web.clicks",
            event_date="2024-09-13",
        ),
        Case(
            "control_at_size_limit",
            "staged",
            f"a valid order whose value is exactly max_message_size ({MAX_MESSAGE_SIZE} bytes)",
            _padded_order(MAX_MESSAGE_SIZE),
            "order",
            table="acme_sales.orders",
            event_date="2024-09-13",
        ),
        Case(
            "control_last_valid_iso_date",
            "staged",
            "ISO event time on 9999-12-31, the last day",
            encode("order", {**GOOD_ORDER, "eventTime": "9999-12-31T23:59:59.999Z"}),
            "order",
            table="acme_sales.orders",
            event_date="9999-12-31",
        ),
        Case(
            "control_last_valid_epoch_ms",
            "staged",
            "epoch ms of 9999-12-31T23:59:59.999Z",
            encode("reading", {**GOOD_READING, "eventEpochMs": MS_AT_YEAR_10000 - 1}),
            "reading",
            table="acme_iot.readings",
            event_date="9999-12-31",
        ),
        # --- framing ------------------------------------------------------------------------
        Case(
            "wrong_magic_byte",
            "bad_magic",
            "a valid frame whose magic byte is 0x01",
            b"\x01" + frame(0, order)[1:],
            key=b"order-17",
        ),
        Case(
            "plain_json_value",
            "bad_magic",
            "JSON text produced to an Avro topic ('{' first)",
            b'{"orderId": "o-1", "amountCents": 1999}',
        ),
        Case("truncated_header", "too_short", "3 of the 5 header bytes", b"\x00\x00\x00"),
        Case("empty_value", "too_short", "a zero-length value (not null: not a tombstone)", b""),
        Case(
            "tombstone",
            "tombstone",
            "a null value with a key: a compaction delete marker",
            None,
            key=b"order-42",
        ),
        Case(
            "unknown_schema_id",
            "unknown_schema_id",
            f"a valid order body framed with id {UNKNOWN_SCHEMA_ID}, which no registry assigned",
            frame(UNKNOWN_SCHEMA_ID, order),
        ),
        Case(
            "schema_id_top_bit_set",
            "unknown_schema_id",
            "id 0x80000001: negative as Java's signed int, so no registry can hold it",
            b"\x00\x80\x00\x00\x01" + order,
        ),
        Case(
            "non_avro_schema_id",
            "non_avro_schema",
            "a JSON document framed with a JSON id",
            b'{"x": "y"}',
            "json_object",
        ),
        Case(
            "schema_not_a_record",
            "unsupported_schema",
            'an Avro string framed with the id of the schema "string" (not a record)',
            avro_string(b"hello"),
            "string_value",
        ),
        # --- body -----------------------------------------------------------------------------
        Case(
            "truncated_body_half",
            "body_decode_error",
            "the first half of a valid order body",
            order[: len(order) // 2],
            "order",
        ),
        Case(
            "truncated_body_last_byte",
            "body_decode_error",
            "a valid order body minus one byte",
            order[:-1],
            "order",
        ),
        Case(
            "empty_body",
            "body_decode_error",
            "a 5-byte frame: the order schema needs fields",
            b"",
            "order",
        ),
        Case(
            "trailing_bytes",
            "body_decode_error",
            "a valid order body followed by 9 bytes",
            order + b"\x00trailing",
            "order",
        ),
        Case(
            "trailing_zero_byte",
            "body_decode_error",
            "a valid order body followed by one 0x00",
            order + b"\x00",
            "order",
        ),
        Case(
            "bad_union_index",
            "body_decode_error",
            "eventTime's union branch index is 2 of 0..1",
            # eventTime null ends the body with its union index 0; index 2 replaces it.
            encode("order", {**GOOD_ORDER, "eventTime": None})[:-1] + zigzag(2),
            "order",
        ),
        Case(
            "invalid_utf8_string",
            "body_decode_error",
            "orderId holds bytes ff fe (not UTF-8)",
            avro_string(b"acme_sales")
            + avro_string(b"orders")
            + avro_string(b"\xff\xfe")
            + zigzag(1999)
            + zigzag(0),
            "order",
        ),
        Case(
            "negative_string_length",
            "body_decode_error",
            "datasetName's length is -1",
            zigzag(-1) + order,
            "order",
        ),
        Case(
            "timestamp_millis_beyond_9999",
            "body_decode_error",
            "occurredAt (timestamp-millis) is 10000-01-01: not a representable Avro logical "
            "value, so the body is invalid as decoded (and BigQuery could not load it)",
            encode("click", {**GOOD_CLICK, "occurredAt": MS_AT_YEAR_10000}, raw_logical=True),
            "click",
        ),
        # --- event time -----------------------------------------------------------------------
        Case(
            "event_time_null",
            "missing_event_time",
            "eventTime is null and no fallback is set",
            encode("order", {**GOOD_ORDER, "eventTime": None}),
            "order",
        ),
        Case(
            "no_event_time_field",
            "missing_event_time",
            "the ping schema has no candidate field",
            encode("ping", {"datasetName": "acme_web", "tableName": "pings", "note": "hi"}),
            "ping",
        ),
        Case(
            "event_time_not_a_time",
            "invalid_event_time",
            'eventTime is "not a time"',
            encode("order", {**GOOD_ORDER, "eventTime": "not a time"}),
            "order",
        ),
        Case(
            "event_time_empty_string",
            "invalid_event_time",
            "eventTime is present but empty",
            encode("order", {**GOOD_ORDER, "eventTime": ""}),
            "order",
        ),
        Case(
            "event_time_year_10000_iso",
            "invalid_event_time",
            "eventTime 10000-01-01T00:00:00Z: after 9999-12-31",
            encode("order", {**GOOD_ORDER, "eventTime": "10000-01-01T00:00:00Z"}),
            "order",
        ),
        Case(
            "event_time_year_0_iso",
            "invalid_event_time",
            "eventTime 0000-12-31: before year 1",
            encode("order", {**GOOD_ORDER, "eventTime": "0000-12-31T00:00:00Z"}),
            "order",
        ),
        Case(
            "epoch_ms_first_after_9999",
            "invalid_event_time",
            "eventEpochMs 253402300800000 = 10000-01-01T00:00:00Z, one ms past the range",
            encode("reading", {**GOOD_READING, "eventEpochMs": MS_AT_YEAR_10000}),
            "reading",
        ),
        Case(
            "epoch_ms_max_long",
            "invalid_event_time",
            "eventEpochMs 2**63-1: ~292 million years",
            encode("reading", {**GOOD_READING, "eventEpochMs": 2**63 - 1}),
            "reading",
        ),
        Case(
            "epoch_ms_min_long",
            "invalid_event_time",
            "eventEpochMs -2**63: before 0001-01-01",
            encode("reading", {**GOOD_READING, "eventEpochMs": -(2**63)}),
            "reading",
        ),
        # --- routing --------------------------------------------------------------------------
        Case(
            "dataset_not_allowed",
            "destination_not_allowed",
            "datasetName secret_hr: a dataset nobody declared",
            encode("order", {**GOOD_ORDER, "datasetName": "secret_hr", "tableName": "salaries"}),
            "order",
            headers=[["trace-id", "t-2"], ["empty", None]],
        ),
        Case(
            "table_not_allowed",
            "destination_not_allowed",
            "acme_iot.secrets: the dataset is declared for table readings only",
            encode("reading", {**GOOD_READING, "tableName": "secrets"}),
            "reading",
        ),
        Case(
            "empty_table_name",
            "unroutable",
            "tableName is the empty string",
            encode("order", {**GOOD_ORDER, "tableName": ""}),
            "order",
        ),
        Case(
            "invalid_dataset_name",
            "unroutable",
            "datasetName 'acme-sales!' is not a name",
            encode("order", {**GOOD_ORDER, "datasetName": "acme-sales!"}),
            "order",
        ),
        # --- size -----------------------------------------------------------------------------
        Case(
            "oversized_by_one_byte",
            "oversized",
            f"a valid order whose value is {MAX_MESSAGE_SIZE + 1} bytes",
            _padded_order(MAX_MESSAGE_SIZE + 1),
            "order",
        ),
        Case(
            "oversized_garbage",
            "oversized",
            "4096 random bytes: size is judged before anything else",
            rnd.randbytes(4096),
        ),
    ]
    # --- random bytes (seeded) ---------------------------------------------------------------
    for name, size in (("random_bytes_48", 48), ("random_bytes_3", 3)):
        value = rnd.randbytes(size)
        cases.append(
            Case(name, _wire_reason(value), f"{size} random bytes", value, key=rnd.randbytes(8))
        )
    while True:
        value = b"\x00" + rnd.randbytes(40)
        if struct.unpack(">I", value[1:5])[0] >= 1_000_000:  # far above any test registry's ids
            break
    cases.append(
        Case(
            "random_after_magic_byte",
            _wire_reason(value),
            "0x00 then 40 random bytes: the schema id is random",
            value,
        )
    )
    for schema_name, size in (("order", 40), ("click", 24)):
        cases.append(
            Case(
                f"random_body_{schema_name}",
                "body_decode_error",
                f"{size} random bytes framed with the {schema_name} schema's id",
                _random_body(rnd, schema_name, size),
                schema_name,
            )
        )
    return cases


def check(cases: list[Case]) -> None:
    """Self-checks against fastavro and the size rule; raises AssertionError."""
    names = [c.name for c in cases]
    assert len(names) == len(set(names)), "case names must be unique"
    for case in cases:
        schema_type, schema = SCHEMAS[case.schema] if case.schema else (None, None)
        if schema_type != "AVRO" or not isinstance(schema, dict):
            continue  # fastavro judges record bodies; the other framed cases fail earlier
        body_ok = decodes_exactly(case.schema, case.value)
        assert body_ok == (case.expect != "body_decode_error"), f"{case.name}: fastavro disagrees"
        size = 5 + len(case.value)
        assert (size > MAX_MESSAGE_SIZE) == (case.expect == "oversized"), f"{case.name}: {size}"


def write(out: Path) -> None:
    cases = build_cases()
    check(cases)
    shutil.rmtree(out / "cases", ignore_errors=True)
    shutil.rmtree(out / "schemas", ignore_errors=True)
    (out / "schemas").mkdir(parents=True)
    schema_entries = {}
    for name, (schema_type, schema) in SCHEMAS.items():
        path = f"schemas/{name}{_FILE_SUFFIX[schema_type]}"
        (out / path).write_text(json.dumps(schema, indent=2) + "\n")
        schema_entries[name] = {"type": schema_type, "file": path}
    entries = []
    for case in cases:
        case_dir = out / "cases" / case.name
        case_dir.mkdir(parents=True)
        if case.value is not None:
            (case_dir / "value.bin").write_bytes(case.value)
        if case.key is not None:
            (case_dir / "key.bin").write_bytes(case.key)
        entry: dict[str, Any] = {"name": case.name, "expect": case.expect, "why": case.why}
        if case.schema:
            entry["schema"] = case.schema
        if case.value is None:
            entry["tombstone"] = True
        if case.headers:
            entry["headers"] = case.headers
        if case.table:
            entry["table"] = case.table
            entry["event_date"] = case.event_date
        entries.append(entry)
    manifest = {"seed": SEED, "pipeline": PIPELINE, "schemas": schema_entries, "cases": entries}
    header = (
        "# Generated by kbqe_dagster_tests/corpus/make_bad_input_corpus.py; see README.md.\n"
        "# Edit the generator, not this file.\n"
    )
    (out / "cases.yaml").write_text(header + yaml.safe_dump(manifest, sort_keys=False, width=100))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=CORPUS_DIR)
    write(parser.parse_args().out)


if __name__ == "__main__":
    main()
