"""Map fields end to end on the local stack, through the real stage path: an Avro topic whose
schema has ``map`` fields, a ``format: protobuf`` topic whose message has ``map<..>`` fields
and a ``format: json_schema`` topic whose schema has ``additionalProperties`` objects (both
mapped to Avro maps) (at the top level,
inside a nested record, inside an array of records, and a map of records holding a map),
staged on Spark and loaded into the BigQuery emulator by ``kbqe run --until-idle``; a second
run loads a newer version that adds a map field and an older version's later messages into
the same table. Every map reads back as BigQuery's REPEATED RECORD of ``key``/``value``."""

from __future__ import annotations

import functools
import json
import uuid
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroSerializer
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext
from google.protobuf import descriptor_pool, message_factory

from kbqe_dagster.core.formats.protobuf_wire import encode_message_indexes
from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG
from kbqe_dagster.resources.protobuf_compiler import ROOT_FILE, compile_files
from kbqe_dagster_tests.kbqe_run import cli_env, create_topic, drop_datasets, until_idle

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PLACED = 1_726_270_200  # 2024-09-13T23:30:00Z
COLUMNS = ["id", "placed_at", "attrs", "detail", "lines", "counters"]

PROTO_V1 = """syntax = "proto3";
package pbmaps.events;
import "google/protobuf/timestamp.proto";
message Event {
  int64 id = 1;
  google.protobuf.Timestamp placed_at = 2;
  map<string, int64> attrs = 3;
  Detail detail = 4;
  repeated Line lines = 5;
  map<string, Counter> counters = 6;
  message Detail { string kind = 1; map<string, double> scores = 2; }
  message Line { string sku = 1; map<int32, string> notes = 2; }
  message Counter { int64 n = 1; map<string, bool> flags = 2; }
}
"""
PROTO_V2 = PROTO_V1.replace(
    "  message Detail", "  map<string, string> labels = 7;\n  message Detail"
)

_MAP_OF = {"type": "object"}
JSON_V1 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Event",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "id": {"type": "integer"},
        "placed_at": {"type": "string", "format": "date-time"},
        "attrs": {**_MAP_OF, "additionalProperties": {"type": "integer"}},
        "detail": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                "kind": {"type": "string"},
                "scores": {**_MAP_OF, "additionalProperties": {"type": "number"}},
            },
            "required": ["kind", "scores"],
        },
        "lines": {
            "type": "array",
            "items": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "sku": {"type": "string"},
                    "notes": {**_MAP_OF, "additionalProperties": {"type": ["string", "null"]}},
                },
                "required": ["sku", "notes"],
            },
        },
        "counters": {
            **_MAP_OF,
            "additionalProperties": {
                "type": "object",
                "additionalProperties": False,
                "properties": {
                    "n": {"type": "integer"},
                    "flags": {**_MAP_OF, "additionalProperties": {"type": "boolean"}},
                },
                "required": ["n", "flags"],
            },
        },
    },
    "required": ["id", "placed_at", "attrs", "lines", "counters"],
}
JSON_V2 = {
    **JSON_V1,
    "properties": {
        **JSON_V1["properties"],
        "labels": {**_MAP_OF, "additionalProperties": {"type": "string"}},
    },
}


def event(i: int) -> dict:
    """Event ``i`` as plain values: maps as dicts, ``detail`` absent for every third."""
    return {
        "id": i,
        "attrs": {f"a{j}": i * 10 + j for j in range(i % 3)},
        "detail": None if i % 3 == 2 else {"kind": f"k{i}", "scores": {"s": i + 0.25}},
        "lines": [{"sku": f"s{i}-{j}", "notes": {j + 1: f"n{j}"}} for j in range(i % 2 + 1)],
        "counters": {f"c{i}": {"n": i, "flags": {"on": i % 2 == 1}}},
    }


def entries(value) -> dict:
    """A map column as read back (a list of ``{key, value}`` records) as a dict, checking
    that shape; nested maps converted too."""
    assert isinstance(value, list), value
    out = {}
    for entry in value:
        assert sorted(entry) == ["key", "value"], entry
        out[entry["key"]] = entry["value"]
    return out


def read_back(row: dict) -> dict:
    """A row of the table as the plain values of :func:`event` (map keys as strings)."""
    detail = row["detail"]
    return {
        "id": row["id"],
        "attrs": entries(row["attrs"]),
        "detail": None
        if detail is None
        else {"kind": detail["kind"], "scores": entries(detail["scores"])},
        "lines": [{"sku": line["sku"], "notes": entries(line["notes"])} for line in row["lines"]],
        "counters": {
            k: {"n": v["n"], "flags": entries(v["flags"])}
            for k, v in entries(row["counters"]).items()
        },
    }


def as_read(i: int) -> dict:
    """:func:`event` as the table holds it: map keys are strings (Protobuf's integer keys in
    decimal)."""
    value = event(i)
    for line in value["lines"]:
        line["notes"] = {str(k): v for k, v in line["notes"].items()}
    return value


