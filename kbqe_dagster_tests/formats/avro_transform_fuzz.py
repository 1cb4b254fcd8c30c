"""Seeded random scenarios of Confluent Avro topics with transforms the native kernel does,
for its differential test (test_avro_transform_kernel.py).

Each scenario is the Avro kernel's (staging/kernel_fuzz.py: random schemas of every type,
routing and event-time rules, enrichment, bad frames and corrupted bodies; keys, headers and
Kafka timestamps of every kind) with ``rename``, ``drop``, ``cast`` and constant ``add``
transforms drawn over its first schema (json_fuzz.draw_kernel_transforms, casts of ints and
longs to strings among them; with a kernel that has them, :data:`REWRITES`, the rewrites too:
null and hmac masks keyed with ``FUZZ_HMAC_ENV``, timestamps between numbers, the casts of
booleans, ints and longs rewrite.rs writes, adds of parts of the message, and headers whose
name comes twice), and some
records written in a form fastavro never writes but reads (:func:`respell`): over-long
varints, arrays and maps in several blocks or with byte sizes, duplicate map keys, upper-case
uuids, float32 signalling NaNs, negative times. The Python path re-encodes those; the kernel
must hand them back.
"""

from __future__ import annotations

import random
import struct
from dataclasses import replace
from typing import Any

from kbqe_dagster.staging import native_kernel
from kbqe_dagster_tests.formats.json_fuzz import draw_kernel_transforms, repeated_headers
from kbqe_dagster_tests.staging import kernel_fuzz
from kbqe_dagster_tests.staging.avro_fuzz import parse
from kbqe_dagster_tests.staging.kernel_equality import Msg

REWRITES = getattr(getattr(native_kernel._extension, "StageKernel", None), "AVRO_REWRITES", False)
"""Whether the kernel rewrites Avro fields and appends parts of the message: one built before
leaves a topic with them on the Python path, where the fuzz would compare nothing."""


def zigzag(value: int, overlong: int = 0) -> bytes:
    """Avro's varint of ``value``; ``overlong`` more bytes than needed (continuation bits
    and zero groups: a spelling fastavro reads and never writes)."""
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z >= 0x80:
        out.append(z & 0x7F | 0x80)
        z >>= 7
    out.append(z)
    for _ in range(overlong):
        out[-1] |= 0x80
        out.append(0)
    return bytes(out)


def scenario(seed: int, messages: int) -> kernel_fuzz.Scenario:
    case = kernel_fuzz.scenario(seed, messages)
    rng = random.Random(~seed)
    topic = case.pipeline.topics[0]
    first = case.schemas[min(case.schemas)]
    specs = draw_kernel_transforms(
        rng, first, topic.required_fields, to_digits=True, rewrites=REWRITES
    )
    case.pipeline = replace(case.pipeline, topics=(replace(topic, transforms=specs),))
    if REWRITES:
        case.messages = repeated_headers(random.Random(seed ^ 0x5EED), case.messages)
    respelled = []
    chance = rng.choice([0.0, 0.1, 0.3])
    for msg in case.messages:
        value = msg.value()
        if value and len(value) > 5 and value[0] == 0 and rng.random() < chance:
            sid = int.from_bytes(value[1:5], "big")
            if sid in case.schemas:
                body = respell(rng, case.schemas[sid], value[5:])
                if body is not None:
                    msg = Msg(msg.topic(), msg.partition(), msg.offset(), value[:5] + body,
                              msg.key(), msg.headers(), msg.timestamp())  # fmt: skip
        respelled.append(msg)
    case.messages = respelled
    return case


def respell(rng: random.Random, schema: dict, body: bytes) -> bytes | None:
    """``body`` (a record of ``schema``) written again with random non-canonical spellings,
    or None when it does not decode (a corrupted body stays as it is)."""
    parsed, named = parse(schema)
    speller = _Speller(rng, named, rng.choice([0.05, 0.2, 0.5]))
    try:
        out = bytearray()
        end = speller.value(parsed, body, 0, out)
    except (IndexError, ValueError, KeyError, struct.error, RecursionError):
        return None
    return bytes(out) if end == len(body) else None


