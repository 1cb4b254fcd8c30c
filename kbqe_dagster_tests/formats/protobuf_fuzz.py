"""Seeded random ``format: protobuf`` scenarios for the native kernel's differential test
(formats/test_protobuf_kernel.py).

A scenario is a topic configuration (``kernel_fuzz.random_pipeline``: routing, event-time rules,
enrichment, bad-input policy, size limit), one or two registry schemas drawn from
:data:`EVENT_TYPES` × :data:`META_TYPES` (every scalar type, an enum with an alias and a
negative number, nested messages, packed and unpacked repeated fields, maps with string, int,
bool and unsigned keys and message, enum and ``Timestamp`` values, a oneof with a message
member, proto3 ``optional``, the wrappers, ``Timestamp``; a second message type named by
indexes ``[1]``), and a stream of messages written **at the wire level** from the descriptors:
fields in declaration or shuffled order, unset fields, unknown fields, oneof members set
together (the last one wins), repeated fields split between packed and unpacked runs.
Adversarial scenarios add what producers do not write: values at and past their limits (an
int32 varint beyond 32 bits, a uint64 above 2^63-1, NaN, bools of 2, unknown enum numbers,
Timestamps outside years 1-9999), invalid UTF-8, singular messages given twice, duplicate map
keys, truncated and corrupted bodies, groups, bad message indexes, unknown schema ids,
tombstones.
"""

from __future__ import annotations

import functools
import math
import random
import struct
from dataclasses import dataclass, replace
from typing import Any

from google.protobuf import descriptor_pool

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.formats.protobuf_avro import map_protobuf_message
from kbqe_dagster.core.formats.protobuf_wire import encode_message_indexes, varint
from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.resources.protobuf_compiler import ROOT_FILE, compile_files
from kbqe_dagster.resources.schema_registry import RegisteredSchema
from kbqe_dagster_tests.formats.json_fuzz import draw_kernel_transforms, repeated_headers
from kbqe_dagster_tests.staging.kernel_equality import Msg
from kbqe_dagster_tests.staging.kernel_fuzz import DATASETS, TABLES, iso_text, random_pipeline
from kbqe_dagster_tests.support.fakes import FakeSchemaRegistry

TOPIC = "fuzz.protobuf"
EVENT_TYPES = ["string", "string", "int64", "double", "google.protobuf.Timestamp",
               "google.protobuf.Int64Value", "optional string", "int32", "float"]  # fmt: skip
META_TYPES = ["int64", "string", "google.protobuf.Timestamp"]
TEMPLATE = """syntax = "proto3";
package fuzz.pb;
import "google/protobuf/timestamp.proto";
import "google/protobuf/wrappers.proto";
message Event {
  string datasetName = 1;
  string tableName = 2;
  EVENT_TYPE eventTime = 3;
  Meta meta = 4;
  int32 i32 = 5; int64 i64 = 6; uint32 u32 = 7; uint64 u64 = 8; sint32 s32 = 9; sint64 s64 = 10;
  fixed32 f32 = 11; fixed64 f64 = 12; sfixed32 sf32 = 13; sfixed64 sf64 = 14;
  float fl = 15; double db = 16; bool flag = 17; bytes raw = 18; Color color = 19;
  repeated int32 ri32 = 20; repeated string rs = 21; repeated Line lines = 22;
  repeated Color rcolor = 23; repeated double rdb = 24; repeated sint64 rs64 = 41;
  map<string, string> attrs = 25; map<int64, Line> by_id = 26; map<bool, Color> flags = 27;
  map<uint32, google.protobuf.Timestamp> when = 28; map<sint32, int64> counts = 29;
  oneof choice { string text = 30; int64 number = 31; Line line = 32; }
  optional string note = 33; optional int32 maybe = 34;
  google.protobuf.Int64Value wi64 = 35; google.protobuf.StringValue ws = 36;
  google.protobuf.BoolValue wb = 37; google.protobuf.UInt64Value wu64 = 38;
  google.protobuf.Timestamp at = 39; repeated google.protobuf.StringValue rws = 40;
  enum Color { option allow_alias = true; RED = 0; GREEN = 1; VERDE = 1; BLUE = -3; }
  message Line { string sku = 1; uint32 qty = 2; Color color = 3; }
  message Meta { META_TYPE ts = 1; string source = 2; }
}
message Other { string datasetName = 1; string tableName = 2; int64 eventTime = 3; bytes blob = 4; }
"""
_PACKABLE = {1, 2, 3, 4, 5, 6, 7, 8, 13, 14, 15, 16, 17, 18}
_WIRE = {1: 1, 2: 5, 3: 0, 4: 0, 5: 0, 6: 1, 7: 5, 8: 0, 9: 2, 11: 2, 12: 2, 13: 0, 14: 0,
         15: 5, 16: 1, 17: 0, 18: 0}  # fmt: skip


