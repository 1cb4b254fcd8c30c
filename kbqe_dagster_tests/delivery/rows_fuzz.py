"""Seeded random record files for the differential test of Storage Write rows (Python encoder
vs the kernel's ``RowEncoder``).

A case is a file schema of the types ``core/formats/avro_proto.py`` maps (nested records,
arrays, maps, ``[null, T]`` unions, enums, fixed, bytes, strings, uuids, dates, times,
timestamps, local timestamps, decimals of bytes and fixed, references to a named type met
earlier) and records of it, written into a container file by the stage path's writer.

Values come at their edges (integer limits, NaN payloads and signed zeros, decimals of every
width up to their precision, dates and timestamps at the limits fastavro converts, strings of
odd unicode). Some records are written under a *raw twin* of the schema (logical types
removed, the same bytes layout), so the file holds what a writer of the logical type could
not: dates and timestamps out of range, times past midnight, decimals wider than their
precision, uuids in other spellings, null array items. The Python path refuses or converts
those in its own way; the kernel must refuse them (and the Python path then writes the file)
or agree byte for byte.
"""

from __future__ import annotations

import copy
import datetime as dt
import decimal
import io
import math
import random
import struct
import uuid
from dataclasses import dataclass
from typing import Any

import fastavro

from kbqe_dagster.staging.avro_container import AvroContainerWriter

UTC = dt.UTC
WORDS = [
    "", "a", "order", "Zürich", "日本語", "emoji 🎉🇫🇷", "tab\tnl\n\r", "\x00\x7f\x80\u07ff",
    "\u0800\uffff", "\U00010000\U0010ffff", "e\u0301", "\u202e rtl", "x" * 127, "y" * 128,
    "long " * 70,
]  # fmt: skip
UUID_SPELLINGS = [
    lambda u: str(u),
    lambda u: str(u).upper(),
    lambda u: u.hex,  # no hyphens: uuid.UUID takes it, the kernel refuses it
    lambda u: "{" + str(u) + "}",
    lambda u: "urn:uuid:" + str(u),
]


@dataclass
class Case:
    schema: dict[str, Any]
    records: int
    body: bytes
    """The container file."""


