"""Seeded random scenarios of topics keyed by their Kafka key (``keyed.key_from: kafka_key``) for
the native kernel's differential test (test_table_kernel.py).

A scenario is a compacted topic with Confluent Avro values, ``format: json`` values (a third
of them: one declared schema, its values spelled every way json_fuzz.py's writer spells JSON,
some mangled) or ``format: json_schema`` values (a sixth: one to three registry JSON Schemas of
json_schema_fuzz.py's making, with a version and a delete property, their values written and
mangled the same way, some breaking their schema) or ``format: protobuf`` values (another
sixth: protobuf_fuzz.py's message types and messages written at the wire level, corrupted ones
among them) and one key format — ``avro`` (one or
two registry key records, sometimes one that is not a record or whose field collides with a
change column), ``string`` (its one column sometimes named like a value field, which is then
left out) or ``json`` (named fields of every ``key_types`` kind) — the shared random pipeline
options of kernel_fuzz.py (event time, bad-input policy, size limit, enrichment), sometimes a
version and a delete field, one to three value schemas (fields of every Avro type, unions with
and without null, a field named like a key column in another case, sometimes Kafka Connect
semantic types the Python path converts) and a stream of messages: upserts, tombstones of
existing keys, re-creates after them, null keys, bad keys of every kind, corrupted bodies, bad
frames, unknown schema ids, oversized values and messages without a Kafka timestamp.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from typing import Any

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.resources.schema_registry import RegisteredSchema
from kbqe_dagster_tests.formats import json_fuzz, json_schema_fuzz, protobuf_fuzz
from kbqe_dagster_tests.keyed.change_fuzz import SemanticValues, semantic_fields
from kbqe_dagster_tests.staging.avro_fuzz import SchemaFactory, corruptions, encode, parse
from kbqe_dagster_tests.staging.kernel_equality import Msg
from kbqe_dagster_tests.staging.kernel_fuzz import event_value, random_pipeline
from kbqe_dagster_tests.support.fakes import FakeSchemaRegistry

TOPIC = "fuzz.table"
KEY_IDS = (21, 22)
NOT_A_RECORD_KEY = 23


@dataclass
class Scenario:
    pipeline: PipelineConfig
    schemas: dict[int, Any]
    messages: list[Msg]
    key_format: str
    adversarial: bool = True
    value_format: str = "avro"
    lookup: Any = None
    """The registry boundary when ``schemas`` (as Avro) is not: Protobuf scenarios'."""