@dataclass
class Scenario:
    pipeline: PipelineConfig
    registry: FakeSchemaRegistry
    messages: list[Msg]
    adversarial: bool


def proto_text(event_type: str, meta_type: str) -> str:
    return TEMPLATE.replace("EVENT_TYPE", event_type).replace("META_TYPE", meta_type)


@functools.cache
def descriptors(text: str) -> tuple[Any, Any]:
    pool = descriptor_pool.DescriptorPool()
    for proto in compile_files({ROOT_FILE: text}).file:  # once per text (protoc is cached)
        pool.Add(proto)
    root = pool.FindFileByName(ROOT_FILE)
    return root.message_types_by_name["Event"], root.message_types_by_name["Other"]


def scenario(seed: int, count: int) -> Scenario:
    rng = random.Random(seed)
    adversarial = rng.random() < 0.35
    schemas: dict[int, RegisteredSchema] = {}
    types: dict[int, tuple[Any, Any]] = {}
    for version in range(rng.randint(1, 2)):
        text = proto_text(rng.choice(EVENT_TYPES), rng.choice(META_TYPES))
        schemas[40 + version] = RegisteredSchema(40 + version, "PROTOBUF", text)
        types[40 + version] = descriptors(text)
    event_fields = rng.choice([["eventTime"], ["eventTime"], ["meta.ts", "eventTime"],
                               ["at", "eventTime"], ["wi64"], ["missing", "eventTime"]])  # fmt: skip
    routing = rng.choice(["fields", "fields", "fields", "static", "schema_name"])
    topic: dict[str, Any] = {"name": TOPIC, "format": "protobuf"}
    pipeline = random_pipeline(rng, topic, event_fields, routing, size_chance=0.1 if adversarial else 0,
                               source=f"protobuf kernel fuzz seed {seed}")  # fmt: skip
    writer = _Writer(rng, adversarial)
    messages = [writer.message(offset, types) for offset in range(count)]
    return Scenario(pipeline, FakeSchemaRegistry(schemas), messages, adversarial)