class _Schemas:
    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.count = 0
        # Named types defined so far, for references: (full name, its namespace, short name).
        self.named: list[tuple[str, str | None, str]] = []

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def define(self, named: dict[str, Any], ns: str | None) -> dict[str, Any]:
        full = f"{ns}.{named['name']}" if ns else named["name"]
        self.named.append((full, ns, named["name"]))
        return named

    def record(self, depth: int, ns: str | None = None) -> dict[str, Any]:
        rng = self.rng
        record: dict[str, Any] = {"type": "record", "name": self.name("R")}
        if rng.random() < 0.3:
            record["namespace"] = ns = rng.choice(["fuzz", "fuzz.inner", "a.b.c"])
        record["fields"] = [
            {"name": self.name("f"), "type": self.field(depth + 1, ns)}
            for _ in range(rng.randint(0 if depth else 1, 6 if depth else 14))
        ]
        return self.define(record, ns)

    def field(self, depth: int, ns: str | None) -> Any:
        rng = self.rng
        roll = rng.random()
        if roll < 0.2:
            return rng.sample(["null", self.value_type(depth, ns)], 2)  # [null, T] either order
        if roll < 0.3:
            return {"type": "array", "items": self.item(depth + 1, ns)}
        if roll < 0.36:
            return {"type": "map", "values": self.field(depth + 1, ns)}
        return self.value_type(depth, ns)

    def item(self, depth: int, ns: str | None) -> Any:
        if self.rng.random() < 0.25:
            return ["null", self.value_type(depth, ns)]  # a null item is a RowEncodeError
        return self.value_type(depth, ns)

    def value_type(self, depth: int, ns: str | None) -> Any:
        rng = self.rng
        roll = rng.random()
        if roll < 0.4 or depth > 3:
            return rng.choice(["boolean", "int", "long", "float", "double", "bytes", "string"])
        if roll < 0.7:
            chosen = rng.choice(self.logical())
            return self.define(chosen, ns) if chosen["type"] == "fixed" else chosen
        if roll < 0.76:
            return self.define({"type": "enum", "name": self.name("E"),
                                "symbols": [f"S{i}" for i in range(rng.choice([1, 3, 70]))]}, ns)  # fmt: skip
        if roll < 0.8:
            return self.define({"type": "fixed", "name": self.name("F"), "size": rng.choice([0, 1, 16])}, ns)  # fmt: skip
        # A reference to a named type defined earlier (one of no namespace only from outside
        # every namespace: a name without a dot is relative to the enclosing one).
        reachable = [n for n in self.named if n[1] or not ns]
        if roll < 0.86 and reachable:
            full, its_ns, short = rng.choice(reachable)
            return short if its_ns == ns and rng.random() < 0.5 else full
        return self.record(depth + 1, ns)

    def logical(self) -> list[dict[str, Any]]:
        rng = self.rng
        # Mostly what BigQuery holds; now and then a decimal it cannot (the file is refused).
        precision = rng.choice([1, 2, 9, 18, 19, 38] * 10 + [39, 76])
        scale = min(rng.choice([0, 1, 2, 9, 38]), precision - 1)
        size = rng.choice([1, 4, 8, 16, 32])
        return [
            {"type": "int", "logicalType": "date"},
            {"type": "int", "logicalType": "time-millis"},
            {"type": "long", "logicalType": "time-micros"},
            {"type": "long", "logicalType": "timestamp-millis"},
            {"type": "long", "logicalType": "timestamp-micros"},
            {"type": "long", "logicalType": "local-timestamp-millis"},
            {"type": "long", "logicalType": "local-timestamp-micros"},
            {"type": "string", "logicalType": "uuid"},
            {"type": "bytes", "logicalType": "decimal", "precision": precision, "scale": scale},
            {"type": "fixed", "name": self.name("D"), "size": size, "logicalType": "decimal",
             "precision": min(precision, _fixed_digits(size)),
             "scale": min(scale, min(precision, _fixed_digits(size)) - 1)},
        ]  # fmt: skip


def _fixed_digits(size: int) -> int:
    """Decimal digits a fixed of ``size`` bytes holds in full (Avro's maximum precision)."""
    return math.floor(math.log10(2) * (8 * size - 1))


def _raw_twin(schema: Any) -> Any:
    """``schema`` without logical types: the same bytes, values of the base types."""
    if isinstance(schema, list):
        return [_raw_twin(b) for b in schema]
    if isinstance(schema, dict):
        out = {k: _raw_twin(v) for k, v in schema.items() if k != "logicalType"}
        if "fields" in schema:
            out["fields"] = [dict(f, type=_raw_twin(f["type"])) for f in schema["fields"]]
        return out
    return schema