def scenario(seed: int, messages: int) -> Scenario:
    rng = random.Random(seed)
    factory = SchemaFactory(rng)
    key_format = rng.choice(["avro", "string", "json"])
    keyed: dict[str, Any] = {"key_from": "kafka_key", "key_format": key_format}
    schemas: dict[int, Any] = {}
    key_columns: list[str]
    if key_format == "avro":
        for sid in KEY_IDS[: rng.randint(1, 2)]:
            fields = [{"name": "id", "type": rng.choice(["long", "int", "string"])}]
            if rng.random() < 0.4:
                fields.append(
                    {"name": "region", "type": rng.choice(["string", ["null", "string"]])}
                )
            if rng.random() < 0.2:
                fields += factory.record(depth=2)["fields"][:2]
            if rng.random() < 0.03:
                fields.append({"name": "_deleted", "type": "boolean"})  # collides: dead letters
            schemas[sid] = {"type": "record", "name": factory.name("Key"), "namespace": "fuzz.k",
                            "fields": fields}  # fmt: skip
        schemas[NOT_A_RECORD_KEY] = "string"
        key_columns = ["id", "region"]
    elif key_format == "string":
        keyed["key"] = [rng.choice(["customer_key", "id", "ID"])]
        key_columns = keyed["key"]
    else:
        keyed["key"] = rng.sample(["region", "id", "score", "active"], rng.randint(1, 3))
        kinds = {"region": "string", "id": "long", "score": "double", "active": "boolean"}
        keyed["key_types"] = {k: kinds[k] for k in keyed["key"] if rng.random() < 0.9}
        key_columns = keyed["key"]
    if rng.random() < 0.4:
        keyed["version"] = "updated_at"
    if rng.random() < 0.4:
        keyed["delete_field"] = "is_deleted"
    if rng.random() < 0.1:
        keyed["semantic_types"] = False
    topic: dict[str, Any] = {"name": TOPIC, "keyed": keyed}
    values = {}
    adversarial = rng.random() < 0.5
    value_format = "json" if rng.random() < 1 / 3 else "avro"
    if value_format == "avro":
        value_format = rng.choice(["avro", "avro", "json_schema", "protobuf"])
    if value_format == "protobuf":  # protobuf_fuzz.py's Event and Other types, at the wire level
        proto = protobuf_fuzz.scenario(rng.randrange(2**32), messages)
        topic["format"] = "protobuf"
        keyed.pop("version", None)  # a version or delete field the Other type lacks is a
        keyed.pop("delete_field", None)  # configuration error (the range fails): none here
    elif value_format == "json_schema":
        topic["format"] = "json_schema"
        json_schemas = json_schema_values(rng, key_columns, adversarial)
    elif value_format == "json":  # types the JSON kernel hands back in adversarial scenarios only
        declared = json_fuzz.Schemas(rng, refused=0.05 if adversarial else 0.0)
        topic.update(format="json", schema=value_schema(rng, factory, keyed, key_columns, declared))
    else:
        for version in range(rng.randint(1, 3)):
            values[11 + version] = value_schema(rng, factory, keyed, key_columns)
        schemas.update(values)
    event_fields = rng.choice([["updated_at"], ["ts", "updated_at"], ["missing"]])
    if value_format == "json_schema" and rng.random() < 0.5:  # its schemas' event time property
        event_fields = rng.choice([["eventTime"], ["eventTime", "updated_at"]])
    if value_format == "protobuf":
        event_fields = rng.choice([["eventTime"], ["meta.ts", "eventTime"], ["at", "eventTime"],
                                   ["missing", "eventTime"]])  # fmt: skip
    if value_format == "json":  # the JSON kernel reads only fields the declared schema has: a
        # range whose event time names another stays on the Python path (json_stage.py)
        declared_names = {f["name"] for f in topic["schema"]["fields"]}
        event_fields = [f for f in event_fields if f in declared_names] or ["updated_at"]
    pipeline = random_pipeline(rng, topic, event_fields, "static", size_chance=0.1,
                               source=f"table fuzz seed {seed}")  # fmt: skip
    if value_format == "json":
        values = {JSON_VALUE: topic["schema"]}
    if value_format == "protobuf":
        key_schemas = {
            sid: RegisteredSchema(sid, "AVRO", schema) for sid, schema in schemas.items()
        }
        msgs = list(rekeyed(rng, proto.messages, schemas, keyed, adversarial))
        lookup = FakeSchemaRegistry({**proto.registry.schemas, **key_schemas})
        return Scenario(pipeline, schemas, msgs, key_format, adversarial, value_format, lookup)
    if value_format == "json_schema":
        msgs = list(json_schema_stream(rng, schemas, json_schemas, keyed, messages, adversarial))
        registered = {
            sid: RegisteredSchema(sid, "JSON", json.dumps(schema))
            for sid, schema in json_schemas.items()
        }
        return Scenario(pipeline, {**schemas, **registered}, msgs, key_format, adversarial,
                        value_format)  # fmt: skip
    msgs = list(stream(rng, schemas, values, keyed, messages, adversarial))
    return Scenario(pipeline, schemas, msgs, key_format, adversarial, value_format)


JSON_VALUE = 0
"""``stream``'s stand-in schema id of a ``format: json`` scenario's declared schema."""


def value_schema(rng: random.Random, factory: SchemaFactory, keyed: dict, keys: list[str],
                 declared: json_fuzz.Schemas | None = None) -> dict:  # fmt: skip
    """A value schema: registered Avro, or with ``declared`` a ``format: json`` topic's (its
    random fields of the types JSON can fill, sometimes one the JSON kernel hands back; no
    Kafka Connect semantic types)."""
    fields: list[dict[str, Any]] = [{"name": "id", "type": rng.choice(["long", "string"])}]
    if rng.random() < 0.5:
        fields.append({"name": "ts", "type": rng.choice(["long", ["null", "long"], "string"])})
    if rng.random() < 0.3:  # a key column's name in another case: left out
        fields.append({"name": rng.choice(keys).upper(), "type": "string"})
    fields.append({"name": "updated_at", "type": rng.choice([
        "long", "int", ["null", "long"],
        {"type": "long", "logicalType": "timestamp-millis"},
        {"type": "long", "logicalType": "timestamp-micros"},
    ])})  # fmt: skip
    fields.append({"name": "is_deleted", "type": rng.choice(["boolean", ["null", "boolean"]])})
    fields.append({"name": "choice", "type": rng.choice([["int", "string"], ["string", "null"]])})
    generated: list[dict[str, Any]] = []
    if rng.random() < 0.85 and declared is not None:
        generated = declared.record(depth=1)["fields"]
        declared.named.pop()  # that record's fields are the value's: its name is not a type
    elif rng.random() < 0.85:
        fields += factory.record(depth=1)["fields"]
    if rng.random() < 0.02:
        fields.append({"name": "_op", "type": "string"})  # collides with a change column
    seen: set[str] = set()
    fields = [f for f in fields if not (f["name"] in seen or seen.add(f["name"]))]
    rng.shuffle(fields)
    for field in fields:  # among the JSON fields, whose order stays (a named type is defined
        generated.insert(rng.randint(0, len(generated)), field)  # before it is used again)
    fields = generated
    if declared is None and rng.random() < 0.15:  # after the others, in their order: a decimal
        # is defined, then named
        fields += semantic_fields(rng, factory)
    return {"type": "record", "name": factory.name("Row"), "namespace": "fuzz.db",
            "fields": fields}  # fmt: skip


