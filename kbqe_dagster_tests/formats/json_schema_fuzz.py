"""Seeded random ``format: json_schema`` scenarios for the JSON Schema kernel's differential
test (test_json_schema_kernel.py).

A scenario is a topic (routing mode, event-time rules, enrichment columns, bad-input policy,
message size limit: ``kernel_fuzz.random_pipeline``) with one to three registry JSON Schemas —
every construct the Avro mapping takes (records, maps, arrays, enums of strings or integers,
``date-time`` and ``date`` strings, ``$ref`` to definitions, ``allOf`` of one, the null idioms
of ``anyOf``/``oneOf`` and type lists) with the keywords the kernel validates (bounds, lengths,
``const``, ``required``, ``additionalProperties``) under every draft, and sometimes what it
refuses or checks only in part (``pattern``, ``multipleOf``, ``uniqueItems``, a property renamed for Avro) or what the
mapping refuses — and a stream of framed JSON values written the many ways producers and JSON
allow (formats/json_fuzz.py's writer), some wrong on purpose: values that break a keyword,
wrong types, missing properties, date-times without offsets or with odd spellings, unknown
schema ids, bad frames, tombstones, mangled JSON.

The kernel's share of the records that stage (``FuzzTally``, issue 26: >= 95 %) is not raised
by this distribution: what it leaves to the Python path is counted by rule (the tally's
"records staged by Python after a hand-back"). At 200,000 messages (seeds 0-499) the kernel
stages 98.8 % of them; of the 1.2 % it hands back, 328 records hold lone surrogates, which
the writer (formats/json_fuzz.py's ``Writer.string``) inserts on purpose into keys and
strings at its ``odd`` rate (0.3 % of the strings of producer-like scenarios, 5 % of
adversarial ones) and the kernel hands back by design; the other 14 are ``oneOf`` branches it
cannot call rejected, integers beyond 64 bits and floats compared with integer literals.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.formats.json_schema_avro import map_json_schema
from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.resources.schema_registry import RegisteredSchema
from kbqe_dagster_tests.formats.json_fuzz import (
    WORDS,
    Writer,
    draw_kernel_transforms,
    framed_message,
    mangle,
    repeated_headers,
)
from kbqe_dagster_tests.staging.kernel_equality import Msg
from kbqe_dagster_tests.staging.kernel_fuzz import DATASETS, TABLES, iso_text, random_pipeline

TOPIC = "fuzz.jsonschema"
DRAFTS = [None, None, "http://json-schema.org/draft-07/schema#",
          "https://json-schema.org/draft/2020-12/schema", "http://json-schema.org/draft-06/schema#",
          "http://json-schema.org/draft-04/schema#", "https://json-schema.org/draft/2019-09/schema"]  # fmt: skip
EVENT_SCHEMAS: list[dict] = [
    {"type": "string", "format": "date-time"}, {"type": "string", "format": "date-time"},
    {"type": "string", "format": "date"}, {"type": "string"}, {"type": "integer"},
    {"type": "number"}, {"type": ["integer", "null"]}, {"type": ["string", "null"], "format": "date-time"},
]  # fmt: skip


@dataclass
class Scenario:
    pipeline: PipelineConfig
    schemas: dict[int, RegisteredSchema]
    messages: list[Msg]
    adversarial: bool


def date_time(rng: random.Random) -> str:
    """A date-time as producers write it (RFC 3339 and the ISO spellings Python also reads),
    sometimes one the converter refuses (naive) or Python does not read."""
    if rng.random() < 0.08:
        return iso_text(rng)  # the event-time fuzz's spellings, valid and not
    day = f"{rng.choice([1970, 2024, 2024, 1, 9999, rng.randint(1, 9999)]):04d}-" \
          f"{rng.randint(1, 12):02d}-{rng.choice([1, 13, 28, rng.randint(1, 28)]):02d}"  # fmt: skip
    clock = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
    if rng.random() < 0.9:
        clock += f":{rng.randint(0, 59):02d}"
        if rng.random() < 0.6:
            clock += rng.choice(".,") + "".join(rng.choice("0123456789")
                                                for _ in range(rng.choice([1, 3, 6, 7, 9])))  # fmt: skip
    offset = rng.choice(["Z", "Z", "+00:00", "+02:00", "-05:30", "+0200", "-0530", "+02", "-23:59",
                         "+23:59"] * 4 + ["", "+24:00", "z"])  # fmt: skip
    return day + rng.choice("TT ") + clock + offset


class Schemas:
    """Random JSON Schemas the Avro mapping takes (and, with ``odd``, some it does not or the
    kernel does not validate)."""

    def __init__(self, rng: random.Random, odd: float) -> None:
        self.rng = rng
        self.odd = odd
        self.count = 0
        self.definitions: dict[str, dict] = {}

    def name(self, prefix: str) -> str:
        self.count += 1
        return f"{prefix}{self.count}"

    def node(self, depth: int, item: bool = False) -> dict:
        """A property's schema; ``item``: an array's items, which may be neither null nor an
        array (BigQuery stores neither: the mapping refuses them)."""
        rng = self.rng
        roll = rng.random()
        node: dict[str, Any]
        if roll < 0.5 or depth > 3:
            node = self.scalar(item)
        elif roll < 0.62 and not item:
            node = {"type": "array", "items": self.node(depth + 1, item=True)}
            if rng.random() < 0.3:
                node["minItems" if rng.random() < 0.5 else "maxItems"] = rng.randint(0, 3)
        elif roll < 0.7:
            node = {"type": "object", "additionalProperties": self.node(depth + 1)}
        elif roll < 0.8 and self.definitions and rng.random() < 0.6 and not item:
            node = {"$ref": "#/definitions/" + rng.choice(list(self.definitions))}
        else:
            node = self.object(depth + 1)
            if rng.random() < 0.3:
                name = self.name("Def")
                self.definitions[name] = node
                node = {"$ref": f"#/definitions/{name}"}
        wrap = 1.0 if item else rng.random()
        if wrap < 0.08:
            node = {"anyOf": [node, {"type": "null"}]}
        elif wrap < 0.14:
            node = {"oneOf": [{"type": "null"}, node]}
        elif wrap < 0.18:
            node = {"allOf": [node]}
        if rng.random() < 0.1:
            node["description"] = "a field"
        if rng.random() < self.odd:
            node.update(rng.choice([{"pattern": "^a"}, {"multipleOf": 2}, {"uniqueItems": True},
                                    {"not": {"type": "null"}}, {"minimum": 0.5},
                                    {"x-custom": 1}, {"propertyNames": {"maxLength": 3}}]))  # fmt: skip
        return node

    def scalar(self, item: bool = False) -> dict:
        rng = self.rng
        kind = rng.choice(["string", "string", "integer", "number", "boolean", "date-time",
                           "date", "enum", "int-enum", "nullable"][: 9 if item else 10])  # fmt: skip
        node: dict[str, Any]
        if kind == "string":
            node = {"type": "string"}
            if rng.random() < 0.3:
                node["minLength" if rng.random() < 0.5 else "maxLength"] = rng.randint(0, 4)
            if rng.random() < 0.05:
                node["const"] = rng.choice(WORDS[:4])
        elif kind in ("integer", "number"):
            node = {"type": kind}
            for keyword in ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"):
                if rng.random() < 0.15:
                    node[keyword] = rng.choice([0, 1, -1, 100, 2**31, 2**53 + 1])
        elif kind == "boolean":
            node = {"type": "boolean"}
        elif kind in ("date-time", "date"):
            node = {"type": "string", "format": kind}
        elif kind == "enum":
            symbols = rng.sample(["A", "B", "c_d", "E1", "not a name", "é"], rng.randint(1, 4))
            node = {"enum": symbols + ([None] if rng.random() < 0.2 and not item else [])}
            if rng.random() < 0.5:
                node["type"] = "string" if None not in node["enum"] else ["string", "null"]
        elif kind == "int-enum":
            node = {"type": "integer", "enum": rng.sample([0, 1, 2, -5, 2**40], rng.randint(1, 3))}
        else:
            node = {"type": [rng.choice(["string", "integer", "number", "boolean"]), "null"]}
        return node

    def object(self, depth: int, extra: int = 5) -> dict:
        rng = self.rng
        properties = {}
        for _ in range(rng.randint(1, extra)):
            key = self.name("p")
            if rng.random() < self.odd:
                key = rng.choice(["with-dash", "with space", "1digit"]) + key  # renamed for Avro
            properties[key] = self.node(depth)
        node: dict[str, Any] = {"type": "object", "properties": properties}
        if rng.random() < 0.6:
            node["required"] = rng.sample(list(properties), rng.randint(0, len(properties)))
        if rng.random() < 0.3:
            node["additionalProperties"] = rng.choice([False, False, True, {"type": "integer"}])
        if rng.random() < 0.2:
            node["title"] = self.name("T")
        return node

    def root(self, event: dict, meta: bool) -> dict:
        rng = self.rng
        root = self.object(1, extra=6)
        head: dict[str, Any] = {
            "datasetName": rng.choice([{"type": "string"}, {"type": "string"}, {"type": ["string", "null"]}]),
            "tableName": {"type": "string"},
            "eventTime": dict(event),
        }  # fmt: skip
        if meta:
            ts = rng.choice(EVENT_SCHEMAS[:6])
            head["meta"] = rng.choice([
                {"type": "object", "properties": {"ts": ts}},
                {"anyOf": [{"type": "object", "properties": {"ts": ts}}, {"type": "null"}]},
            ])  # fmt: skip
        properties = list(root["properties"].items()) + list(head.items())
        rng.shuffle(properties)
        root["properties"] = dict(properties)
        root["required"] = sorted(set(root.get("required", [])) | {"tableName"}
                                  | ({"eventTime"} if rng.random() < 0.5 else set()))  # fmt: skip
        if self.definitions:
            root["definitions"] = self.definitions
        draft = rng.choice(DRAFTS)
        if draft:
            root["$schema"] = draft
        return root


class Values:
    """JSON values for a schema, most of them valid, some breaking it on purpose."""

    def __init__(self, rng: random.Random, schema: dict, wrong: float) -> None:
        self.rng = rng
        self.schema = schema
        self.wrong = wrong

    def value(self, node: Any, depth: int = 0) -> Any:
        value = self.any_value(node, depth)
        if isinstance(node, dict) and self.rng.random() < 0.95:
            for _ in range(20):  # mostly values that keep the node's bounds and lengths
                if fits(node, value):
                    break
                value = self.any_value(node, depth)
        return value

    def any_value(self, node: Any, depth: int = 0) -> Any:
        rng = self.rng
        if rng.random() < self.wrong:
            return rng.choice([None, True, 0, -1, 1.0, 2.5, 2**63, "s", "2024-09-13", [], {},
                               [1], {"a": 1}, 10**30, -(2**31), 2**53 + 1])  # fmt: skip
        if not isinstance(node, dict):
            return None
        if "$ref" in node:
            return self.value(self.schema["definitions"][node["$ref"].rsplit("/", 1)[-1]], depth)
        for keyword in ("anyOf", "oneOf"):
            if keyword in node:
                branches = node[keyword]
                if rng.random() < 0.25:
                    return None
                return self.value(next(b for b in branches if b.get("type") != "null"), depth)
        if "allOf" in node:
            return self.value(node["allOf"][0], depth)
        if "const" in node:
            return node["const"]
        if "enum" in node:
            return rng.choice(node["enum"])
        kind = node.get("type")
        if isinstance(kind, list):
            if rng.random() < 0.25:
                return None
            kind = next(k for k in kind if k != "null")
        fmt = node.get("format")
        if kind == "object":
            if "properties" in node:
                out = {}
                required = node.get("required", ())
                for key, child in node["properties"].items():
                    if rng.random() < (0.005 if key in required else 0.1):
                        continue  # missing
                    out[key] = self.value(child, depth + 1)
                if rng.random() < 0.01:
                    out[rng.choice(["extra", "-type"])] = 1
                return out
            return {f"k{i}": self.value(node["additionalProperties"], depth + 1)
                    for i in range(rng.choice([0, 1, 3]))}  # fmt: skip
        if kind == "array":
            return [
                self.value(node["items"], depth + 1) for _ in range(rng.choice([0, 1, 2, 3, 4]))
            ]
        if kind == "string":
            if fmt == "date-time":
                return date_time(rng)
            if fmt == "date":
                return rng.choice(["2024-09-13", "1970-01-01", "0001-01-01", "9999-12-31", "2024-02-29"] * 3
                              + ["2024-02-30", "2024-9-13", "20240913", "2024-09-13T00:00:00Z"])  # fmt: skip
            return rng.choice(WORDS)
        if kind == "integer":
            return rng.choice([0, 1, -1, 5, 100, 101, 2**31, 2**53, 2**53 + 1, 2**63 - 1,
                               rng.randint(-1000, 1000), 3.0])  # fmt: skip
        if kind == "number":
            return rng.choice(
                [0, 1.5, -0.5, 100, 100.0, 1e300, 2**53 + 1, 2.0**53, rng.uniform(-200, 200)]
            )
        if kind == "boolean":
            return rng.random() < 0.5
        return None


def fits(node: dict, value: Any) -> bool:
    """Whether ``value`` keeps ``node``'s own bounds and lengths (the generator's aim; the
    validator decides)."""
    if isinstance(value, str):
        return node.get("minLength", 0) <= len(value) <= node.get("maxLength", 10**9)
    if isinstance(value, list):
        return node.get("minItems", 0) <= len(value) <= node.get("maxItems", 10**9)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return (value >= node.get("minimum", -math.inf) and value <= node.get("maximum", math.inf)
                and value > node.get("exclusiveMinimum", -math.inf)
                and value < node.get("exclusiveMaximum", math.inf))  # fmt: skip
    return True


def versions(
    rng: random.Random, new_schema: Any, ids: Sequence[int] = (31, 32, 33)
) -> dict[int, dict]:
    """One to three registry versions under ``ids``: each a ``new_schema()``, or, after the
    first, sometimes the previous one with an optional property appended (the registry's
    usual evolution)."""
    schemas: dict[int, dict] = {}
    base: dict | None = None
    for version in range(rng.randint(1, 3)):
        if base is not None and rng.random() < 0.6:
            schema = json.loads(json.dumps(base))
            schema["properties"][f"added{version}"] = {"type": ["string", "null"]}
        else:
            schema = new_schema()
        base = schemas[ids[version]] = schema
    return schemas


def scenario(seed: int, messages: int) -> Scenario:
    rng = random.Random(seed)
    adversarial = rng.random() < 0.3
    # Not schema_name routing: a JSON Schema's record has no namespace to name a dataset.
    routing = rng.choice(["fields", "fields", "fields", "static"])
    event = rng.choice(EVENT_SCHEMAS)
    meta = rng.random() < 0.4
    schemas = versions(
        rng, lambda: Schemas(rng, odd=0.06 if adversarial else 0.0).root(event, meta)
    )
    event_fields = (
        rng.choice([["eventTime"], ["meta.ts", "eventTime"], ["meta.ts"]])
        if meta
        else ["eventTime"]
    )
    topic: dict[str, Any] = {"name": TOPIC, "format": "json_schema"}
    pipeline = random_pipeline(rng, topic, event_fields, routing, size_chance=0.05,
                               source=f"json_schema kernel fuzz seed {seed}")  # fmt: skip
    registered = {sid: RegisteredSchema(sid, "JSON", json.dumps(s)) for sid, s in schemas.items()}
    return Scenario(pipeline, registered, list(stream(rng, schemas, messages, adversarial, meta)),
                    adversarial)  # fmt: skip


def stream(rng: random.Random, schemas: dict[int, dict], count: int, adversarial: bool, meta: bool):
    wrong = 0.01 if adversarial else 0.002
    writer = Writer(rng, 0.05 if adversarial else 0.003)
    values = {sid: Values(rng, schema, wrong) for sid, schema in schemas.items()}
    start = rng.choice([0, 5, 1_000_000, 2**40])
    for i in range(count):
        sid = rng.choice(list(schemas))
        roll = rng.random()
        value: bytes | None
        if roll < 0.01:
            value = None
        elif roll < 0.02:
            value = rng.choice([b"", b"\x00\x00", b"\x01" + sid.to_bytes(4, "big") + b"{}",
                                encode_frame(999, b"{}")])  # fmt: skip
        else:
            record = values[sid].value(schemas[sid])
            if isinstance(record, dict):
                record["datasetName"] = rng.choice(DATASETS)
                record["tableName"] = rng.choice(TABLES)
                if rng.random() < 0.97:
                    record["eventTime"] = values[sid].value(schemas[sid]["properties"]["eventTime"])
            text = (writer.ws() + writer.dumps(record) + writer.ws()).encode(
                "utf-8", "surrogatepass"
            )
            if roll < (0.05 if adversarial else 0.012):
                text = mangle(rng, text)
            value = encode_frame(sid, text)
        yield framed_message(rng, TOPIC, start, i, value)


def with_kernel_transforms(make: Any, *, rewrites: bool = False) -> Any:
    """``make``'s scenarios with ``rename``, ``drop`` and ``cast`` (that keeps the bytes)
    transforms on one to four top-level fields of the first registry version's Avro record and
    ``add`` of up to two constants (json_fuzz.with_kernel_transforms's draw, from their own
    generator so the messages are those of the same seed). The kernel takes a schema id only
    when what routing and event time read is the same in JSON and Avro form
    (formats/json_schema_stage.py, ``_reads_alike``): a ``date-time``, ``date``, ``integer`` or
    ``number`` event time keeps the scenario on the Python path. So that most scenarios prove
    something, three in four read their ``date-time`` and ``date`` event times as plain strings
    (``format`` dropped from the registry schemas: the same messages, dated by the event-time
    parser instead)."""

    # ``rewrites``: mask and timestamp transforms too (json_fuzz.draw_kernel_transforms).

    def transformed(seed: int, messages: int) -> Any:
        case = make(seed, messages)
        rng = random.Random(~seed)
        if rng.random() < 0.75:
            case.schemas = {sid: RegisteredSchema(sid, "JSON", json.dumps(_plain_times(json.loads(r.schema))))
                            for sid, r in case.schemas.items()}  # fmt: skip
        topic = case.pipeline.topics[0]
        read = topic.required_fields
        first = json.loads(case.schemas[min(case.schemas)].schema)
        avro = map_json_schema(first, TOPIC).avro_schema
        specs = draw_kernel_transforms(rng, avro, read, rewrites=rewrites)
        case.pipeline = replace(case.pipeline, topics=(replace(topic, transforms=specs),))
        if rewrites:
            case.messages = repeated_headers(random.Random(seed ^ 0x5EED), case.messages)
        return case

    return transformed


def _plain_times(schema: dict) -> dict:
    """``schema`` with its event times (``eventTime``, ``meta.ts``) plain strings: without the
    ``format`` that converts them in Avro form."""
    properties = schema.get("properties", {})
    meta = properties.get("meta", {})
    nodes = [properties.get("eventTime"), meta.get("properties", {}).get("ts")]
    nodes += [branch.get("properties", {}).get("ts") for branch in meta.get("anyOf", ())]
    for node in nodes:
        if isinstance(node, dict):
            node.pop("format", None)
    return schema