class _Values:
    def __init__(self, rng: random.Random, named: dict[str, Any], raw: bool) -> None:
        self.rng, self.named, self.raw = rng, named, raw

    def value(self, t: Any, logical_of: Any, depth: int) -> Any:
        """A value of ``t`` (the schema written with); ``logical_of`` is the same position in
        the logical schema (for a raw twin: what its bytes mean)."""
        rng = self.rng
        if isinstance(t, str) and t in self.named:
            t = self.named[t]
            logical_of = (self.named_logical or self.named)[logical_of]
        if isinstance(t, list):
            i = rng.randrange(len(t))
            if t[i] != "null" and rng.random() < 0.15:
                i = t.index("null")
            return self.value(t[i], logical_of[i], depth + 1)
        if isinstance(t, dict):
            kind = t["type"]
            if t.get("logicalType"):
                return self.logical(t)
            if self.raw and isinstance(logical_of, dict) and logical_of.get("logicalType"):
                return self.raw_logical(t, logical_of)
            if kind == "record":
                return {
                    f["name"]: self.value(f["type"], g["type"], depth + 1)
                    for f, g in zip(t["fields"], logical_of["fields"], strict=True)
                }
            if kind == "enum":
                return rng.choice(t["symbols"])
            if kind == "fixed":
                return rng.randbytes(t["size"])
            if kind == "array":
                n = rng.choice([0, 1, 2, 5, 40]) if depth < 4 else 0
                items = t["items"]
                if isinstance(items, list) and not self.raw:  # null items only in raw files
                    branch = next(i for i, b in enumerate(items) if b != "null")
                    return [
                        self.value(items[branch], logical_of["items"][branch], depth + 1)
                        for _ in range(n)
                    ]
                return [self.value(items, logical_of["items"], depth + 1) for _ in range(n)]  # fmt: skip
            if kind == "map":
                return {
                    rng.choice(WORDS) + str(i): self.value(t["values"], logical_of["values"], depth + 1)
                    for i in range(rng.choice([0, 1, 3]) if depth < 4 else 0)
                }  # fmt: skip
            return self.value(kind, kind, depth)
        return self.primitive(t)

    named_logical: dict[str, Any] = {}

    def primitive(self, kind: str) -> Any:
        rng = self.rng
        if kind == "null":
            return None
        if kind == "boolean":
            return rng.random() < 0.5
        if kind == "int":
            return rng.choice([0, 1, -1, 63, -64, 64, 2**31 - 1, -(2**31), rng.randint(-(2**31), 2**31 - 1)])  # fmt: skip
        if kind == "long":
            return rng.choice([0, -1, 2**62, 2**63 - 1, -(2**63), rng.randint(-(2**63), 2**63 - 1)])  # fmt: skip
        if kind in ("float", "double"):
            roll = rng.random()
            if roll < 0.2:  # any bit pattern: NaN payloads, subnormals, signed zeros
                if kind == "float":
                    return struct.unpack("<f", rng.randbytes(4))[0]
                return struct.unpack("<d", rng.randbytes(8))[0]
            return rng.choice([0.0, -0.0, 1.5, -1e30, math.inf, -math.inf, math.nan, rng.random()])
        if kind == "bytes":
            return rng.randbytes(rng.choice([0, 1, 5, 127, 128, 300]))
        return rng.choice(WORDS) + (rng.choice(WORDS) if rng.random() < 0.3 else "")

    def logical(self, t: dict[str, Any]) -> Any:
        rng = self.rng
        logical = t["logicalType"]
        if logical == "date":
            return dt.date(1, 1, 1) + dt.timedelta(days=rng.choice([0, 719162, 738000, 3652058, rng.randrange(3652059)]))  # fmt: skip
        if logical in ("time-millis", "time-micros"):
            micro = rng.randrange(1000) * 1000 if logical == "time-millis" else rng.randrange(10**6)
            return dt.time(rng.choice([0, 23, rng.randrange(24)]), rng.randrange(60), rng.randrange(60), micro)  # fmt: skip
        if "timestamp" in logical:
            seconds = rng.choice([0, -1, 1726238205, -62135596800, 253402300799, rng.randrange(-(10**10), 10**10)])  # fmt: skip
            sub = rng.randrange(1000) * 1000 if "millis" in logical else rng.randrange(10**6)
            when = dt.datetime(1970, 1, 1) + dt.timedelta(seconds=seconds, microseconds=sub)
            if (
                logical.startswith("timestamp") and rng.random() < 0.1 and abs(seconds) < 10**10
            ):  # an aware value, another zone
                zone = dt.timezone(dt.timedelta(hours=rng.choice([-5, 2])))
                return when.replace(tzinfo=UTC).astimezone(zone)
            return when.replace(tzinfo=UTC) if logical.startswith("timestamp") else when
        if logical == "uuid":
            return uuid.UUID(int=rng.getrandbits(128))
        precision, scale = int(t["precision"]), int(t.get("scale", 0))
        digits = rng.choice([1, precision, rng.randint(1, precision)])
        unscaled = rng.randrange(10 ** (digits - 1) if digits > 1 else 0, 10**digits)
        return decimal.Decimal(unscaled * rng.choice([1, -1])).scaleb(-scale)

    def raw_logical(self, t: Any, logical_of: dict[str, Any]) -> Any:
        """A raw value of a logical type: in range mostly, else what its writer never writes."""
        rng = self.rng
        logical = logical_of["logicalType"]
        if logical == "date":
            return rng.choice([-719162, 2932896, 0, -1] * 3 + [-719163, 2932897, -(2**31)])
        if logical == "time-millis":
            return rng.choice([0, 86_399_999, 1] * 3 + [86_400_000, -1, 2**31 - 1])
        if logical == "time-micros":
            return rng.choice([0, 86_399_999_999, 1] * 3 + [86_400_000_000, -1])
        if "millis" in logical:
            return rng.choice([-62_135_596_800_000, 253_402_300_799_999, 0, -1] * 3 + [-62_135_596_800_001, 253_402_300_800_000])  # fmt: skip
        if "micros" in logical:
            return rng.choice([-62_135_596_800_000_000, 253_402_300_799_999_999, -1] * 3 + [-62_135_596_800_000_001, 253_402_300_800_000_000])  # fmt: skip
        if logical == "uuid":
            return rng.choice(UUID_SPELLINGS)(uuid.UUID(int=rng.getrandbits(128)))
        # decimal: big-endian two's complement, up to more digits than the precision
        precision = int(logical_of["precision"])
        n = rng.choice([precision] * 6 + [precision + 1, precision + 5])
        unscaled = rng.choice([0, -1, 10**n - 1, -(10**n) + 1, rng.randrange(-(10**n), 10**n)])
        if isinstance(t, dict) and t.get("type") == "fixed":
            size = t["size"]
            unscaled = max(min(unscaled, 2 ** (8 * size - 1) - 1), -(2 ** (8 * size - 1)))
            return unscaled.to_bytes(size, "big", signed=True)
        size = max(1, (unscaled.bit_length() + 8) // 8) + rng.choice([0, 0, 1])  # sign-extended
        return unscaled.to_bytes(size, "big", signed=True) if rng.random() < 0.95 else b""


def case(seed: int, records: int) -> Case:
    """One seeded file: its schema and ``records`` records (some under the raw twin)."""
    rng = random.Random(seed)
    schema = _Schemas(rng).record(0)
    raw_schema = _raw_twin(schema)
    named: dict[str, Any] = {}
    raw_named: dict[str, Any] = {}
    parsed = fastavro.parse_schema(copy.deepcopy(schema), named)
    raw_parsed = fastavro.parse_schema(copy.deepcopy(raw_schema), raw_named)
    values = _Values(rng, named, raw=False)
    raw_values = _Values(rng, raw_named, raw=True)
    raw_values.named_logical = named
    raw_share = rng.choice([0.0, 0.0, 0.0, 0.01, 0.1])
    sink = io.BytesIO()
    writer = AvroContainerWriter(
        sink, schema, codec=rng.choice(["null", "deflate", "snappy"]),
        block_records=rng.choice([1, 7, 64, 65_536]),
    )  # fmt: skip
    for _ in range(records):
        raw = rng.random() < raw_share
        body = io.BytesIO()
        if raw:
            record = raw_values.value(raw_parsed, parsed, 0)
            fastavro.schemaless_writer(body, raw_parsed, record)
        else:
            record = values.value(parsed, parsed, 0)
            fastavro.schemaless_writer(body, parsed, record)
        writer.append(body.getvalue())
    writer.close()
    return Case(schema, records, sink.getvalue())
