"""The contract change-data-capture work relies on from the local stack's on-demand
PostgreSQL and Kafka Connect worker: a Debezium PostgreSQL connector registered through
Connect's REST API snapshots a table and streams its changes to Kafka, once through
Apicurio's Avro converter in Confluent framing (byte 0 is 0, bytes 1-4 a schema id that the
registry's Confluent-compatible API resolves), once through Connect's JsonConverter with the
schema embedded in each message. Both connectors watch the same table, each with its own
topic prefix, replication slot and publication.
"""

from __future__ import annotations

import io
import json
import struct
import time
import uuid
from collections.abc import Iterator
from typing import Any

import fastavro
import psycopg
import pytest
import requests
from confluent_kafka import Consumer

from kbqe_dagster.localstack.cdc import ConnectClient, debezium_postgres_config
from kbqe_dagster.localstack.endpoints import LocalEndpoints
from kbqe_dagster.localstack.postgres import DATABASE, PASSWORD, USER

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# (op, id) of each message in topic order; (None, id) is a tombstone
EXPECTED = [("r", 1), ("c", 2), ("u", 1), ("d", 2), (None, 2)]


def dsn(endpoints: LocalEndpoints) -> str:
    return (
        f"host=127.0.0.1 port={endpoints.postgres_port} user={USER} password={PASSWORD} "
        f"dbname={DATABASE}"
    )