def table_rows(client, dataset: str) -> dict[int, dict]:
    return {
        r["id"]: dict(r)
        for r in client.query(
            f"SELECT id, placed_at, attrs, detail, lines, counters, labels FROM `{dataset}.events`"
        ).result()
    }


def check_table(client, dataset: str, ids: range, labelled: dict[int, dict]) -> None:
    widened = client.query(f"SELECT * FROM `{dataset}.events` LIMIT 1").result().schema
    assert [f.name for f in widened if not f.name.startswith("_")] == [*COLUMNS, "labels"]
    for field in widened:
        if field.name in ("attrs", "counters", "labels"):
            assert (field.field_type, field.mode) == ("RECORD", "REPEATED"), field
            assert [f.name for f in field.fields] == ["key", "value"], field
    rows = table_rows(client, dataset)
    assert sorted(rows) == list(ids)
    for i in ids:
        assert read_back(rows[i]) == as_read(i), i
        assert entries(rows[i]["labels"]) == labelled.get(i, {}), i
    assert rows[1]["placed_at"] == datetime(2024, 9, 13, 23, 30, 1, tzinfo=UTC)


def stack_env(tmp_path, local_endpoints, kind: str):
    run = uuid.uuid4().hex[:8]
    topic = f"maps.{kind}.{run}"
    create_topic(local_endpoints.kafka_bootstrap, topic)
    dataset, dead = f"maps_{kind}_{run}", f"maps_{kind}_dead_{run}"
    env = cli_env(
        tmp_path,
        {
            "version": 1,
            "topics": [
                {
                    "name": topic,
                    "format": kind.replace("jsonschema", "json_schema"),
                    "routing": {"mode": "static", "dataset": dataset, "table": "events"},
                    "event_time": {"fields": ["placed_at"]},
                }
            ],
            "dead_letter": {"dataset": dead, "table": "dead_letters"},
        },
        f"gs://{LOCAL_BUCKET}/maps-{kind}-{run}",
    )
    return topic, dataset, dead, env


def staged_and_dead(env: dict, topic: str) -> tuple[int, int]:
    counts = json.loads(until_idle(env).stdout)["topics"][topic]
    return counts["staged"], counts["dead_lettered"]


LABELLED = {4: {"team": "t4", "env": "e4"}, 5: {"team": "t5"}}
"""The events V2 producers send, with the map field V2 adds (``labels``)."""


def two_versions_load(
    client, env: dict, topic: str, dataset: str, producer, send_v1, send_v2
) -> None:
    """The scenario of every format: four V1 events load (the first load creates the table);
    then V2 events, whose new map field widens the table, and one more V1 event after that;
    all seven rows read back with their maps. ``send_v1(i)`` and ``send_v2(i, labels)``
    produce event ``i`` in the format's own framing."""
    for i in range(4):
        send_v1(i)
    assert producer.flush(30) == 0
    assert staged_and_dead(env, topic) == (4, 0)

    for i, labels in LABELLED.items():
        send_v2(i, labels)
    send_v1(6)  # a producer still on V1, after V2 widened the table
    assert producer.flush(30) == 0
    assert staged_and_dead(env, topic) == (3, 0)

    check_table(client, dataset, range(7), LABELLED)


def test_protobuf_map_fields_load_as_repeated_key_value_records(
    local_stack,
    local_endpoints,
    tmp_path,
) -> None:
    topic, dataset, dead, env = stack_env(tmp_path, local_endpoints, "protobuf")
    client = local_bigquery_client()
    try:
        registry = SchemaRegistryClient({"url": local_endpoints.registry_url})
        producer = Producer(
            {"bootstrap.servers": local_endpoints.kafka_bootstrap, "logger": CLIENT_LOG}
        )
        v1_id = registry.register_schema(f"{topic}-value", Schema(PROTO_V1, "PROTOBUF"))
        v1, v2 = proto_class(PROTO_V1), proto_class(PROTO_V2)

        def produce(schema_id: int, cls, i: int, **extra) -> None:
            message = proto_message(cls, i, **extra)
            body = encode_message_indexes((0,)) + message.SerializeToString()
            producer.produce(topic, encode_frame(schema_id, body), partition=i % 2)

        @functools.cache
        def v2_id() -> int:  # registered when the first V2 event is sent
            schema_id = registry.register_schema(f"{topic}-value", Schema(PROTO_V2, "PROTOBUF"))
            assert schema_id != v1_id
            return schema_id

        two_versions_load(
            client,
            env,
            topic,
            dataset,
            producer,
            lambda i: produce(v1_id, v1, i),
            lambda i, labels: produce(v2_id(), v2, i, labels=labels),
        )
    finally:
        drop_datasets(client, dataset, dead)


def proto_class(text: str):
    pool = descriptor_pool.DescriptorPool()
    for proto in compile_files({ROOT_FILE: text}).file:
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("pbmaps.events.Event"))


