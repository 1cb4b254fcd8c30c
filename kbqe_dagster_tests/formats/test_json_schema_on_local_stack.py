"""A ``format: json_schema`` topic end to end on the local stack: JSON Schemas registered in
Apicurio (ccompat, schemaType JSON), values produced with confluent-kafka's JSONSerializer,
staged on Spark, loaded into the BigQuery emulator field by field by ``kbqe run
--until-idle``; a second schema version that appends an optional property widens the table,
the older version's later files still load into it; bad values land in the dead-letter table
with their reasons; a last run changes nothing."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.json_schema import JSONSerializer
from confluent_kafka.serialization import MessageField, SerializationContext

from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG
from kbqe_dagster_tests.kbqe_run import cli_env, create_topic, drop_datasets, until_idle

pytestmark = [pytest.mark.integration, pytest.mark.slow]


# A closed content model: under the registry's BACKWARD rule, appending an optional property
# is compatible only when additionalProperties is false (adding to an open model narrows it).
V1 = {
    "$schema": "http://json-schema.org/draft-07/schema#",
    "title": "Order",
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "id": {"type": "integer"},
        "placed_at": {"type": "string", "format": "date-time"},
        "day": {"type": "string", "format": "date"},
        "status": {"enum": ["new", "paid"]},
        "lines": {"type": "array", "items": {"$ref": "#/definitions/Line"}},
    },
    "required": ["id", "placed_at", "status"],
    "definitions": {
        "Line": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"sku": {"type": "string"}, "qty": {"type": "integer"}},
            "required": ["sku", "qty"],
        }
    },
}
V2 = {**V1, "properties": {**V1["properties"], "coupon": {"type": ["string", "null"]}}}
UNMAPPABLE = {
    "type": "object",
    "properties": {
        "pay": {
            "oneOf": [
                {"type": "object", "properties": {"card": {"type": "string"}}},
                {"type": "object", "properties": {"iban": {"type": "string"}}},
            ]
        }
    },
}
AVRO = {"type": "record", "name": "Other", "fields": [{"name": "id", "type": "long"}]}


@pytest.fixture
def json_schema_topic(local_stack, local_endpoints, tmp_path):
    run = uuid.uuid4().hex[:8]
    topic = f"jsonschema.orders.{run}"
    create_topic(local_endpoints.kafka_bootstrap, topic)
    dataset, dead = f"jsonschema_{run}", f"jsonschema_dead_{run}"
    env = cli_env(
        tmp_path,
        {
            "version": 1,
            "topics": [
                {
                    "name": topic,
                    "format": "json_schema",
                    "routing": {"mode": "static", "dataset": dataset, "table": "orders"},
                    "event_time": {"fields": ["placed_at"]},
                }
            ],
            "dead_letter": {"dataset": dead, "table": "dead_letters"},
        },
        f"gs://{LOCAL_BUCKET}/jsonschema-{run}",
    )
    client = local_bigquery_client()
    yield local_endpoints, topic, dataset, dead, env, client
    drop_datasets(client, dataset, dead)


def report(env: dict) -> dict:
    return json.loads(until_idle(env).stdout)


def order(i: int, **extra) -> dict:
    return {
        "id": i,
        "placed_at": f"2024-09-13T23:30:{i:02d}.5-05:00",
        "day": "2024-09-13",
        "status": "paid" if i % 2 else "new",
        "lines": [{"sku": f"s{i}", "qty": i}],
        **extra,
    }


def test_json_schema_values_load_field_by_field_and_a_new_version_widens_the_table(
    json_schema_topic,
) -> None:
    endpoints, topic, dataset, dead, env, client = json_schema_topic
    registry = SchemaRegistryClient({"url": endpoints.registry_url})
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap, "logger": CLIENT_LOG})
    value = SerializationContext(topic, MessageField.VALUE)
    v1 = JSONSerializer(json.dumps(V1), registry)  # registers V1 under <topic>-value
    for i in range(10):
        producer.produce(topic, v1(order(i), value), partition=i % 2)
    v1_id = registry.register_schema(f"{topic}-value", Schema(json.dumps(V1), "JSON"))  # its id
    other = f"{topic}-other"
    avro_id = registry.register_schema(f"{other}-avro", Schema(json.dumps(AVRO), "AVRO"))
    unmappable_id = registry.register_schema(
        f"{other}-json", Schema(json.dumps(UNMAPPABLE), "JSON")
    )
    bad = [
        encode_frame(v1_id, b"{oops"),
        encode_frame(v1_id, json.dumps({**order(99), "status": "lost"}).encode()),
        encode_frame(avro_id, b"\x02"),
        encode_frame(unmappable_id, b'{"pay": {"card": "x"}}'),
    ]
    for raw in bad:
        producer.produce(topic, raw, partition=0)
    assert producer.flush(30) == 0

    first = report(env)
    assert first["topics"][topic]["staged"] == 10
    assert first["topics"][topic]["dead_lettered"] == 4

    v2 = JSONSerializer(json.dumps(V2), registry)  # registers V2: BACKWARD-compatible
    for i in range(10, 16):
        producer.produce(
            topic, v2(order(i, coupon=f"C{i}" if i % 3 else None), value), partition=i % 2
        )
    v2_id = registry.register_schema(f"{topic}-value", Schema(json.dumps(V2), "JSON"))
    assert v2_id != v1_id
    for i in range(16, 18):  # a producer still on V1, after V2 widened the table
        producer.produce(topic, encode_frame(v1_id, json.dumps(order(i)).encode()), partition=i % 2)
    assert producer.flush(30) == 0

    second = report(env)
    assert second["topics"][topic]["staged"] == 8
    third = report(env)
    assert third["topics"][topic]["staged"] == 0 and third["topics"][topic]["dead_lettered"] == 0

    # A query's schema, not the table's metadata: the emulator's metadata does not list the
    # columns the local adapter adds with ALTER TABLE (resources/bigquery/emulator.py).
    widened = client.query(f"SELECT * FROM `{dataset}.orders` LIMIT 1").result().schema
    columns = [f.name for f in widened if not f.name.startswith("_")]
    assert columns == ["id", "placed_at", "day", "status", "lines", "coupon"]
    rows = {
        r["id"]: dict(r)
        for r in client.query(
            f"SELECT id, placed_at, day, status, lines, coupon, _event_date FROM `{dataset}.orders`"
        ).result()
    }
    assert sorted(rows) == list(range(18))
    three = rows[3]
    assert three["placed_at"] == datetime(2024, 9, 14, 4, 30, 3, 500_000, tzinfo=UTC)
    assert str(three["day"]) == "2024-09-13" and three["status"] == "paid"
    assert [dict(line) for line in three["lines"]] == [{"sku": "s3", "qty": 3}]
    # The event date is the date as written, in the value's own offset (date_rule local).
    assert str(three["_event_date"]) == "2024-09-13"
    assert three["coupon"] is None and rows[16]["coupon"] is None
    assert (rows[11]["coupon"], rows[12]["coupon"]) == ("C11", None)

    letters = sorted(
        (r["reason"], r["schema_id"])
        for r in client.query(f"SELECT reason, schema_id FROM `{dead}.dead_letters`").result()
    )
    assert letters == sorted(
        [
            ("json_decode_error", v1_id),
            ("json_schema_mismatch", v1_id),
            ("non_json_schema", avro_id),
            ("unmappable_json_schema", unmappable_id),
        ]
    )