class _Speller:
    """Reads a body under a parsed schema and writes each value again, each node spelled
    otherwise with probability ``chance``."""

    def __init__(self, rng: random.Random, named: dict[str, Any], chance: float) -> None:
        self.rng, self.named, self.chance = rng, named, chance

    def odd(self) -> bool:
        return self.rng.random() < self.chance

    def long(self, body: bytes, at: int) -> tuple[int, int]:
        z, shift = 0, 0
        while True:
            b = body[at]
            at += 1
            z |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                break
            if shift > 70:
                raise ValueError("varint")
        return (z >> 1) ^ -(z & 1), at

    @staticmethod
    def take(body: bytes, at: int, n: int) -> bytes:
        """``n`` bytes at ``at``: a corrupted length or count must not read past the end
        (slicing would not fail, and a huge count of floats would fill memory)."""
        if n < 0 or at + n > len(body):
            raise ValueError("past the end")
        return body[at : at + n]

    def put(self, out: bytearray, value: int) -> None:
        out += zigzag(value, self.rng.choice([1, 2]) if self.odd() else 0)

    def value(self, t: Any, body: bytes, at: int, out: bytearray) -> int:
        if isinstance(t, str) and t in self.named:
            t = self.named[t]
        if isinstance(t, list):
            index, at = self.long(body, at)
            self.put(out, index)
            return self.value(t[index], body, at, out)
        kind = t if isinstance(t, str) else t["type"]
        logical = t.get("logicalType") if isinstance(t, dict) else None
        if kind == "null":
            return at
        if kind == "boolean":
            out.append(body[at])
            return at + 1
        if kind in ("int", "long"):
            value, at = self.long(body, at)
            if logical in ("time-millis", "time-micros") and self.odd():
                value = -self.rng.choice([1, 1000, 3_599_999])
            self.put(out, value)
            return at
        if kind == "float":
            raw = self.take(body, at, 4)
            if self.odd():
                raw = struct.pack("<I", self.rng.choice([0x7FA00000, 0x7F800001, 0xFFC00001]))
            out += raw
            return at + 4
        if kind == "double":
            out += self.take(body, at, 8)
            return at + 8
        if kind == "fixed":
            out += self.take(body, at, t["size"])
            return at + t["size"]
        if kind in ("string", "bytes"):
            n, at = self.long(body, at)
            data = self.take(body, at, n)
            if logical == "uuid" and self.odd():
                data = data.upper()
            self.put(out, n)
            out += data
            return at + n
        if kind == "enum":
            index, at = self.long(body, at)
            self.put(out, index)
            return at
        if kind == "record":
            for f in t["fields"]:
                at = self.value(f["type"], body, at, out)
            return at
        if kind in ("array", "map"):
            return self.blocks(t, kind, body, at, out)
        raise ValueError(f"type {kind}")

    def blocks(self, t: dict, kind: str, body: bytes, at: int, out: bytearray) -> int:
        items: list[bytes] = []
        while True:
            count, at = self.long(body, at)
            if count == 0:
                break
            if count < 0:
                count = -count
                _, at = self.long(body, at)
            if count > len(body):
                raise ValueError("count")  # more items than bytes: a corrupted count
            for _ in range(count):
                item = bytearray()
                if kind == "map":
                    n, at = self.long(body, at)
                    self.put(item, n)
                    item += self.take(body, at, n)
                    at += n
                at = self.value(t["items" if kind == "array" else "values"], body, at, item)
                items.append(bytes(item))
        if kind == "map" and items and self.odd():
            items.append(self.rng.choice(items))  # a duplicate key
        split = [items]
        if len(items) > 1 and self.odd():
            cut = self.rng.randrange(1, len(items))
            split = [items[:cut], items[cut:]]
        for block in split:
            if block and self.odd():
                self.put(out, -len(block))
                self.put(out, sum(map(len, block)))
            elif block:
                self.put(out, len(block))
            out += b"".join(block)
        self.put(out, 0)
        return at
