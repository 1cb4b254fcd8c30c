"""The contract the pipeline relies on from the local Kafka and Apicurio Registry, exercised
with the same clients production uses (confluent-kafka and its schema registry client):

- schemas register through Apicurio's Confluent-compatible API and are fetched back by id;
- AvroSerializer frames values the Confluent way (magic byte 0, 4-byte big-endian schema id,
  Avro binary body) — checked byte by byte, independently of the deserializer;
- explicit-partition topics are created by an AdminClient, and a consumer assign()ed to
  explicit offsets reads exactly the messages at and after them;
- global compatibility is BACKWARD: an incompatible change is refused with 409;
- a second ``up`` of a running stack changes nothing and ``status`` reports it running.
"""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator

import fastavro
import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer
from confluent_kafka.schema_registry.error import SchemaRegistryError
from confluent_kafka.serialization import MessageField, SerializationContext

from kbqe_dagster.localstack import stack
from kbqe_dagster.localstack.endpoints import LocalEndpoints

pytestmark = pytest.mark.integration

PARTITIONS = 3
PER_PARTITION = 4
START_OFFSET = 1  # consume from the second message of every partition

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "kbqe.test",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "customer", "type": "string"},
        {"name": "amount", "type": "double"},
    ],
}


def evolved(
    *, add: list[dict] | None = None, drop: str | None = None, retype: tuple[str, str] | None = None
) -> dict:
    fields = [dict(f) for f in ORDER_V1["fields"] if f["name"] != drop]
    if retype is not None:
        fields = [dict(f, type=retype[1]) if f["name"] == retype[0] else f for f in fields]
    return dict(ORDER_V1, fields=fields + (add or []))


@pytest.fixture(scope="module")
def registry(local_stack: LocalEndpoints) -> SchemaRegistryClient:
    return SchemaRegistryClient({"url": local_stack.registry_url})


@pytest.fixture(scope="module")
def admin(local_stack: LocalEndpoints) -> AdminClient:
    return AdminClient({"bootstrap.servers": local_stack.kafka_bootstrap})


@pytest.fixture
def topic(admin: AdminClient) -> Iterator[str]:
    name = f"contract-{uuid.uuid4().hex[:10]}"
    futures = admin.create_topics([NewTopic(name, num_partitions=PARTITIONS, replication_factor=1)])
    futures[name].result(timeout=30)
    yield name
    admin.delete_topics([name])[name].result(timeout=30)