def proto_message(cls, i: int, labels: dict | None = None):
    value = event(i)
    message = cls(id=i)
    message.placed_at.seconds = PLACED + i
    message.attrs.update(value["attrs"])
    if value["detail"] is not None:
        message.detail.kind = value["detail"]["kind"]
        message.detail.scores.update(value["detail"]["scores"])
    for line in value["lines"]:
        message.lines.add(sku=line["sku"]).notes.update(line["notes"])
    for key, counter in value["counters"].items():
        message.counters[key].n = counter["n"]
        message.counters[key].flags.update(counter["flags"])
    if labels:
        message.labels.update(labels)
    return message


def test_json_schema_additional_properties_load_as_repeated_key_value_records(
    local_stack,
    local_endpoints,
    tmp_path,
) -> None:
    topic, dataset, dead, env = stack_env(tmp_path, local_endpoints, "jsonschema")
    client = local_bigquery_client()
    try:
        registry = SchemaRegistryClient({"url": local_endpoints.registry_url})
        producer = Producer(
            {"bootstrap.servers": local_endpoints.kafka_bootstrap, "logger": CLIENT_LOG}
        )
        value = SerializationContext(topic, MessageField.VALUE)

        def json_event(i: int, **extra) -> dict:
            plain = {
                **event(i),
                **extra,
                "placed_at": datetime.fromtimestamp(PLACED + i, UTC).isoformat(),
            }
            for line in plain["lines"]:
                line["notes"] = {str(k): v for k, v in line["notes"].items()}
            if plain["detail"] is None:
                del plain["detail"]  # an absent optional object: a NULL record
            return plain

        v1 = JSONSerializer(json.dumps(JSON_V1), registry)  # registers V1 under <topic>-value
        v2 = JSONSerializer(json.dumps(JSON_V2), registry)  # V2 (BACKWARD-compatible) on first use
        two_versions_load(
            client,
            env,
            topic,
            dataset,
            producer,
            lambda i: producer.produce(topic, v1(json_event(i), value), partition=i % 2),
            lambda i, labels: producer.produce(
                topic, v2(json_event(i, labels=labels), value), partition=i % 2
            ),
        )
    finally:
        drop_datasets(client, dataset, dead)


def _avro_map(values) -> dict:
    return {"type": "map", "values": values}


AVRO_V1 = {
    "type": "record",
    "name": "Event",
    "namespace": "com.acme.maps",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "placed_at", "type": {"type": "long", "logicalType": "timestamp-micros"}},
        {"name": "attrs", "type": _avro_map("long")},
        {
            "name": "detail",
            "default": None,
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Detail",
                    "fields": [
                        {"name": "kind", "type": "string"},
                        {"name": "scores", "type": _avro_map("double")},
                    ],
                },
            ],
        },
        {
            "name": "lines",
            "type": {
                "type": "array",
                "items": {
                    "type": "record",
                    "name": "Line",
                    "fields": [
                        {"name": "sku", "type": "string"},
                        {"name": "notes", "type": _avro_map(["null", "string"])},
                    ],
                },
            },
        },
        {
            "name": "counters",
            "type": _avro_map(
                {
                    "type": "record",
                    "name": "Counter",
                    "fields": [
                        {"name": "n", "type": "long"},
                        {"name": "flags", "type": _avro_map("boolean")},
                    ],
                }
            ),
        },
    ],
}
AVRO_V2 = {
    **AVRO_V1,
    "fields": [*AVRO_V1["fields"], {"name": "labels", "type": _avro_map("string"), "default": {}}],
}


def test_avro_map_fields_load_as_repeated_key_value_records(
    local_stack,
    local_endpoints,
    tmp_path,
) -> None:
    topic, dataset, dead, env = stack_env(tmp_path, local_endpoints, "avro")
    client = local_bigquery_client()
    try:
        registry = SchemaRegistryClient({"url": local_endpoints.registry_url})
        producer = Producer(
            {"bootstrap.servers": local_endpoints.kafka_bootstrap, "logger": CLIENT_LOG}
        )
        value = SerializationContext(topic, MessageField.VALUE)

        def avro_event(i: int, **extra) -> dict:
            plain = {**event(i), **extra, "placed_at": datetime.fromtimestamp(PLACED + i, UTC)}
            for line in plain["lines"]:
                line["notes"] = {str(k): v for k, v in line["notes"].items()}
            return plain

        v1 = AvroSerializer(registry, json.dumps(AVRO_V1))  # registers V1 under <topic>-value
        v2 = AvroSerializer(registry, json.dumps(AVRO_V2))  # V2 (BACKWARD-compatible) on first use
        two_versions_load(
            client,
            env,
            topic,
            dataset,
            producer,
            lambda i: producer.produce(topic, v1(avro_event(i), value), partition=i % 2),
            lambda i, labels: producer.produce(
                topic, v2(avro_event(i, labels=labels), value), partition=i % 2
            ),
        )
    finally:
        drop_datasets(client, dataset, dead)