class _Writer:
    def __init__(self, rng: random.Random, adversarial: bool) -> None:
        self.rng = rng
        self.adversarial = adversarial
        self.start = rng.choice([0, 7, 2**40])

    def odd(self, chance: float = 0.04) -> bool:
        return self.adversarial and self.rng.random() < chance

    def message(self, i: int, types: dict[int, tuple[Any, Any]]) -> Msg:
        rng = self.rng
        schema_id = rng.choice(list(types))
        event, other = types[schema_id]
        which = 1 if rng.random() < 0.08 else 0
        body = self.fields(other if which else event, 0)
        indexes = encode_message_indexes((which,)) if which or rng.random() < 0.9 else b"\x02\x00"
        value: bytes | None = encode_frame(schema_id, indexes + body)
        if self.odd(0.25):
            value = rng.choice(self.corruptions(schema_id, indexes, body))
        key = rng.choice([None, b"", b"k%d" % i])
        headers = rng.choice([None, [], [("h", b"v")], [("trace", None), ("zürich", b"\x00\xff")]])
        timestamp = rng.choice([(1, 1_726_238_205_123 + i)] * 4 + [(0, -1), (2, 0), (1, -5)])
        return Msg(TOPIC, 0, self.start + i, value, key, headers, timestamp)

    def corruptions(self, schema_id: int, indexes: bytes, body: bytes) -> list[bytes | None]:
        rng = self.rng
        cut = rng.randrange(len(body) + 1)
        flipped = bytearray(body or b"\x00")
        flipped[rng.randrange(len(flipped))] ^= 1 << rng.randrange(8)
        frame = functools.partial(encode_frame, schema_id)
        return [None, b"", b"\x00\x00", frame(indexes + body[:cut]), frame(indexes + bytes(flipped)),
                frame(indexes + body + b"\x0b\x0c"), frame(indexes + body + b"\xff"),
                frame(b"\x02\x0a" + body), frame(b"\x03" + body), frame(b"\x04\x00\x02" + body),
                encode_frame(999, indexes + body), b"\x01" + frame(indexes + body)[1:],
                frame(indexes + body + bytes([0x1a, 0x03]) + b"\xff\xfe\xfd")]  # fmt: skip

    # --- the wire format, written from the descriptor ------------------------------------------
    def fields(self, descriptor: Any, depth: int) -> bytes:
        rng = self.rng
        parts: list[bytes] = []
        entry_of_map = descriptor.GetOptions().map_entry
        # Producers set one member of a oneof; several, the last one wins.
        oneof_members = {o.name: rng.choice(o.fields).name for o in descriptor.oneofs}
        for field in descriptor.fields:
            oneof = field.containing_oneof
            if oneof is not None and oneof_members[oneof.name] != field.name and not self.odd(0.5):
                continue
            wanted = field.name in ("datasetName", "tableName", "eventTime")
            if rng.random() < (0.03 if wanted else 0.3):
                continue
            entry = field.message_type
            if field.is_repeated and entry is not None and entry.GetOptions().map_entry:
                for _ in range(rng.choice([0, 1, 2, 3, 5])):
                    parts.append(_tag(field.number, 2) + _length(self.fields(entry, depth + 1)))
            elif field.is_repeated:
                n = rng.choice([0, 1, 2, 4])
                values = [self.value(field, depth) for _ in range(n)]
                if field.type in _PACKABLE and values and rng.random() < 0.5:
                    split = rng.randrange(len(values) + 1)
                    parts.append(_tag(field.number, 2) + _length(b"".join(values[:split])))
                    parts += [_tag(field.number, _WIRE[field.type]) + v for v in values[split:]]
                else:
                    parts += [_tag(field.number, _WIRE.get(field.type, 2)) + v for v in values]
            else:
                times = 2 if self.odd(0.05) or (field.type != 11 and rng.random() < 0.03) else 1
                for _ in range(times):
                    parts.append(
                        _tag(field.number, _WIRE.get(field.type, 2)) + self.value(field, depth)
                    )
        # An unknown field: skipped by both paths, except in a map entry (upb then keeps the
        # whole entry aside), which producers do not write.
        if rng.random() < 0.15 and (not entry_of_map or self.odd(1)):
            wire = rng.choice([0, 1, 2, 5])
            payload = {
                0: varint(rng.randrange(2**40)),
                1: bytes(8),
                2: _length(b"xyz"),
                5: bytes(4),
            }
            parts.insert(
                rng.randrange(len(parts) + 1), _tag(rng.randint(50, 60), wire) + payload[wire]
            )
        if self.odd(0.03) and parts:  # a known field with another wire type
            parts.append(_tag(descriptor.fields[0].number, 5) + bytes(4))
        if rng.random() < 0.2:
            rng.shuffle(parts)
        return b"".join(parts)

    def value(self, field: Any, depth: int) -> bytes:
        rng, kind, name = self.rng, field.type, field.name
        if kind == 11:  # a message
            full = field.message_type.full_name
            if full == "google.protobuf.Timestamp":
                return _length(self.timestamp())
            return _length(self.fields(field.message_type, depth + 1))
        if kind == 9:
            if name == "datasetName":  # mostly destinations allowed, some refused
                text = rng.choice(DATASETS if self.odd(0.5) else DATASETS[:10])
            elif name == "tableName":
                text = rng.choice(TABLES if self.odd(0.5) else TABLES[:8])
            elif name in ("eventTime", "ts") or rng.random() < 0.3:
                text = iso_text(rng) if self.adversarial else "2024-09-13T14:36:45Z"
            else:
                text = rng.choice(["", "a", "zürich", "日本", "x" * 200, "\U0001f389"])
            data = text.encode()
            if self.odd(0.02):
                data = rng.choice([b"\xff", b"a\xed\xa0\x80", b"\xc3"])
            return _length(data)
        if kind == 12:
            return _length(rng.randbytes(rng.choice([0, 1, 5, 40])))
        if kind == 14:  # an enum
            numbers = [0, 1, 1, -3] + ([7, 2**31 - 1] if self.odd(0.3) else [])
            return varint(rng.choice(numbers) & (2**64 - 1))
        if kind == 8:
            return varint(rng.choice([0, 1, 1] + ([2, 2**40] if self.odd(0.3) else [])))
        if kind in (2, 1):  # float, double
            x = rng.choice([0.0, -0.0, 1.5, -2.25, 1_726_238_205.5, 1e-40, 3.4e38, rng.uniform(-1e6, 1e6)]
                           + ([math.nan, math.inf, -math.inf] if self.odd(0.3) else []))  # fmt: skip
            if name == "eventTime":
                x = rng.choice([1_726_238_205.0, 1.726238205123e12, x])
            return struct.pack("<f" if kind == 2 else "<d", x)
        return self.integer(kind, name)

    def integer(self, kind: int, name: str) -> bytes:
        rng = self.rng
        bits = 32 if kind in (5, 13, 7, 15, 17) else 64
        signed = kind in (5, 3, 15, 16, 17, 18)
        if signed:
            choices = [
                0,
                1,
                -1,
                2 ** (bits - 1) - 1,
                -(2 ** (bits - 1)),
                rng.randrange(-1000, 1000),
            ]
        else:  # a uint64 above 2^63-1 has no Avro long: producers' values stay below
            choices = [
                0,
                1,
                2**31 - 1,
                2**32 - 1 if bits == 32 else 2**63 - 1,
                rng.randrange(10**6),
            ]
            choices += [2**bits - 1, 2 ** (bits - 1)] if self.odd(0.3) else []
        if name in ("eventTime", "ts", "value"):
            choices += [1_726_238_205, 1_726_238_205 if bits == 32 else 1_726_238_205_123] * 3
        v = rng.choice(choices)
        if kind in (7, 15):
            return struct.pack("<i" if kind == 15 else "<I", v)
        if kind in (6, 16):
            return struct.pack("<q" if kind == 16 else "<Q", v)
        if kind in (17, 18):
            return varint((v << 1) ^ (v >> (bits - 1)) if v < 0 else v << 1)
        if self.odd(0.05):
            return varint(rng.choice([2**32 + 5, 2**35, 2**64 - 1]))  # past 32 bits
        return varint(v & (2**64 - 1))

    def timestamp(self) -> bytes:
        rng = self.rng
        seconds = rng.choice([0, 1_726_238_205, 1_726_238_205, -1, -62_135_596_800, 253_402_300_799]
                             + ([253_402_300_800, -62_135_596_801, 2**62] if self.odd(0.3) else []))  # fmt: skip
        nanos = rng.choice(
            [0, 123_456_789, 999_999_999, 1_000] + ([-1, 10**9 + 5] if self.odd(0.3) else [])
        )
        parts = []
        if seconds or rng.random() < 0.2:
            parts.append(_tag(1, 0) + varint(seconds & (2**64 - 1)))
        if nanos or rng.random() < 0.2:
            parts.append(_tag(2, 0) + varint(nanos & (2**64 - 1)))
        if rng.random() < 0.2:
            parts.reverse()
        return b"".join(parts)


