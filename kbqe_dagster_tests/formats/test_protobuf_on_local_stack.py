"""A ``format: protobuf`` topic end to end on the local stack: ``.proto`` text registered in
Apicurio (ccompat, schemaType PROTOBUF), importing another registered subject (a schema
reference) and ``google/protobuf/timestamp.proto``; messages serialised with the protobuf
runtime from classes compiled here and framed by hand (magic byte, id, message indexes);
staged on Spark, loaded into the BigQuery emulator field by field by ``kbqe run
--until-idle``; a second version that adds a field widens the table, the older version's later
files still load into it; bad messages land in the dead-letter table with their reasons; a
last run changes nothing."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient
from google.protobuf import descriptor_pool, message_factory

from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG
from kbqe_dagster.resources.protobuf_compiler import ROOT_FILE, compile_files
from kbqe_dagster_tests.kbqe_run import cli_env, create_topic, drop_datasets, until_idle
from kbqe_dagster_tests.support.framing import protobuf_framed as framed

pytestmark = [pytest.mark.integration, pytest.mark.slow]


COMMON = """syntax = "proto3";
package pbstack.common;
message Money { string currency = 1; int64 units = 2; }
"""
V1 = """syntax = "proto3";
package pbstack.orders;
import "google/protobuf/timestamp.proto";
import "pbstack/common.proto";
message Order {
  int64 id = 1;
  google.protobuf.Timestamp placed_at = 2;
  Status status = 3;
  pbstack.common.Money total = 4;
  repeated Line lines = 5;
  enum Status { NEW = 0; PAID = 1; }
  message Line { string sku = 1; uint32 qty = 2; }
}
"""
V2 = V1.replace("  enum Status", "  optional string coupon = 6;\n  enum Status")
RECURSIVE = (
    'syntax = "proto3";\npackage pbstack.tree;\nmessage Node { string v = 1; Node next = 2; }\n'
)
AVRO = {"type": "record", "name": "Other", "fields": [{"name": "id", "type": "long"}]}


def order_class(text: str):
    pool = descriptor_pool.DescriptorPool()
    for proto in compile_files({ROOT_FILE: text, "pbstack/common.proto": COMMON}).file:
        pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("pbstack.orders.Order"))


@pytest.fixture
def protobuf_topic(local_stack, local_endpoints, tmp_path):
    run = uuid.uuid4().hex[:8]
    topic = f"protobuf.orders.{run}"
    create_topic(local_endpoints.kafka_bootstrap, topic)
    dataset, dead = f"protobuf_{run}", f"protobuf_dead_{run}"
    env = cli_env(
        tmp_path,
        {
            "version": 1,
            "topics": [
                {
                    "name": topic,
                    "format": "protobuf",
                    "routing": {"mode": "static", "dataset": dataset, "table": "orders"},
                    "event_time": {"fields": ["placed_at"]},
                }
            ],
            "dead_letter": {"dataset": dead, "table": "dead_letters"},
        },
        f"gs://{LOCAL_BUCKET}/protobuf-{run}",
    )
    client = local_bigquery_client()
    yield local_endpoints, topic, dataset, dead, env, client
    drop_datasets(client, dataset, dead)


def report(env: dict) -> dict:
    return json.loads(until_idle(env).stdout)


def order(cls, i: int, **extra):
    message = cls(id=i, status=i % 2, **extra)
    # 2024-09-13T23:30:ii.5Z
    message.placed_at.seconds, message.placed_at.nanos = 1_726_270_200 + i, 500_000_000
    message.total.currency, message.total.units = "EUR", 100 + i
    message.lines.add(sku=f"s{i}", qty=i)
    return message


def test_protobuf_values_load_field_by_field_and_a_new_version_widens_the_table(
    protobuf_topic,
) -> None:
    endpoints, topic, dataset, dead, env, client = protobuf_topic
    registry = SchemaRegistryClient({"url": endpoints.registry_url})
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap, "logger": CLIENT_LOG})
    common_subject = f"{topic}-pbstack-common"
    registry.register_schema(common_subject, Schema(COMMON, "PROTOBUF"))
    common_version = registry.get_latest_version(common_subject).version
    reference = [SchemaReference("pbstack/common.proto", common_subject, common_version)]
    v1_id = registry.register_schema(f"{topic}-value", Schema(V1, "PROTOBUF", reference))
    order_v1, order_v2 = order_class(V1), order_class(V2)
    for i in range(10):
        producer.produce(
            topic, framed(v1_id, order(order_v1, i).SerializeToString()), partition=i % 2
        )
    other = f"{topic}-other"
    avro_id = registry.register_schema(f"{other}-avro", Schema(json.dumps(AVRO), "AVRO"))
    recursive_id = registry.register_schema(f"{other}-tree", Schema(RECURSIVE, "PROTOBUF"))
    bad = [
        framed(v1_id, b"\xff\xff"),  # not an Order
        framed(v1_id, order(order_v1, 98).SerializeToString(), (5,)),  # no such message
        framed(avro_id, b"\x02"),
        framed(recursive_id, b"\x0a\x01x"),
    ]
    for raw in bad:
        producer.produce(topic, raw, partition=0)
    assert producer.flush(30) == 0

    first = report(env)
    assert first["topics"][topic]["staged"] == 10
    assert first["topics"][topic]["dead_lettered"] == 4

    v2_id = registry.register_schema(f"{topic}-value", Schema(V2, "PROTOBUF", reference))
    assert v2_id != v1_id  # BACKWARD-compatible: a field added
    for i in range(10, 16):
        extra = {"coupon": f"C{i}"} if i % 3 else {}
        producer.produce(
            topic, framed(v2_id, order(order_v2, i, **extra).SerializeToString()), partition=i % 2
        )
    for i in range(16, 18):  # a producer still on V1, after V2 widened the table
        producer.produce(
            topic, framed(v1_id, order(order_v1, i).SerializeToString()), partition=i % 2
        )
    assert producer.flush(30) == 0

    second = report(env)
    assert second["topics"][topic]["staged"] == 8
    third = report(env)
    assert third["topics"][topic]["staged"] == 0 and third["topics"][topic]["dead_lettered"] == 0

    # A query's schema, not the table's metadata: the emulator's metadata does not list the
    # columns the local adapter adds with ALTER TABLE (resources/bigquery/emulator.py).
    widened = client.query(f"SELECT * FROM `{dataset}.orders` LIMIT 1").result().schema
    assert [f.name for f in widened if not f.name.startswith("_")] == [
        "id",
        "placed_at",
        "status",
        "total",
        "lines",
        "coupon",
    ]
    rows = {
        r["id"]: dict(r)
        for r in client.query(
            f"SELECT id, placed_at, status, total, lines, coupon, _event_date FROM `{dataset}.orders`"
        ).result()
    }
    assert sorted(rows) == list(range(18))
    three = rows[3]
    assert three["placed_at"] == datetime(2024, 9, 13, 23, 30, 3, 500_000, tzinfo=UTC)
    assert three["status"] == "PAID" and rows[4]["status"] == "NEW"  # an unset enum: its 0 value
    assert dict(three["total"]) == {
        "currency": "EUR",
        "units": 103,
    }  # the referenced subject's type
    assert [dict(line) for line in three["lines"]] == [{"sku": "s3", "qty": 3}]
    assert str(three["_event_date"]) == "2024-09-13"
    assert three["coupon"] is None and rows[16]["coupon"] is None
    assert (rows[11]["coupon"], rows[12]["coupon"]) == ("C11", None)

    letters = sorted(
        (r["reason"], r["schema_id"])
        for r in client.query(f"SELECT reason, schema_id FROM `{dead}.dead_letters`").result()
    )
    assert letters == sorted(
        [
            ("protobuf_decode_error", v1_id),
            ("protobuf_decode_error", v1_id),
            ("non_protobuf_schema", avro_id),
            ("unmappable_protobuf_schema", recursive_id),
        ]
    )