def rekeyed(rng: random.Random, messages: list[Msg], schemas: dict[int, Any], keyed: dict,
            adversarial: bool):  # fmt: skip
    """protobuf_fuzz.py's messages as a table topic's: each with a key as :func:`stream` keys
    its values (updates, re-creates, bad keys), some values made tombstones of their key."""
    keys = Keys(rng, keyed, schemas, adversarial)
    for i, msg in enumerate(messages):
        key = keys.next(i)
        value = None if rng.random() < 0.15 else msg.value()
        keys.wrote(key, value)
        yield Msg(TOPIC, 0, msg.offset(), value, key, msg.headers(), msg.timestamp())


class Keys:
    """A table topic's message keys as producers write them: new keys among a few (so the same
    rows again), live keys updated, deleted keys re-created, now and then a bad key (more in
    adversarial scenarios); a value makes its key live, a tombstone deleted (:meth:`wrote`)."""

    def __init__(self, rng: random.Random, keyed: dict, schemas: dict[int, Any],
                 adversarial: bool) -> None:  # fmt: skip
        self.rng, self.keyed = rng, keyed
        self.parsed = {sid: parse(s) for sid, s in schemas.items() if isinstance(s, dict)}
        self.bad = 0.12 if adversarial else 0.01
        self.live: list[bytes] = []  # keys with a value: what a tombstone deletes
        self.deleted: list[bytes] = []  # what is re-created

    def next(self, i: int) -> bytes | None:
        rng = self.rng
        roll = rng.random()
        if roll < 0.15 and self.live:
            key = rng.choice(self.live)
        elif roll < 0.2 and self.deleted:
            key = rng.choice(self.deleted)
        else:
            key = good_key(rng, self.keyed, self.parsed, i)
        if rng.random() < self.bad:
            key = bad_key(rng, self.keyed, self.parsed)
        return key

    def wrote(self, key: bytes | None, value: bytes | None) -> None:
        """Note that ``key`` got ``value`` (None: a tombstone)."""
        if value is None:
            if key in self.live:
                self.live.remove(key)  # type: ignore[arg-type]
                self.deleted.append(key)  # type: ignore[arg-type]
        elif key is not None and key not in self.live:
            self.live.append(key)


def json_schema_values(rng: random.Random, keys: list[str], adversarial: bool) -> dict[int, dict]:
    """One to three registry JSON Schemas (ids from 31) of json_schema_fuzz.py's making (a
    later one sometimes the earlier with an optional property added), each with the version
    and delete properties ``updated_at`` and ``is_deleted``, sometimes an ``id`` or a key
    column's name in another case (left out)."""

    def new_schema() -> dict:
        maker = json_schema_fuzz.Schemas(rng, odd=0.06 if adversarial else 0.0)
        schema = maker.root(rng.choice(json_schema_fuzz.EVENT_SCHEMAS), meta=False)
        properties = schema["properties"]
        properties["updated_at"] = rng.choice([
            {"type": "integer"}, {"type": ["integer", "null"]},
            {"type": "string", "format": "date-time"},
        ])  # fmt: skip
        properties["is_deleted"] = rng.choice([{"type": "boolean"},
                                               {"type": ["boolean", "null"]}])  # fmt: skip
        if rng.random() < 0.3:
            properties["id"] = {"type": rng.choice(["integer", "string"])}
        if rng.random() < 0.2:
            properties[rng.choice(keys).upper()] = {"type": "string"}
        if rng.random() < 0.5:
            schema["required"] = sorted({*schema.get("required", ()), "updated_at"})
        return schema

    return json_schema_fuzz.versions(rng, new_schema, JSON_SCHEMA_IDS)