@pytest.fixture(scope="module")
def captured(cdc_stack: LocalEndpoints) -> Iterator[dict[str, list[Any]]]:
    """A fresh table, two connectors on it (Avro, JSON), a snapshot row and three changes;
    yields each topic's messages. Connectors, slots and the table are removed afterwards."""
    run = uuid.uuid4().hex[:8]
    table = f"cdc_{run}"
    client = ConnectClient(cdc_stack.connect_url)
    with psycopg.connect(dsn(cdc_stack), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {table} (id int PRIMARY KEY, name text, amount numeric(10,2))")
        conn.execute(f"INSERT INTO {table} VALUES (1, 'snapshot', 1.50)")
    connectors = {
        kind: (f"cdc-{kind}-{run}", f"cdc_{kind}_{run}")  # (connector name, prefix = slot)
        for kind in ("avro", "json")
    }
    try:
        for kind, (name, prefix) in connectors.items():
            config = debezium_postgres_config(
                cdc_stack,
                prefix,
                prefix,
                [f"public.{table}"],
                kind,
                {"slot.drop.on.stop": "true"},
            )
            client.put(name, config)
        for name, _ in connectors.values():
            client.wait_running(name)
        topics = {kind: f"{prefix}.public.{table}" for kind, (_, prefix) in connectors.items()}
        for t in topics.values():  # the snapshot is read before the changes are made
            consume(cdc_stack, t, 1)
        with psycopg.connect(dsn(cdc_stack), autocommit=True) as conn:
            conn.execute(f"INSERT INTO {table} VALUES (2, 'inserted', 20.25)")
            conn.execute(f"UPDATE {table} SET name = 'updated', amount = 10.00 WHERE id = 1")
            conn.execute(f"DELETE FROM {table} WHERE id = 2")
        yield {kind: consume(cdc_stack, t, len(EXPECTED)) for kind, t in topics.items()}
    finally:
        for name, _ in connectors.values():
            client.delete(name)
        for name, _ in connectors.values():
            client.wait_deleted(name)
        with psycopg.connect(dsn(cdc_stack), autocommit=True) as conn:
            for _, slot in connectors.values():
                _drop_slot_when_released(conn, slot)
                conn.execute(f"DROP PUBLICATION IF EXISTS {slot}_publication")
            conn.execute(f"DROP TABLE IF EXISTS {table}")


def test_avro_changes_are_confluent_framed_with_ids_the_ccompat_api_resolves(
    captured, cdc_stack
) -> None:
    seen = []
    for msg in captured["avro"]:
        key = decode_framed(cdc_stack, msg.key())
        value = decode_framed(cdc_stack, msg.value()) if msg.value() is not None else None
        seen.append((value["op"] if value else None, key["id"]))
    assert seen == EXPECTED
    values = [decode_framed(cdc_stack, m.value()) for m in captured["avro"][:4]]
    assert values[0]["after"]["name"] == "snapshot"
    assert values[0]["source"]["snapshot"] in (
        "true",
        "last",
        "first_in_data_collection",
        "last_in_data_collection",
    )
    assert values[1]["after"] == {"id": 2, "name": "inserted", "amount": _decimal("20.25")}
    assert values[2]["after"] == {"id": 1, "name": "updated", "amount": _decimal("10.00")}
    assert values[3]["before"]["id"] == 2 and values[3]["after"] is None


def test_the_avro_schema_id_is_the_subjects_id_in_the_ccompat_api(captured, cdc_stack) -> None:
    """The framed id is the one a Confluent client sees for the subject (Apicurio 3's ccompat
    ids are content ids, what the converter is told to write), not only an id that happens
    to resolve."""
    msg = captured["avro"][0]
    value_id = struct.unpack(">I", msg.value()[1:5])[0]
    key_id = struct.unpack(">I", msg.key()[1:5])[0]
    registry = cdc_stack.registry_url
    for subject, schema_id in ((f"{msg.topic()}-value", value_id), (f"{msg.topic()}-key", key_id)):
        latest = requests.get(f"{registry}/subjects/{subject}/versions/latest", timeout=10).json()
        assert latest["id"] == schema_id, subject


def test_json_changes_carry_their_schema_and_payload(captured) -> None:
    seen = []
    for msg in captured["json"]:
        key = json.loads(msg.key())
        assert set(key) == {"schema", "payload"}
        value = json.loads(msg.value()) if msg.value() is not None else None
        if value is not None:
            assert set(value) == {"schema", "payload"}
            assert value["schema"]["name"].endswith(".Envelope")
        seen.append((value["payload"]["op"] if value else None, key["payload"]["id"]))
    assert seen == EXPECTED
    first = json.loads(captured["json"][0].value())["payload"]
    assert first["after"]["name"] == "snapshot"
    fields = {f["field"]: f for f in json.loads(captured["json"][0].value())["schema"]["fields"]}
    after = {f["field"]: f for f in fields["after"]["fields"]}
    assert after["amount"]["name"] == "org.apache.kafka.connect.data.Decimal"
    assert after["amount"]["parameters"]["scale"] == "2"


# --- helpers -------------------------------------------------------------------------------
def decode_framed(endpoints: LocalEndpoints, raw: bytes) -> dict[str, Any]:
    """Confluent framing, checked byte by byte, decoded with the schema the ccompat API
    returns for the id."""
    assert raw[0] == 0, f"magic byte {raw[0]}"
    schema_id = struct.unpack(">I", raw[1:5])[0]
    answer = requests.get(f"{endpoints.registry_url}/schemas/ids/{schema_id}", timeout=10)
    assert answer.status_code == 200, f"schema id {schema_id}: HTTP {answer.status_code}"
    schema = fastavro.parse_schema(json.loads(answer.json()["schema"]))
    return fastavro.schemaless_reader(io.BytesIO(raw[5:]), schema, schema)


def _decimal(text: str) -> Any:
    import decimal

    return decimal.Decimal(text)


def consume(endpoints: LocalEndpoints, topic: str, count: int, timeout: float = 120.0) -> list:
    consumer = Consumer(
        {
            "bootstrap.servers": endpoints.kafka_bootstrap,
            "group.id": f"cdc-test-{uuid.uuid4()}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "topic.metadata.refresh.interval.ms": 1000,
        }
    )
    messages: list = []
    deadline = time.monotonic() + timeout
    try:
        consumer.subscribe([topic])
        while len(messages) < count and time.monotonic() < deadline:
            msg = consumer.poll(1.0)
            if msg is None or msg.error():
                continue  # the topic may not exist yet: the connector creates it
            messages.append(msg)
    finally:
        consumer.close()
    assert len(messages) >= count, f"{topic}: {len(messages)} of {count} messages in {timeout}s"
    return messages


def _drop_slot_when_released(conn: psycopg.Connection, slot: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
        if row is None:
            return
        if not row[0]:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            return
        time.sleep(0.5)
