"""Seeded random Avro schemas, values and corruptions for the probe's differential tests.

The oracle is fastavro: a body is *accepted by fastavro* when ``schemaless_reader`` decodes it
and stops exactly at its end. Where fastavro accepts bytes that no Avro writer produces
(booleans other than 0/1, negative lengths, wrapped-around indexes, over-long varints), the
probe is allowed to be stricter; :func:`fastavro_verdict` tells those cases apart.
"""

from __future__ import annotations

import datetime as dt
import decimal
import io
import math
import random
import uuid
from typing import Any

import fastavro
from fastavro.validation import validate

UTC = dt.UTC
WORDS = [
    "",
    "a",
    "order",
    "Zürich",
    "日本語",
    "x" * 63,
    "y" * 64,
    "long " * 40,
    "emoji 🎉",
    "tab\tnl\n",
]
# Short ASCII only: values the probe's fast path matches, so its checks get exercised too.
ASCII_WORDS = ["", "a", "order", "x" * 63, "tab\tnl\n", "\x00\x7f"]


class SchemaFactory:
    """Random record schemas covering every Avro type, logical types, named references and
    (optionally) recursion."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.count = 0

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def record(self, depth: int = 0, recursive: bool = False) -> dict[str, Any]:
        rng = self.rng
        name = self.name("R")
        fields = [
            {"name": self.name("f"), "type": self.type(depth + 1)}
            for _ in range(rng.randint(1, 7 if depth else 12))
        ]
        if recursive:
            fields.append({"name": "next", "type": ["null", name]})
        return {"type": "record", "name": name, "namespace": "fuzz", "fields": fields}

    def type(self, depth: int) -> Any:
        rng = self.rng
        simple = ["null", "boolean", "int", "long", "float", "double", "bytes", "string"]
        logical = [
            {"type": "int", "logicalType": "date"},
            {"type": "long", "logicalType": "timestamp-millis"},
            {"type": "long", "logicalType": "timestamp-micros"},
            {"type": "long", "logicalType": "local-timestamp-millis"},
            {"type": "string", "logicalType": "uuid"},
            {"type": "bytes", "logicalType": "decimal", "precision": 12, "scale": 2},
            {"type": "int", "logicalType": "time-millis"},
            {"type": "long", "logicalType": "time-micros"},
        ]
        roll = rng.random()
        if depth > 3 or roll < 0.45:
            return rng.choice(simple)
        if roll < 0.6:
            return dict(rng.choice(logical))
        if roll < 0.65:
            return {
                "type": "enum",
                "name": self.name("E"),
                "symbols": [f"S{i}" for i in range(rng.choice([1, 3, 70]))],
            }
        if roll < 0.7:
            return {"type": "fixed", "name": self.name("F"), "size": rng.choice([0, 1, 16])}
        if roll < 0.78:
            return {"type": "array", "items": self.item(depth + 1)}
        if roll < 0.84:
            return {"type": "map", "values": self.item(depth + 1)}
        if roll < 0.94:
            branches = (
                ["null", self.record(depth + 1)]
                if rng.random() < 0.5
                else ["null", "string", "long"]
            )
            rng.shuffle(branches)
            return branches
        return self.record(depth + 1)

    def item(self, depth: int) -> Any:
        """An array item or map value type that reads at least one varint or checked byte.

        fastavro reads ``null`` and short ``fixed`` values past the end of a body without
        complaint, so a corrupted count of such items makes it loop 2**62 times (the oracle
        would hang). The probe's handling of those arrays is tested by hand instead.
        """
        while True:
            t = self.type(depth)
            if not _reads_nothing_at_eof(t):
                return t


def _reads_nothing_at_eof(t: Any) -> bool:
    if t == "null":
        return True
    if isinstance(t, dict):
        if t.get("type") == "fixed":
            return True
        if t.get("type") == "record":
            return all(_reads_nothing_at_eof(f["type"]) for f in t["fields"])
    return False


class ValueFactory:
    """Random valid values for a parsed schema (fastavro encodes them)."""

    def __init__(self, rng: random.Random, named: dict[str, Any], words: list[str] = WORDS) -> None:
        self.rng = rng
        self.named = named
        self.words = words

    def value(self, t: Any, depth: int = 0) -> Any:
        rng = self.rng
        if isinstance(t, str) and t in self.named:
            t = self.named[t]
        if isinstance(t, list):
            branch = rng.choice(t if depth < 4 else [b for b in t if b == "null"] or t)
            return self.value(branch, depth + 1)
        if isinstance(t, dict):
            logical = t.get("logicalType")
            if logical:
                return self.logical(t["type"], logical)
            kind = t["type"]
            if kind == "record":
                return {f["name"]: self.value(f["type"], depth + 1) for f in t["fields"]}
            if kind == "enum":
                return rng.choice(t["symbols"])
            if kind == "fixed":
                return rng.randbytes(t["size"])
            if kind == "array":
                sizes = [0, 1, 3, 70] if self.words is WORDS else [0, 1, 3]
                return [
                    self.value(t["items"], depth + 1)
                    for _ in range(rng.choice(sizes) if depth < 3 else 0)
                ]
            if kind == "map":
                return {
                    rng.choice(self.words) + str(i): self.value(t["values"], depth + 1)
                    for i in range(rng.choice([0, 2, 5]))
                }
            return self.value(kind, depth)
        return self.primitive(t)

    def primitive(self, kind: str) -> Any:
        rng = self.rng
        if kind == "null":
            return None
        if kind == "boolean":
            return rng.random() < 0.5
        if kind == "int":
            return rng.choice(
                [0, -1, 63, -64, 64, 2**31 - 1, -(2**31), rng.randint(-(2**31), 2**31 - 1)]
            )
        if kind == "long":
            return rng.choice(
                [0, 1, -65, 2**62, 2**63 - 1, -(2**63), rng.randint(-(2**63), 2**63 - 1)]
            )
        if kind == "float":
            return float(rng.choice([0.0, -1.5, 3.25, math.inf]))
        if kind == "double":
            return rng.choice([0.0, -1e300, math.pi, rng.random()])
        if kind == "bytes":
            return rng.randbytes(rng.choice([0, 5, 63, 64, 300]))
        return rng.choice(self.words)

    def logical(self, kind: str, logical: str) -> Any:
        rng = self.rng
        if logical == "date":
            return dt.date(1, 1, 1) + dt.timedelta(
                days=rng.choice([0, 719162, 738000, 3652058, rng.randrange(3652059)])
            )
        if logical in ("timestamp-millis", "timestamp-micros"):
            seconds = rng.choice(
                [0, 1726238205, -62135596800, 253402300799, rng.randrange(-(10**10), 10**10)]
            )
            return dt.datetime(1970, 1, 1, tzinfo=UTC) + dt.timedelta(
                seconds=seconds, milliseconds=rng.randrange(1000)
            )
        if logical == "local-timestamp-millis":
            return dt.datetime(1970, 1, 1) + dt.timedelta(seconds=rng.randrange(-(10**10), 10**10))
        if logical == "uuid":
            return uuid.UUID(int=rng.getrandbits(128))
        if logical == "decimal":
            return decimal.Decimal(rng.randrange(-(10**11), 10**11)).scaleb(-2)
        if logical == "time-millis":
            return dt.time(
                rng.randrange(24), rng.randrange(60), rng.randrange(60), rng.randrange(1000) * 1000
            )
        return dt.time(
            rng.randrange(24), rng.randrange(60), rng.randrange(60), rng.randrange(10**6)
        )


def parse(schema: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    named: dict[str, Any] = {}
    return fastavro.parse_schema(schema, named), named


def encode(parsed: Any, value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, parsed, value)
    return out.getvalue()


def decode(parsed: Any, body: bytes) -> tuple[bool, Any]:
    """(accepted, value): fastavro decodes the body and stops exactly at its end."""
    stream = io.BytesIO(body)
    try:
        value = fastavro.schemaless_reader(stream, parsed)
    except Exception:  # fastavro raises many types on bad bytes
        return False, None
    return stream.tell() == len(body), value


def fastavro_verdict(parsed: Any, body: bytes) -> tuple[str, Any]:
    """``reject`` (fastavro refuses), ``valid`` (fastavro accepts, and the value is in range and
    re-encodes to the same bytes: a real writer's output) or ``lenient`` (fastavro accepts
    bytes no writer produces; the probe may refuse them)."""
    accepted, value = decode(parsed, body)
    if not accepted:
        return "reject", None
    try:
        canonical = encode(parsed, value) == body and validate(value, parsed, raise_errors=False)
    except Exception:
        canonical = False
    return ("valid" if canonical else "lenient"), value


def same(a: Any, b: Any) -> bool:
    """Deep equality where NaN equals NaN."""
    if isinstance(a, float) and isinstance(b, float):
        return a == b or (math.isnan(a) and math.isnan(b))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def corruptions(rng: random.Random, body: bytes) -> list[bytes]:
    """Truncations, trailing bytes, flipped/replaced bytes and plain random bytes."""
    out = [body[:cut] for cut in {0, len(body) // 2, max(0, len(body) - 1)}]
    out += [body + b"\x00", body + rng.randbytes(3)]
    for _ in range(6):
        if body:
            mutated = bytearray(body)
            for _ in range(rng.randint(1, 3)):
                mutated[rng.randrange(len(mutated))] = rng.randrange(256)
            out.append(bytes(mutated))
    out.append(rng.randbytes(rng.randint(1, 40)))
    return out