JSON_SCHEMA_IDS = (31, 32, 33)


def json_schema_stream(rng: random.Random, schemas: dict[int, Any], json_schemas: dict[int, dict],
                       keyed: dict, count: int, adversarial: bool):  # fmt: skip
    """Framed JSON values of ``json_schemas`` (mostly valid, some breaking their schema, some
    mangled), tombstones, bad frames and bad keys, as :func:`stream` makes Avro values."""
    writer = json_fuzz.Writer(rng, 0.05 if adversarial else 0.003)
    wrong = 0.01 if adversarial else 0.002
    makers = {
        sid: json_schema_fuzz.Values(rng, schema, wrong) for sid, schema in json_schemas.items()
    }
    start = rng.choice([0, 5, 1_000_000])
    keys = Keys(rng, keyed, schemas, adversarial)
    bad = keys.bad
    for i in range(count):
        key = keys.next(i)
        value: bytes | None
        roll = rng.random()
        if roll < 0.15:
            value = None
            keys.wrote(key, value)
        elif roll < 0.15 + bad / 3:
            value = rng.choice([b"", b"\x00\x00", encode_frame(999, b"{}"),
                                b"\x01" + JSON_SCHEMA_IDS[0].to_bytes(4, "big") + b"{}"])  # fmt: skip
        else:
            sid = rng.choice(list(json_schemas))
            record = makers[sid].value(json_schemas[sid])
            if isinstance(record, dict) and rng.random() < 0.7:
                if json_schemas[sid]["properties"]["updated_at"].get("format") is None:
                    record["updated_at"] = 1_726_238_205_123 + rng.randrange(10**9)
            text = (writer.ws() + writer.dumps(record) + writer.ws()).encode(
                "utf-8", "surrogatepass"
            )
            if rng.random() < bad / 2:
                text = json_fuzz.mangle(rng, text)
            value = encode_frame(sid, text)
            keys.wrote(key, value)
        headers = rng.choice([None, [], [("h", b"v")]])
        timestamp = rng.choice([(1, 1_726_238_205_123 + i)] * 6 + [(2, 0), (0, -1), (1, -5)])
        yield Msg(TOPIC, 0, start + i, value, key, headers, timestamp)


def stream(rng: random.Random, schemas: dict[int, Any], values: dict[int, dict], keyed: dict,
           count: int, adversarial: bool):  # fmt: skip
    json_values = JSON_VALUE in values
    writer = json_fuzz.Writer(rng, 0.05 if adversarial else 0.003)
    declared = json_fuzz.Values(rng, values[JSON_VALUE], 0.02 if adversarial else 0.002) \
        if json_values else None  # fmt: skip
    parsed = {} if json_values else {sid: parse(schema) for sid, schema in values.items()}
    start = rng.choice([0, 5, 1_000_000])
    keys = Keys(rng, keyed, {sid: s for sid, s in schemas.items() if sid not in values},
                adversarial)  # fmt: skip
    bad = keys.bad
    for i in range(count):
        key = keys.next(i)
        value: bytes | None
        roll = rng.random()
        if roll < 0.15:
            value = None  # a tombstone
            keys.wrote(key, value)
        elif roll < 0.15 + bad / 3:
            value = rng.choice([b"", b"\x00\x00", b"\x00" + (999).to_bytes(4, "big") + b"\x02a"])
        elif declared is not None:
            record = json_row(rng, values[JSON_VALUE], declared)
            value = (writer.ws() + writer.dumps(record) + writer.ws()).encode(
                "utf-8", "surrogatepass"
            )
            if rng.random() < bad / 2:
                value = json_fuzz.mangle(rng, value)
            keys.wrote(key, value)
        else:
            sid = rng.choice(list(values))
            body = encode(parsed[sid][0], row(rng, values[sid], parsed[sid][1]))
            if rng.random() < bad / 2:
                body = rng.choice(corruptions(rng, body))
            value = b"\x00" + sid.to_bytes(4, "big") + body
            keys.wrote(key, value)
        headers = rng.choice([None, [], [("h", b"v")]])
        timestamp = rng.choice([(1, 1_726_238_205_123 + i)] * 6 + [(2, 0), (0, -1), (1, -5)])
        yield Msg(TOPIC, 0, start + i, value, key, headers, timestamp)


