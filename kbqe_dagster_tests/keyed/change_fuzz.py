"""Seeded random keyed-topic scenarios for the native kernel's differential test of change
messages (test_keyed_kernel.py).

A scenario is a keyed topic (``format: debezium``, or keyed ``format: avro`` with a version
and sometimes a delete field) with the shared random pipeline options of kernel_fuzz.py
(event time, bad-input policy, size limit, enrichment), one to three writer schemas and a
stream of messages. Schemas take every form keyed/changes.py knows — Debezium's envelope
(``before``/``after`` as ``[null, row]`` or ``[row, null]``, fields in Debezium's order or
shuffled, extra fields of every Avro type), ExtractNewRecordState's flat form (``__op``,
``__source_ts_ms``, ``__deleted`` as a string or a boolean, some of them missing), plain keyed
records (versions as longs, ints and timestamps) — plus forms it refuses (a row field after
the ``__`` fields, neither form) and a few the kernel does not read (an ``op`` enum, a
``timestamp-millis`` version in an envelope is left out: the Python path fails the range on
it). Messages are changes of every op (``c``, ``r``, ``u``, ``d``, and ``t``, ``m``, ``""``:
not row changes), with and without their images and versions, tombstones, corrupted bodies,
bad frames, unknown schema ids and oversized values.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace
from decimal import Decimal
from typing import Any

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.transforms.specs import AddField
from kbqe_dagster_tests.formats.json_fuzz import draw_kernel_transforms
from kbqe_dagster_tests.staging.avro_fuzz import (
    SchemaFactory,
    ValueFactory,
    corruptions,
    encode,
    parse,
)
from kbqe_dagster_tests.staging.kernel_equality import Msg
from kbqe_dagster_tests.staging.kernel_fuzz import event_value, random_pipeline

TOPIC = "fuzz.changes"
# A truncate is a changelog row the kernel hands back (merge_sql.py applies it): rarer here,
# as in a real stream, so that it does not hide the share of what the kernel stages.
OPS = (
    ["c"] * 8
    + ["u"] * 8
    + ["r", "r", "d", "d", "d", "d", "t", "m", "m", "", "", "cc", "cc", None, None]
)
VERSION_TYPES: list[Any] = ["long"] * 5 + [["null", "long"], "int"]
EVENT_FIELDS = {  # by form: the fields a producer would pick, and a few that are missing
    "envelope": [["source.ts_ms"], ["ts_ms"], ["ts_ms", "source.ts_ms"], ["after.ts"], ["missing"]],
    "flat": [["__source_ts_ms"], ["ts"], ["ts", "__source_ts_ms"], ["missing"]],
    "plain": [["updated_at"], ["ts", "updated_at"], ["missing"]],
}
ANY_FIELDS = [["source.ts_ms", "__source_ts_ms", "updated_at"], ["after"], ["source"]]


@dataclass
class Scenario:
    pipeline: PipelineConfig
    schemas: dict[int, dict]
    messages: list[Msg]
    form: str


def scenario(seed: int, messages: int) -> Scenario:
    rng = random.Random(seed)
    factory = SchemaFactory(rng)
    form = rng.choice(["envelope"] * 5 + ["flat"] * 2 + ["plain"] * 2)
    schemas: dict[int, dict] = {}
    for version in range(rng.randint(1, 3)):
        row = row_fields(rng, factory, form)
        schemas[11 + version] = {
            "envelope": envelope, "flat": flat, "plain": plain,
        }[form](rng, factory, row)  # fmt: skip
    topic: dict[str, Any] = {"name": TOPIC}
    if form == "plain":
        topic["keyed"] = {"key": ["id"], "version": "updated_at"}
        if rng.random() < 0.6:
            topic["keyed"]["delete_field"] = "is_deleted"
    else:
        topic["format"] = "debezium"
        topic["keyed"] = {"key": ["id"]}
    fields = rng.choice(EVENT_FIELDS[form] if rng.random() < 0.9 else ANY_FIELDS)
    pipeline = random_pipeline(rng, topic, fields, "static", size_chance=0.1,
                               source=f"change fuzz seed {seed}")  # fmt: skip
    return Scenario(pipeline, schemas, list(stream(rng, schemas, form, messages)), form)


def row_fields(rng: random.Random, factory: SchemaFactory, form: str) -> list[dict]:
    fields = [{"name": "id", "type": rng.choice(["int", "long", "string"])}]
    if rng.random() < 0.5:
        fields.append({"name": "ts", "type": rng.choice(["long", ["null", "long"], "string"])})
    if form == "plain":
        fields.append({"name": "updated_at", "type": rng.choice([
            "long", "long", "int", ["null", "long"],
            {"type": "long", "logicalType": "timestamp-millis"},
            {"type": "long", "logicalType": "timestamp-micros"},
        ])})  # fmt: skip
        fields.append({"name": "is_deleted", "type": rng.choice(["boolean", ["null", "boolean"]])})
    if rng.random() < 0.85:
        fields += factory.record(depth=1)["fields"]
    rng.shuffle(fields)
    if rng.random() < 0.5:
        # Among the others, in their order: a decimal is defined before it is named again.
        at = 0
        for semantic in semantic_fields(rng, factory):
            at = rng.randint(at, len(fields))
            fields.insert(at, semantic)
            at += 1
    return fields


def _semantic(name: str, avro: str, **more: Any) -> dict:
    return {"type": avro, "connect.version": 1, "connect.name": name, **more}


SEMANTIC_TYPES: list[Any] = [  # what Debezium's Postgres connector writes (corpus/debezium_postgres)
    _semantic("io.debezium.time.Date", "int"),
    _semantic("io.debezium.time.MicroTime", "long"),
    _semantic("io.debezium.time.MicroTimestamp", "long"),
    _semantic("io.debezium.time.Timestamp", "long"),
    _semantic("io.debezium.time.ZonedTime", "string"),
    _semantic("io.debezium.time.MicroDuration", "long"),
    _semantic("io.debezium.data.Json", "string"),
    _semantic("io.debezium.data.Uuid", "string"),
    _semantic("org.apache.kafka.connect.data.Decimal", "bytes",
              **{"connect.parameters": {"scale": "2", "connect.decimal.precision": "10"},
                 "scale": 2, "precision": 10, "logicalType": "decimal"}),
]  # fmt: skip
REENCODED_TYPES: list[Any] = [  # re-encoded by both paths (kernel: kernel/src/connect_types.rs)
    _semantic("io.debezium.time.ZonedTimestamp", "string"),
    _semantic("io.debezium.time.ZonedTimestamp", "string"),
    _semantic("io.debezium.time.NanoTimestamp", "long"),
    _semantic("io.debezium.time.NanoTime", "long"),
]
VSD = "io.debezium.data.VariableScaleDecimal"


def semantic_fields(rng: random.Random, factory: SchemaFactory) -> list[dict]:
    """Columns of Kafka Connect semantic types (core/formats/connect_types.py): most keep
    their bytes (the kernel slices them under a logical type), many are re-encoded (by the
    kernel too), a few sit where only the Python path converts them (an array of them)."""
    fields = []
    decimal: str | None = None  # a VariableScaleDecimal defined once, then named (as Debezium)
    for i in range(rng.randint(1, 5)):
        avro = rng.choice(SEMANTIC_TYPES)
        roll = rng.random()
        if roll < 0.3:
            avro = rng.choice(REENCODED_TYPES)
        elif roll < 0.45:
            if decimal is not None and rng.random() < 0.5:
                avro = decimal
            else:
                name = factory.name("VariableScaleDecimal")
                avro = {"type": "record", "name": name, "namespace": "io.debezium.data",
                        "connect.name": VSD,
                        "fields": [{"name": "scale", "type": "int"},
                                   {"name": "value", "type": "bytes"}]}  # fmt: skip
                decimal = decimal or f"io.debezium.data.{name}"
        elif roll < 0.47:  # inside an array: the Python path's (the whole schema)
            avro = {"type": "array", "items": rng.choice(REENCODED_TYPES)}
        optional = rng.random() < 0.6
        union = ["null", avro] if rng.random() < 0.9 else [avro, "null"]
        fields.append({"name": f"sem{i}", "type": union if optional else avro})
    return fields


ZONED_EDGES = [  # other spellings fromisoformat reads (so may the kernel: event_time.rs's
    # parse_iso), and texts it refuses or reads as naive (the Python path dead-letters them)
    "2024-09-13T12:36:60Z", "2024-09-13T23:59:60Z", "2024-09-13T24:00:00Z",
    "2024-09-13T12:36:45z", "2024-09-13 12:36:45Z", "2024-09-13T12:36:45+00",
    "2024-09-13T12:36:45+0000", "2024-09-13T12:36:45.Z", "2024-09-13T12:36:45,5Z",
    "2024-09-13T12:36:45.1234567890Z", "2024-09-13T12:36:45+24:00", "2024-09-13T12:36:45",
    "2024-09-13T12:36:45+02:00:30", "2024-09-13T12:36Z", "2023-02-29T00:00:00Z",
    "2024-02-29T00:00:00Z", "0000-01-01T00:00:00Z", "0001-01-01T00:00:00Z",
    "0001-01-01T00:00:00+00:01", "0001-01-01T00:59:59.999999+01:00",
    "9999-12-31T23:59:59.999999Z", "9999-12-31T23:59:59.9999999Z",
    "9999-12-31T23:59:59.999999-00:01", "9999-12-31T23:00:00-01:00", "1969-12-31T23:59:59.9999995-00:00",
    "", "not a time", "２024-09-13T12:36:45Z", "2024-09-13T12:36:45.5+23:59",
    "2024-09-13T12:36:45.5-23:59", "2024-9-13T12:36:45Z", "2024-09-13T12:36:45+02:60",
    "2024-09-13T12:36:45Z[UTC]", "2024-09-13T12:36:45+02:00[Europe/Paris]", "2024-09-13",
    "2024-09-13T12:36.5Z", "2024-09-13x12:36:45.5+0200", "2024-09-13T12:36:45-01:30:15",
    "2024-09-13T12:36:45.5+01:30:15.5", "2024-09-13T12:36:45+0130", "2024-09-13T12:36:45-013015",
    "2024-W37-5T12:36:45Z", "20240913T123645Z", "2024-09-13T12:36:45.000000000000001Z",
]  # fmt: skip


def zoned_timestamp(rng: random.Random) -> str:
    """A ZonedTimestamp as Debezium writes it (any instant of years 1-9999, 0 to 9 fraction
    digits, ``Z`` or ``±HH:MM``), and sometimes in another spelling fromisoformat reads."""
    year = rng.choice([1, 2, 1969, 1970, 2024, 9998, 9999, rng.randint(1, 9999)])
    month, day = rng.randint(1, 12), rng.randint(1, 28 if rng.random() < 0.9 else 31)
    other = rng.random() < 0.2
    separator = rng.choice("T t_") if other else "T"
    text = f"{year:04d}-{month:02d}-{day:02d}{separator}{rng.randint(0, 23):02d}"
    text += f":{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
    places = rng.choice([0, 0, 6, 6, 3, rng.randint(1, 9), rng.randint(10, 14) if other else 6])
    if places:
        point = rng.choice(".,") if other else "."
        text += point + "".join(rng.choice("0123456789") for _ in range(places))
    if rng.random() < 0.6:
        return text + "Z"
    sign, hours, minutes = rng.choice("+-"), rng.randint(0, 23), rng.choice([0, 30, 45, 59])
    if other:
        return text + rng.choice([f"{sign}{hours:02d}", f"{sign}{hours:02d}{minutes:02d}",
                                  f"{sign}{hours:02d}:{minutes:02d}:{rng.randint(0, 59):02d}"])  # fmt: skip
    return text + f"{sign}{hours:02d}:{minutes:02d}"


def variable_scale_decimal(rng: random.Random) -> dict:
    """Debezium's ``{scale, value}``: unscaled values of many sizes (in their shortest two's
    complement bytes or longer, as a sign extension), scales from negative to past 38."""
    if rng.random() < 0.6:  # what a numeric column mostly holds: NUMERIC takes it exactly
        unscaled = rng.randint(-(10**15), 10**15)
        return {"scale": rng.randint(0, 9), "value": unscaled.to_bytes(8, "big", signed=True)}
    bits = rng.choice([0, 1, 7, 8, 9, 31, 64, 100, 125, 127, 128, 140, rng.randint(0, 160)])
    unscaled = rng.getrandbits(bits) if bits else 0
    if rng.random() < 0.5:
        unscaled = -unscaled - rng.choice([0, 1])
    if rng.random() < 0.3:  # whole multiples of powers of ten: the exact conversions
        unscaled = rng.randint(-999, 999) * 10 ** rng.randint(0, 40)
    scale = rng.choice([0, 0, 2, 9, 9, 10, 12, 18, 38, -1, -28, -29, -30, 48, 49, 100,
                        rng.randint(-40, 60), -(2**31), 2**31 - 1])  # fmt: skip
    size = max(1, (unscaled.bit_length() + 8) // 8) + rng.choice([0, 0, 0, 1, 3])
    value = unscaled.to_bytes(size, "big", signed=True)
    if unscaled == 0 and rng.random() < 0.3:
        value = b""
    return {"scale": scale, "value": value}


class SemanticValues(ValueFactory):
    """Values as Debezium writes them for semantic types (a timestamp with a zone as ISO text,
    a numeric of no scale as scale and unscaled bytes), and sometimes values no column could
    hold (dead-lettered as ``unconvertible_value`` by both paths) or spellings only the Python
    path reads."""

    def value(self, t: Any, depth: int = 0) -> Any:
        name = t.get("connect.name") if isinstance(t, dict) else None
        if isinstance(t, str) and t.startswith("io.debezium.data.VariableScaleDecimal"):
            name = VSD  # the decimal named again
        rng = self.rng
        if name == "io.debezium.time.ZonedTimestamp":
            roll = rng.random()
            if roll < 0.87:
                return zoned_timestamp(rng)
            if roll < 0.95:
                return rng.choice(ZONED_EDGES)
        if name == VSD and rng.random() < 0.95:
            return variable_scale_decimal(rng)
        if name in ("io.debezium.time.NanoTimestamp", "io.debezium.time.NanoTime"):
            if rng.random() < 0.7:
                return rng.choice([0, -1, -999, -1000, -1001, 1_726_238_205_123_456_789,
                                   -(2**63), 2**63 - 1, rng.randint(-(2**63), 2**63 - 1)])  # fmt: skip
        if name == "org.apache.kafka.connect.data.Decimal":  # numeric(10,2)
            return Decimal(rng.choice(["0.00", "12.34", "-99999999.99", "0.01"]))
        if name == "io.debezium.data.Json" and rng.random() < 0.5:
            return '{"a": [1, 2]}'
        return super().value(t, depth)


def envelope(rng: random.Random, factory: SchemaFactory, row: list[dict]) -> dict:
    name = factory.name("Value")
    value = {"type": "record", "name": name, "fields": row}
    source = {
        "type": "record", "name": factory.name("Source"), "namespace": "io.debezium.connector",
        "fields": [{"name": "connector", "type": "string"},
                   {"name": "ts_ms", "type": rng.choice(VERSION_TYPES)},
                   {"name": "txId", "type": ["null", "long"]}],
    }  # fmt: skip
    op: Any = "string"
    roll = rng.random()
    if roll < 0.1:
        op = ["null", "string"]
    elif roll < 0.13:  # an enum: the probe reads its symbol, the kernel does not read enums
        op = {"type": "enum", "name": factory.name("Op"), "symbols": ["c", "r", "u", "d", "t"]}
    fields = [
        {"name": "before", "type": None},
        {"name": "after", "type": None},
        {"name": "source", "type": source},
        {"name": "op", "type": op},
        {"name": "ts_ms", "type": ["null", "long"]},
        {"name": "transaction", "type": ["null", "string"]},
    ]
    if rng.random() < 0.3:  # other orders and extra fields: the cut is by field index
        fields += factory.record(depth=1)["fields"][:3]
        rng.shuffle(fields)
    if rng.random() < 0.02:  # neither form: every message is dead-lettered
        fields = [f for f in fields if f["name"] != "before"]
    # The row record is defined by the first image field and named by the second, as
    # Debezium writes it; sometimes as [row, null], which Avro allows and Debezium never writes.
    swap = rng.random() < 0.15
    images = [f for f in fields if f["name"] in ("before", "after")]
    for i, f in enumerate(images):
        union: list[Any] = ["null", value if i == 0 else name]
        f["type"] = union[::-1] if swap else union
    return {"type": "record", "name": "Envelope", "namespace": factory.name("fuzz.db"),
            "fields": fields}  # fmt: skip


def flat(rng: random.Random, factory: SchemaFactory, row: list[dict]) -> dict:
    extra = [
        {"name": "__op", "type": rng.choice(["string", ["null", "string"]])},
        {"name": "__source_ts_ms", "type": rng.choice(VERSION_TYPES)},
        {
            "name": "__deleted",
            "type": rng.choice([["null", "string"], "string", "boolean", ["null", "boolean"]]),
        },  # fmt: skip
    ]
    if rng.random() < 0.3:
        extra.pop(rng.choice([0, 2]))  # __op or __deleted missing: the fallbacks decide
    if rng.random() < 0.03:
        extra.pop(1 if len(extra) == 3 else 0)  # no __source_ts_ms: refused
    fields = row + extra
    if rng.random() < 0.03:  # a row field after the transform's: refused
        fields.append({"name": "late", "type": "int"})
    return {"type": "record", "name": factory.name("Flat"), "namespace": "fuzz.db",
            "fields": fields}  # fmt: skip


def plain(rng: random.Random, factory: SchemaFactory, row: list[dict]) -> dict:
    return {"type": "record", "name": factory.name("Price"), "namespace": "fuzz.db",
            "fields": row}  # fmt: skip


def stream(rng: random.Random, schemas: dict[int, dict], form: str, count: int):
    parsed = {sid: parse(schema) for sid, schema in schemas.items()}
    start = rng.choice([0, 5, 1_000_000])
    for i in range(count):
        sid = rng.choice(list(schemas))
        schema, (p, named) = schemas[sid], parsed[sid]
        roll = rng.random()
        value: bytes | None
        if roll < 0.08:
            value = None  # a tombstone: counted, never a dead letter
        elif roll < 0.1:
            value = rng.choice([b"", b"\x00\x00", b"\x00" + (999).to_bytes(4, "big") + b"\x02a"])
        else:
            body = encode(p, change(rng, schema, named, form))
            if roll < 0.16:
                body = rng.choice(corruptions(rng, body))
            value = b"\x00" + sid.to_bytes(4, "big") + body
        key = rng.choice([None, b"k" + str(i).encode(), rng.randbytes(12)])
        headers = rng.choice([None, [], [("h", b"v")], [("trace", None), ("zürich", b"\x01")]])
        timestamp = rng.choice([(1, 1_726_238_205_123 + i)] * 3 + [(2, 0), (0, -1), (1, -5)])
        yield Msg(TOPIC, 0, start + i, value, key, headers, timestamp)


def change(rng: random.Random, schema: dict, named: dict, form: str) -> dict:
    values = SemanticValues(rng, named)
    out: dict[str, Any] = {}
    for f in schema["fields"]:
        name, t = f["name"], f["type"]
        if name in ("source", "ts_ms", "__source_ts_ms", "updated_at") or name == "ts":
            out[name] = version(rng, t, values)
        elif name == "op":
            op = rng.choice(OPS)
            if isinstance(t, dict):  # the enum
                op = op if op in t["symbols"] else "c"
            out[name] = op if op is not None or isinstance(t, list) else "c"
        elif name == "__op":
            out[name] = rng.choice([*OPS, *OPS])
            if out[name] is None and t == "string":
                out[name] = ""
        elif name == "__deleted":
            boolean = "boolean" in t
            out[name] = rng.choice(
                [True, False, None] if boolean else ["true", "false", None, "TRUE"]
            )
            if out[name] is None and not isinstance(t, list):
                out[name] = False if boolean else "false"
        else:
            out[name] = values.value(t)
    if form == "envelope" and "op" in out:
        op = out["op"]
        # Images as Debezium writes them, sometimes missing where they are needed.
        image = next(b for f in schema["fields"] if f["name"] in ("before", "after")
                     for b in f["type"] if isinstance(b, dict))  # fmt: skip
        for side, wanted in (("before", op in ("u", "d")), ("after", op in ("c", "r", "u"))):
            present = wanted if rng.random() < 0.95 else not wanted
            out[side] = values.value(image) if present else None
    return out


def version(rng: random.Random, t: Any, values: ValueFactory) -> Any:
    if isinstance(t, dict) and t.get("type") == "record":  # source: its ts_ms
        return {f["name"]: version(rng, f["type"], values) if f["name"] == "ts_ms"
                else values.value(f["type"]) for f in t["fields"]}  # fmt: skip
    if rng.random() < 0.6 and t in ("long", ["null", "long"]):  # a real change's version
        return 1_726_238_205_123 + rng.randrange(10**9)
    special = event_value(rng, t)
    if special is not None or isinstance(t, list):
        return special
    return values.value(t)


def with_row_transforms(make: Any) -> Any:
    """``make``'s scenarios with transforms over the row that the kernel does
    (json_fuzz.draw_kernel_transforms with rewrites: renames, drops, casts, masks, timestamps
    between numbers, constants; no parts of the message, which leave a schema to the Python
    path whole), drawn over the row fields every schema has alike but the key field ``id``
    (the keyed rules refuse most of them there), from a generator of their own so the
    messages are those of the same seed."""

    def transformed(seed: int, messages: int) -> Any:
        case = make(seed, messages)
        rng = random.Random(~seed)
        rows = [row_record(schema, case.form) for _, schema in sorted(case.schemas.items())]
        common = [f for f in rows[0]["fields"] if f["name"] != "id"
                  and all(f in row["fields"] for row in rows[1:])]  # fmt: skip
        row = {**rows[0], "fields": common}
        specs = tuple(
            spec for spec in draw_kernel_transforms(rng, row, (), rewrites=True)
            if not (isinstance(spec, AddField) and (spec.header or spec.message))
        )  # fmt: skip
        topic = case.pipeline.topics[0]
        case.pipeline = replace(case.pipeline, topics=(replace(topic, transforms=specs),))
        return case

    return transformed


def row_record(schema: dict, form: str) -> dict:
    """The row record of a change schema: an envelope's image, a flat record's fields before
    the first ``__`` one, a plain record whole."""
    if form == "envelope":
        image = next(f for f in schema["fields"] if f["name"] in ("before", "after"))
        return next(t for t in image["type"] if isinstance(t, dict))
    if form == "flat":
        fields = schema["fields"]
        end = next((i for i, f in enumerate(fields) if f["name"].startswith("__")), len(fields))
        return {**schema, "fields": fields[:end]}
    return schema