def _tag(number: int, wire: int) -> bytes:
    return varint(number << 3 | wire)


def _length(data: bytes) -> bytes:
    return varint(len(data)) + data


def with_kernel_transforms(make: Any, *, rewrites: bool = False) -> Any:
    """``make``'s scenarios with ``rename``, ``drop`` and ``cast`` (that keeps the bytes)
    transforms on one to four top-level fields of ``Event`` (oneof members, maps and repeated
    fields among them) and ``add`` of up to two constants (json_fuzz.with_kernel_transforms's
    draw, from their own generator so the messages are those of the same seed). ``Other`` lacks
    those fields: its messages are the transforms' errors on both paths."""

    # ``rewrites``: mask and timestamp transforms too (json_fuzz.draw_kernel_transforms).

    def transformed(seed: int, messages: int) -> Any:
        case = make(seed, messages)
        rng = random.Random(~seed)
        topic = case.pipeline.topics[0]
        read = topic.required_fields
        text = case.registry.schemas[min(case.registry.schemas)].schema
        avro = map_protobuf_message(descriptors(text)[0]).avro_schema
        specs = draw_kernel_transforms(rng, avro, read, rewrites=rewrites)
        case.pipeline = replace(case.pipeline, topics=(replace(topic, transforms=specs),))
        if rewrites:
            case.messages = repeated_headers(random.Random(seed ^ 0x5EED), case.messages)
        return case

    return transformed
