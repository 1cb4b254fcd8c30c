"""The record probe accepts exactly the bodies fastavro decodes to their full length, and
returns the wanted fields as fastavro decodes them — through its fast path and without it."""

from __future__ import annotations

import datetime as dt
import random
import uuid

import pytest

from kbqe_dagster.core.errors import BodyDecodeError, UnsupportedSchemaError
from kbqe_dagster.staging.probe.record_probe import RecordProbe
from kbqe_dagster_tests.staging.avro_fuzz import (
    ASCII_WORDS,
    WORDS,
    SchemaFactory,
    ValueFactory,
    corruptions,
    decode,
    encode,
    fastavro_verdict,
    parse,
    same,
)

UTC = dt.UTC
ORDER = {
    "type": "record", "name": "Order", "namespace": "com.acme",
    "fields": [
        {"name": "id", "type": {"type": "string", "logicalType": "uuid"}},
        {"name": "datasetName", "type": "string"},
        {"name": "tableName", "type": ["null", "string"]},
        {"name": "amount", "type": "double"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "payload", "type": ["null", {"type": "record", "name": "Payload", "fields": [
            {"name": "eventTime", "type": {"type": "long", "logicalType": "timestamp-millis"}},
            {"name": "day", "type": {"type": "int", "logicalType": "date"}},
        ]}]},
        {"name": "flag", "type": "boolean"},
    ],
}  # fmt: skip
PARSED, _ = parse(ORDER)
WHEN = dt.datetime(2024, 9, 13, 12, 36, 45, 123000, tzinfo=UTC)


def order(**overrides):
    value = {
        "id": "0f8fad5b-d9cb-469f-a165-70867728950e", "datasetName": "sales", "tableName": "orders",
        "amount": 12.5, "tags": ["a", "b"], "payload": {"eventTime": WHEN, "day": dt.date(2024, 9, 13)},
        "flag": True,
    }  # fmt: skip
    value.update(overrides)
    return encode(PARSED, value)


@pytest.fixture(params=[True, False], ids=["fast_path", "exact_only"])
def fast_path(request) -> bool:
    return request.param


def test_wanted_values_are_decoded_as_fastavro_does(fast_path):
    probe = RecordProbe(
        ORDER, ["datasetName", "tableName", "payload.eventTime", "payload"], fast_path=fast_path
    )
    assert probe.probe(order()) == {
        "datasetName": "sales",
        "tableName": "orders",
        "payload.eventTime": WHEN,
        "payload": {"eventTime": WHEN, "day": dt.date(2024, 9, 13)},
    }


def test_the_sample_schema_gets_a_fast_path():
    assert RecordProbe(ORDER, ["datasetName"]).has_fast_path


def test_a_path_through_an_untaken_union_branch_is_none(fast_path):
    probe = RecordProbe(ORDER, ["payload.eventTime", "tableName"], fast_path=fast_path)
    assert probe.probe(order(payload=None, tableName=None)) == {
        "payload.eventTime": None,
        "tableName": None,
    }


def test_paths_the_schema_cannot_have_are_left_out():
    probe = RecordProbe(ORDER, ["datasetName", "nope", "payload.nope", "tags.x", "amount.x"])
    assert probe.paths == ("datasetName",)
    assert probe.missing_paths == ("nope", "payload.nope", "tags.x", "amount.x")
    assert probe.probe(order()) == {"datasetName": "sales"}


def test_non_ascii_and_long_strings_are_decoded_exactly(fast_path):
    probe = RecordProbe(ORDER, ["datasetName", "tableName"], fast_path=fast_path)
    body = order(datasetName="Zürich " * 30, tableName="日本語")
    assert probe.probe(body) == {"datasetName": "Zürich " * 30, "tableName": "日本語"}


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_any_bytes_like_body_is_accepted(kind):
    assert RecordProbe(ORDER, ["datasetName"]).probe(kind(order())) == {"datasetName": "sales"}


GOOD = order()
# Offsets into GOOD: id (1 + 36 bytes), datasetName at 37 ("\x0asales"), tableName union at 43.
BAD_BODIES = {
    "truncated": GOOD[:-1],
    "empty": b"",
    "trailing byte": GOOD + b"\x00",
    "bad union index": GOOD[:43] + b"\x04" + GOOD[44:],
    "negative union index": GOOD[:43] + b"\x01" + GOOD[44:],
    "negative string length": GOOD[:37] + b"\x09" + GOOD[38:],
    "invalid utf-8 in a wanted string": GOOD[:38] + b"\xff" + GOOD[39:],
    "invalid utf-8 in an unwanted string": GOOD[:44] + b"\x0c\xc3\x28rder" + GOOD[51:],
    "boolean byte 2": GOOD[:-1] + b"\x02",
    "not a uuid": order(id="not-a-uuid"),
    "date beyond year 9999": order()[:-4] + b"\xc2\x82\xe6\x02" + b"\x01",  # day 2932897
}