def produce_orders(
    bootstrap: str, topic: str, serializer: AvroSerializer
) -> dict[tuple[int, int], dict]:
    """PER_PARTITION orders into every partition; returns them by (partition, offset)."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    placed: dict[tuple[int, int], dict] = {}
    errors: list[KafkaError] = []

    def delivered(err, msg, order):
        if err is not None:
            errors.append(err)
        else:
            placed[(msg.partition(), msg.offset())] = order

    ctx = SerializationContext(topic, MessageField.VALUE)
    for i in range(PARTITIONS * PER_PARTITION):
        order = {"id": 1000 + i, "customer": f"customer-{i}", "amount": i * 1.25}
        producer.produce(
            topic,
            value=serializer(order, ctx),
            key=str(order["id"]).encode(),
            partition=i % PARTITIONS,
            on_delivery=lambda e, m, o=order: delivered(e, m, o),
        )
    assert producer.flush(30) == 0
    assert errors == []
    return placed


def consume_from(
    bootstrap: str, topic: str, offset: int, expected: int, timeout: float = 30.0
) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"contract-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
        }
    )
    consumer.assign([TopicPartition(topic, p, offset) for p in range(PARTITIONS)])
    messages = []
    deadline = time.monotonic() + timeout
    try:
        while len(messages) < expected and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            messages.append(msg)
        # Nothing beyond what was produced may arrive.
        extra = consumer.poll(1.0)
        assert extra is None or extra.error() is not None
    finally:
        consumer.close()
    return messages


def test_avro_messages_round_trip_with_confluent_framing(
    local_stack: LocalEndpoints,
    registry: SchemaRegistryClient,
    topic: str,
) -> None:
    serializer = AvroSerializer(registry, json.dumps(ORDER_V1))
    placed = produce_orders(local_stack.kafka_bootstrap, topic, serializer)
    assert sorted(placed) == [(p, o) for p in range(PARTITIONS) for o in range(PER_PARTITION)]

    schema_id = registry.get_latest_version(f"{topic}-value").schema_id
    assert json.loads(registry.get_schema(schema_id).schema_str) == ORDER_V1

    expected = PARTITIONS * (PER_PARTITION - START_OFFSET)
    messages = consume_from(local_stack.kafka_bootstrap, topic, START_OFFSET, expected)
    assert sorted((m.partition(), m.offset()) for m in messages) == sorted(
        key for key in placed if key[1] >= START_OFFSET
    )

    parsed = fastavro.parse_schema(ORDER_V1)
    deserializer = AvroDeserializer(registry)
    ctx = SerializationContext(topic, MessageField.VALUE)
    for msg in messages:
        value = msg.value()
        order = placed[(msg.partition(), msg.offset())]
        assert value[0] == 0, "magic byte"
        assert struct.unpack(">I", value[1:5])[0] == schema_id
        assert fastavro.schemaless_reader(io.BytesIO(value[5:]), parsed) == order
        assert deserializer(value, ctx) == order
        assert msg.key() == str(order["id"]).encode()


def test_registering_the_same_schema_again_returns_the_same_id(
    registry: SchemaRegistryClient,
) -> None:
    subject = f"same-{uuid.uuid4().hex[:10]}-value"
    first = registry.register_schema(subject, Schema(json.dumps(ORDER_V1), "AVRO"))
    again = registry.register_schema(subject, Schema(json.dumps(ORDER_V1), "AVRO"))

    assert again == first
    assert registry.get_compatibility() == "BACKWARD"


@pytest.mark.parametrize(
    ("change", "new_schema", "accepted"),
    [
        (
            "add a field with a default",
            evolved(add=[{"name": "note", "type": "string", "default": ""}]),
            True,
        ),
        (
            "add an optional field",
            evolved(add=[{"name": "coupon", "type": ["null", "string"], "default": None}]),
            True,
        ),
        ("drop a field", evolved(drop="customer"), True),
        ("promote long to double", evolved(retype=("id", "double")), True),
        (
            "add a field without a default",
            evolved(add=[{"name": "region", "type": "string"}]),
            False,
        ),
        ("narrow a type", evolved(retype=("amount", "int")), False),
        ("change a type", evolved(retype=("customer", "long")), False),
    ],
)
def test_global_compatibility_is_backward(
    registry: SchemaRegistryClient,
    change: str,
    new_schema: dict,
    accepted: bool,
) -> None:
    subject = f"compat-{uuid.uuid4().hex[:10]}-value"
    first_id = registry.register_schema(subject, Schema(json.dumps(ORDER_V1), "AVRO"))

    if accepted:
        new_id = registry.register_schema(subject, Schema(json.dumps(new_schema), "AVRO"))
        assert new_id != first_id
        assert registry.get_latest_version(subject).version == 2
    else:
        with pytest.raises(SchemaRegistryError) as refused:
            registry.register_schema(subject, Schema(json.dumps(new_schema), "AVRO"))
        assert refused.value.http_status_code == 409, change
        assert registry.get_latest_version(subject).version == 1


def test_a_second_up_is_a_no_op_and_status_reports_running(local_stack: LocalEndpoints) -> None:
    before = {s.name: s.pid for s in stack.status(endpoints=local_stack)}
    started = time.monotonic()

    statuses = stack.up(endpoints=local_stack)

    assert time.monotonic() - started < 15
    # A plain up is the default services'; status lists the on-demand ones too (postgres,
    # connect), running when the session's change-data-capture tests started them.
    default = ["kafka", "apicurio", "gcs", "bigquery"]
    assert [s.name for s in statuses] == default
    assert {s.name: s.pid for s in statuses} == {name: before[name] for name in default}
    assert all(s.running for s in statuses)
    cli_status = subprocess.run(
        [sys.executable, "-m", "kbqe_dagster.cli", "stack", "status", "--json"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    reported = {s["name"]: s for s in json.loads(cli_status.stdout)}
    assert {name: s["pid"] for name, s in reported.items()} == before
    assert all(reported[name]["running"] for name in default)
    assert reported["kafka"]["endpoint"] == local_stack.kafka_bootstrap
    assert reported["apicurio"]["endpoint"] == local_stack.registry_url
