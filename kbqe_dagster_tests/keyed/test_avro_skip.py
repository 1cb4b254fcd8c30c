"""The skipper finds where each field's encoding ends: over random schemas of every Avro type
(named references, recursion, logical types) and random values, skipping field after field
lands exactly on the end of the body fastavro wrote."""

from __future__ import annotations

import io
import random

import fastavro
import pytest

from kbqe_dagster.keyed.avro_skip import SkipCompiler, encode_long, read_long, record_skipper
from kbqe_dagster_tests.staging.avro_fuzz import WORDS, SchemaFactory, ValueFactory, encode, parse


@pytest.mark.parametrize("seed", range(60))
def test_skipping_every_field_ends_exactly_at_the_end_of_the_body(seed: int) -> None:
    rng = random.Random(seed)
    schema = SchemaFactory(rng).record(recursive=seed % 5 == 0)
    parsed, named = parse(schema)
    values = ValueFactory(rng, named, WORDS)
    compiler = SkipCompiler()
    skip_record = compiler.compile(schema)
    for _ in range(8):
        value = values.value(parsed)
        body = encode(parsed, value)
        assert skip_record(body, 0) == len(body)


def test_blocks_written_with_their_byte_size_are_walked_item_by_item() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [
            {"name": "xs", "type": {"type": "array", "items": "string"}},
            {"name": "tail", "type": "int"},
        ],
    }
    # An array block of -2 items with its byte size, as some writers emit, then the end.
    items = b"".join(encode_long(len(w)) + w for w in (b"ab", b"c"))
    body = encode_long(-2) + encode_long(len(items)) + items + encode_long(0) + encode_long(5)
    assert fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(schema), None) == {
        "xs": ["ab", "c"],
        "tail": 5,
    }
    assert SkipCompiler().compile(schema)(body, 0) == len(body)
    assert record_skipper(schema)(body, 0) == len(body)
    # A size that lies is not trusted: the items are walked, as fastavro and the record probe
    # read them (trusting it cut past the body's end, and crashed the keyed stage range).
    for size in (0, 1, len(items) + 30):
        lying = encode_long(-2) + encode_long(size) + items + encode_long(0) + encode_long(5)
        assert fastavro.schemaless_reader(io.BytesIO(lying), fastavro.parse_schema(schema), None)
        assert SkipCompiler().compile(schema)(lying, 0) == len(lying)
        assert record_skipper(schema)(lying, 0) == len(lying)


@pytest.mark.parametrize("n", [0, 1, -1, 63, -64, 64, 2**31, -(2**63), 2**63 - 1])
def test_longs_round_trip(n: int) -> None:
    assert read_long(encode_long(n), 0) == (n, len(encode_long(n)))


@pytest.mark.parametrize("seed", range(60))
def test_the_generated_skipper_agrees_with_the_closures(seed: int) -> None:
    rng = random.Random(seed)
    schema = SchemaFactory(rng).record(recursive=seed % 5 == 0)
    parsed, named = parse(schema)
    values = ValueFactory(rng, named, WORDS)
    generated = record_skipper(schema)
    for _ in range(8):
        body = encode(parsed, values.value(parsed))
        assert generated(body, 0) == len(body)


def test_an_over_long_union_index_is_read_as_the_probe_reads_it() -> None:
    """``0x80 0x00`` is index 0 written in two bytes: no writer does it, fastavro and the probe
    read it, so the generated skipper must too (it raised "union index" and failed the range;
    found by the keyed kernel's differential fuzz)."""
    schema = {"type": "record", "name": "R", "fields": [
        {"name": "u", "type": ["null", "long"]}, {"name": "tail", "type": "int"}]}  # fmt: skip
    for union, value in ((b"\x80\x00", None), (b"\x82\x00\x06", 3), (b"\x00", None)):
        body = union + encode_long(5)
        read = fastavro.schemaless_reader(io.BytesIO(body), fastavro.parse_schema(schema), None)
        assert read == {"u": value, "tail": 5}
        assert (
            record_skipper(schema)(body, 0) == SkipCompiler().compile(schema)(body, 0) == len(body)
        )