@pytest.mark.parametrize("name", BAD_BODIES)
def test_invalid_bodies_raise_body_decode_error(name, fast_path):
    probe = RecordProbe(ORDER, ["datasetName"], fast_path=fast_path)
    with pytest.raises(BodyDecodeError) as caught:
        probe.probe(BAD_BODIES[name])
    assert caught.value.reason == "body_decode_error"
    assert "com.acme.Order" in str(caught.value)
    assert not probe.is_valid(BAD_BODIES[name])


@pytest.mark.parametrize("name", ["truncated", "trailing byte", "bad union index", "not a uuid",
                                  "invalid utf-8 in an unwanted string", "date beyond year 9999"])  # fmt: skip
def test_fastavro_rejects_the_same_bodies(name):
    assert fastavro_verdict(PARSED, BAD_BODIES[name])[0] == "reject"


def test_the_error_says_why():
    probe = RecordProbe(ORDER, [])
    with pytest.raises(BodyDecodeError, match="1 trailing bytes"):
        probe.probe(GOOD + b"\x00")
    with pytest.raises(BodyDecodeError, match="truncated"):
        probe.probe(GOOD[:20])
    with pytest.raises(BodyDecodeError, match="union index 2 out of range"):
        probe.probe(BAD_BODIES["bad union index"])


LOGICAL_EDGES = [
    ({"type": "int", "logicalType": "date"}, "int", [-719162, -719163, 2932896, 2932897, 0, -712704, 712703]),
    ({"type": "long", "logicalType": "timestamp-millis"}, "long",
     [-62135596800000, -62135596800001, 253402300799999, 253402300800000, 61 * 10**12, -61 * 10**12]),
    ({"type": "long", "logicalType": "timestamp-micros"}, "long",
     [-62135596800000000, -62135596800000001, 253402300799999999, 253402300800000000, 36 * 10**15]),
    ({"type": "long", "logicalType": "local-timestamp-millis"}, "long", [-62135596800001, 253402300799999]),
    ({"type": "int", "logicalType": "time-millis"}, "int", [0, 86399999, 86400000, -1, -3600001]),
]  # fmt: skip


@pytest.mark.parametrize("logical, base, values", LOGICAL_EDGES, ids=lambda x: str(x)[:40])
def test_logical_ranges_match_fastavro_at_the_edges(logical, base, values, fast_path):
    schema = {"type": "record", "name": "L", "fields": [{"name": "v", "type": logical}]}
    raw = parse({"type": "record", "name": "L", "fields": [{"name": "v", "type": base}]})[0]
    parsed = parse(schema)[0]
    probe = RecordProbe(schema, ["v"], fast_path=fast_path)
    for value in values:
        body = encode(raw, {"v": value})
        accepted, expected = decode(parsed, body)
        assert probe.is_valid(body) is accepted, value
        if accepted:
            assert probe.probe(body) == {"v": expected["v"]}


def test_a_schema_that_is_not_a_record_is_unsupported():
    with pytest.raises(UnsupportedSchemaError, match="not a record"):
        RecordProbe({"type": "array", "items": "string"}, [])
    with pytest.raises(UnsupportedSchemaError, match="does not parse"):
        RecordProbe({"type": "record", "name": "X", "fields": [{"name": "a", "type": "nope"}]}, [])


def test_recursive_schemas_use_the_exact_decoder():
    schema = {"type": "record", "name": "Node", "fields": [
        {"name": "value", "type": "string"}, {"name": "next", "type": ["null", "Node"]}]}  # fmt: skip
    parsed = parse(schema)[0]
    body = encode(
        parsed, {"value": "a", "next": {"value": "b", "next": {"value": "c", "next": None}}}
    )
    probe = RecordProbe(schema, ["value", "next.value", "next"])
    assert not probe.has_fast_path
    assert probe.probe(body) == {
        "value": "a", "next.value": "b", "next": {"value": "b", "next": {"value": "c", "next": None}},
    }  # fmt: skip
    assert not probe.is_valid(body[:-1])


def test_the_fast_path_pauses_when_most_bodies_miss_it_and_stays_exact():
    probe = RecordProbe(ORDER, ["datasetName"])
    long_body = order(datasetName="x" * 100)  # a 2-byte length: never matches the fast path
    for _ in range(1100):
        assert probe.probe(long_body) == {"datasetName": "x" * 100}
    assert not probe.fast_path_active
    assert probe.probe(GOOD) == {"datasetName": "sales"}
    with pytest.raises(BodyDecodeError):
        probe.probe(GOOD + b"\x00")


# --- differential fuzzing against fastavro ---------------------------------------------------
def _paths(schema) -> list[str]:
    paths = []
    for f in schema["fields"]:
        paths.append(f["name"])
        branches = f["type"] if isinstance(f["type"], list) else [f["type"]]
        for b in branches:
            if isinstance(b, dict) and b.get("type") == "record":
                paths += [f"{f['name']}.{g['name']}" for g in b["fields"]]
    return paths