def good_key(rng: random.Random, keyed: dict, key_parsed: dict, i: int) -> bytes:
    n = rng.randrange(40)  # few keys: updates, deletes and re-creates of the same rows
    key_format = keyed["key_format"]
    if key_format == "string":
        return rng.choice([f"C-{n}", f"zürich-{n}", ""]).encode()
    if key_format == "json":
        kinds = keyed.get("key_types", {})
        out: dict[str, Any] = {}
        for name in keyed["key"]:
            kind = kinds.get(name, "string")
            out[name] = {"string": f"r{n}", "long": n - 20, "double": rng.choice([n / 4, n] * 15 + [1e300, -0.0]),
                         "boolean": n % 2 == 0}[kind]  # fmt: skip
        if rng.random() < 0.2:
            out["extra"] = rng.choice([[1, {"a": None}], "x", 2.5])
        text = json.dumps(out, separators=rng.choice([(",", ":"), (", ", ": ")]))
        return text.encode()
    sid = rng.choice(list(key_parsed))
    p, named = key_parsed[sid]
    values = SemanticValues(rng, named)
    record = {f["name"]: values.value(f["type"]) for f in p["fields"]}
    if rng.random() < 0.8:  # mostly a few ids: the same rows again
        record["id"] = str(n) if p["fields"][0]["type"] == "string" else n
    return b"\x00" + sid.to_bytes(4, "big") + encode(p, record)


def bad_key(rng: random.Random, keyed: dict, key_parsed: dict) -> bytes | None:
    roll = rng.random()
    if roll < 0.3:
        return None
    key_format = keyed["key_format"]
    if key_format == "string":
        return rng.choice([b"\xff", b"\xed\xa0\x80", b"ok\xc3"])
    if key_format == "json":
        name = keyed["key"][0]
        return rng.choice([
            b"[1]", b"{}", b"{", b"NaN", f'{{"{name}": null}}'.encode(),
            f'{{"{name}": "1"}}'.encode(), f'{{"{name}": 1.5}}'.encode(),
            f'{{"{name}": -0}}'.encode(), f'{{"{name}": true}}'.encode(),
            f'{{"{name}": 99999999999999999999}}'.encode(), f'{{"{name}": NaN}}'.encode(),
            f'{{"{name}": "\\ud800"}}'.encode(), b"\xef\xbb\xbf" + f'{{"{name}": 1}}'.encode(),
            f'{{"{name}": 1, "{name}": "r"}}'.encode(),
        ])  # fmt: skip
    sid = rng.choice(list(key_parsed))
    good = good_key(rng, keyed, key_parsed, 0)
    return rng.choice([
        b"C-1", b"\x00" + (99).to_bytes(4, "big") + b"\x02",
        b"\x00" + NOT_A_RECORD_KEY.to_bytes(4, "big") + b"\x02a",
        b"\x00" + sid.to_bytes(4, "big"), good + b"\x00", good[:-1], b"\x01" + good[1:],
    ])  # fmt: skip


def row(rng: random.Random, schema: dict, named: dict) -> dict:
    values = SemanticValues(rng, named)
    out: dict[str, Any] = {}
    for f in schema["fields"]:
        name, t = f["name"], f["type"]
        if name == "updated_at":
            if rng.random() < 0.7 and t in ("long", ["null", "long"]):
                out[name] = 1_726_238_205_123 + rng.randrange(10**9)
            else:
                special = event_value(rng, t)
                out[name] = (
                    special if special is not None or isinstance(t, list) else values.value(t)
                )
        elif name == "is_deleted":
            out[name] = rng.choice([True, False, False, False] + ([None] if "null" in t else []))
        else:
            out[name] = values.value(t)
    return out


def json_row(rng: random.Random, schema: dict, values: json_fuzz.Values) -> dict:
    """A ``format: json`` value's fields (some left out: their default, or a mismatch)."""
    out: dict[str, Any] = {}
    for f in schema["fields"]:
        name, t = f["name"], f["type"]
        if rng.random() < 0.02:
            continue
        if name == "updated_at":
            if rng.random() < 0.7 and t in ("long", ["null", "long"]):
                out[name] = 1_726_238_205_123 + rng.randrange(10**9)
            else:
                out[name] = json_fuzz.event_value(rng, t)
        elif name == "is_deleted":
            out[name] = rng.choice([True, False, False, False] + ([None] if "null" in t else []))
        else:
            out[name] = values.value(t)
    return out