def _expected(value, path):
    for part in path.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


@pytest.mark.parametrize("seed", range(40))
def test_probe_agrees_with_fastavro_on_random_schemas_values_and_corruptions(seed):
    rng = random.Random(seed)
    schema = SchemaFactory(rng).record(recursive=seed % 5 == 0)
    parsed, named = parse(schema)
    values = ValueFactory(rng, named, ASCII_WORDS if seed % 2 else WORDS)
    paths = _paths(schema)
    probes = [
        RecordProbe(schema, paths, fast_path=True),
        RecordProbe(schema, paths, fast_path=False),
    ]
    checked = {"valid": 0, "reject": 0}
    for _ in range(12):
        body = encode(parsed, values.value(parsed))
        for candidate in [body, *corruptions(rng, body)]:
            verdict, decoded = fastavro_verdict(parsed, candidate)
            for probe in probes:
                try:
                    got = probe.probe(candidate)
                except BodyDecodeError:
                    assert verdict != "valid", (seed, candidate, probe.has_fast_path)
                    continue
                assert verdict != "reject", (seed, candidate, probe.has_fast_path)
                wanted = {p: _expected(decoded, p) for p in paths}
                assert same(got, wanted), (seed, candidate)
            checked[verdict if verdict != "lenient" else "valid"] += 1
    assert checked["valid"] >= 12 and checked["reject"] > 0


def test_fuzzing_reaches_the_fast_path_and_its_fallback():
    rng = random.Random(7)
    schema = {"type": "record", "name": "S", "fields": [
        {"name": "s", "type": "string"}, {"name": "n", "type": "long"},
        {"name": "u", "type": {"type": "string", "logicalType": "uuid"}}]}  # fmt: skip
    parsed = parse(schema)[0]
    probe = RecordProbe(schema, ["s", "n", "u"])
    for text in ["", "short", "x" * 64, "é"]:
        for u in [
            uuid.uuid4(),
            "0F8FAD5B-D9CB-469F-A165-70867728950E",
            "{0f8fad5b-d9cb-469f-a165-70867728950e}",
        ]:
            body = encode(parsed, {"s": text, "n": rng.randint(-(2**63), 2**63 - 1), "u": u})
            assert probe.probe(body) == {k: v for k, v in decode(parsed, body)[1].items()}


# --- arrays the fuzzer leaves out (fastavro itself would loop on their corruptions) -----------
ARRAYS = {"type": "record", "name": "A", "fields": [
    {"name": "nulls", "type": {"type": "array", "items": "null"}},
    {"name": "ids", "type": {"type": "array", "items": {"type": "fixed", "name": "Id", "size": 4}}},
    {"name": "scores", "type": {"type": "map", "values": "double"}},
]}  # fmt: skip


@pytest.mark.parametrize("value", [
    {"nulls": [], "ids": [], "scores": {}},
    {"nulls": [None] * 3, "ids": [b"abcd", b"efgh"], "scores": {"a": 1.5, "é": -2.0}},
])  # fmt: skip
def test_arrays_of_constant_width_items_are_skipped_and_read(value, fast_path):
    parsed = parse(ARRAYS)[0]
    body = encode(parsed, value)
    assert RecordProbe(ARRAYS, [], fast_path=fast_path).probe(body) == {}
    assert RecordProbe(ARRAYS, ["nulls", "ids", "scores"], fast_path=fast_path).probe(body) == value
    assert not RecordProbe(ARRAYS, [], fast_path=fast_path).is_valid(body[:-2])


def test_a_negative_block_count_with_its_byte_size_is_valid_avro(fast_path):
    # nulls: 2 items in a block written as count -2, size 0; ids: -1 item, size 4; empty map.
    body = b"\x03\x00\x00" + b"\x01\x08abcd\x00" + b"\x00"
    assert decode(parse(ARRAYS)[0], body) == (
        True,
        {"nulls": [None, None], "ids": [b"abcd"], "scores": {}},
    )
    probe = RecordProbe(ARRAYS, ["nulls", "ids"], fast_path=fast_path)
    assert probe.probe(body) == {"nulls": [None, None], "ids": [b"abcd"]}


@pytest.mark.parametrize("body", [
    b"\x80\x80\x80\x80\x80\x80\x80\x80\x10\x00\x00",  # 2**62 nulls in one block
    b"\x00\xfe\xff\xff\xff\x0f\x00",  # ids: 2**31 - 1 four-byte items in a 7-byte body
])  # fmt: skip
def test_absurd_item_counts_are_rejected_quickly(body, fast_path):
    with pytest.raises(BodyDecodeError):
        RecordProbe(ARRAYS, ["nulls"], fast_path=fast_path).probe(body)
