"""An Avro topic with several transforms end to end on the local stack: framed Avro produced to
Kafka with a registry schema, decoded, transformed and staged on Spark, loaded into the
BigQuery emulator by ``kbqe run --until-idle``; rows checked field by field, a record that does
not transform in the dead-letter table with its reason; run twice, the second run is idle."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import shutil
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG
from kbqe_dagster_tests.kbqe_run import create_topic, drop_datasets, until_idle
from kbqe_dagster_tests.support.framing import avro_framed
from kbqe_dagster_tests.support.transform_specs import SCHEMA, transforms

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
KEY = "transforms-e2e-key"


@pytest.fixture
def transformed_topic(local_stack, local_endpoints, tmp_path):
    run = uuid.uuid4().hex[:8]
    topic = f"transforms.orders.{run}"
    create_topic(local_endpoints.kafka_bootstrap, topic)
    registry = SchemaRegistryClient({"url": local_endpoints.registry_url})
    schema_id = registry.register_schema(
        f"transforms-{run}-value", Schema(json.dumps(SCHEMA), "AVRO")
    )
    dataset, dead = f"transforms_{run}", f"transforms_dead_{run}"
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topics": [
                    {
                        "name": topic,
                        "transforms": transforms(dataset),
                        "routing": {
                            "mode": "fields",
                            "dataset_field": "shop",
                            "table_field": "tableName",
                        },
                        "event_time": {"fields": ["created"], "date_rule": "utc"},
                    }
                ],
                "allowed_destinations": [f"{dataset}.*"],
                "dead_letter": {"dataset": dead, "table": "dead_letters"},
            }
        )
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "KBQE_ENV": "local",
        "KBQE_PIPELINE_CONFIG": str(pipeline),
        "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/transforms-{run}",
        "DAGSTER_HOME": str(home),
        "KBQE_TRANSFORMS_E2E_KEY": KEY,
    }
    client = local_bigquery_client()
    yield local_endpoints, topic, schema_id, dataset, dead, env, client
    drop_datasets(client, dataset, dead)


def framed(schema_id: int, record: dict) -> bytes:
    return avro_framed(schema_id, SCHEMA, record)


def test_transformed_avro_loads_field_by_field_and_a_bad_value_is_dead_lettered(
    transformed_topic,
) -> None:
    endpoints, topic, schema_id, dataset, dead, env, client = transformed_topic
    orders = [
        {
            "id": i,
            "kind": "Book" if i % 3 else "Game",
            "email": f"u{i}@example.com",
            "phone": f"+33 {i}",
            "amount": f"{i}.25",
            "created": f"2024-09-13T00:{i:02d}:00",
            "debug": "internal",
        }
        for i in range(30)
    ]
    bad = {**orders[0], "id": 99, "amount": "twelve"}
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap, "logger": CLIENT_LOG})
    for record in orders:
        producer.produce(
            topic,
            framed(schema_id, record),
            partition=record["id"] % 2,
            headers=[("trace-id", f"t-{record['id']}".encode())],
        )
    producer.produce(topic, framed(schema_id, bad), partition=0)
    assert producer.flush(30) == 0

    for attempt in range(2):
        done = until_idle(env)
        report = json.loads(done.stdout)
        assert report["topics"][topic]["staged"] == (30 if attempt == 0 else 0)
    assert KEY not in done.stdout + done.stderr  # the HMAC key is never logged

    books = {
        r["order_id"]: dict(r) for r in client.query(f"SELECT * FROM `{dataset}.books`").result()
    }
    games = {
        r["order_id"]: dict(r)
        for r in client.query(f"SELECT order_id FROM `{dataset}.games`").result()
    }
    assert sorted(books) == [i for i in range(30) if i % 3]
    assert sorted(games) == [i for i in range(30) if not i % 3]
    row = books[7]
    assert "id" not in row and "debug" not in row
    assert row["amount"] == 7.25 and row["phone"] is None and row["trace_id"] == "t-7"
    assert row["email"] == hmac.new(KEY.encode(), b"u7@example.com", hashlib.sha256).hexdigest()
    assert row["created"] == datetime(2024, 9, 12, 22, 7, tzinfo=UTC)  # Paris → UTC
    assert str(row["_event_date"]) == "2024-09-12"
    assert (row["shop"], row["tableName"], row["_kafka_partition"]) == (dataset, "books", 1)
    letters = [
        dict(r)
        for r in client.query(f"SELECT reason, error, `offset` FROM `{dead}.dead_letters`").result()
    ]
    assert [letter["reason"] for letter in letters] == ["transform_failed"]
    assert "transforms[2] (cast) field 'amount': 'twelve' is not a double" in letters[0]["error"]


KERNEL_TRANSFORMS = [
    {"rename": "kind", "to": "category"},
    {"cast": "id", "to": "string"},
    {"drop": ["debug", "phone"]},
    {"add": "source", "value": "kafka"},
    {"mask": "email", "key_env": "KBQE_TRANSFORMS_E2E_KEY"},
    {"add": "trace", "header": "trace-id"},
    {"add": "kafka_at", "message": "timestamp"},
]
"""Transforms the native kernel does (core/transforms/kernel_transforms.py): staged on the kernel when
it is built and the switch is on, on the Python path otherwise; the same rows either way. The
hmac mask and the parts of the message (a header whose name comes twice: the last wins; the
Kafka timestamp) are rewrite.rs's on the Avro kernel."""


@pytest.mark.parametrize("switch", ["on", "off"], ids=["kernel", "python"])
def test_kernel_transforms_load_the_same_rows_on_either_stage_path(
    switch, local_stack, local_endpoints, tmp_path
) -> None:
    run = uuid.uuid4().hex[:8]
    topic = f"transforms.kernel.{run}"
    create_topic(local_endpoints.kafka_bootstrap, topic)
    registry = SchemaRegistryClient({"url": local_endpoints.registry_url})
    schema_id = registry.register_schema(
        f"transforms-kernel-{run}-value", Schema(json.dumps(SCHEMA), "AVRO")
    )
    dataset, dead = f"kernel_tx_{run}", f"kernel_tx_dead_{run}"
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topics": [
                    {
                        "name": topic,
                        "transforms": KERNEL_TRANSFORMS,
                        "routing": {"mode": "static", "dataset": dataset, "table": "orders"},
                        "event_time": {"fields": ["created"], "date_rule": "utc"},
                    }
                ],
                "allowed_destinations": [f"{dataset}.*"],
                "dead_letter": {"dataset": dead, "table": "dead_letters"},
            }
        )
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "KBQE_ENV": "local",
        "KBQE_PIPELINE_CONFIG": str(pipeline),
        "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/kernel-tx-{run}",
        "DAGSTER_HOME": str(home),
        "KBQE_STAGE_KERNEL": switch,
        "KBQE_TRANSFORMS_E2E_KEY": KEY,
    }
    client = local_bigquery_client()
    try:
        producer = Producer({"bootstrap.servers": local_endpoints.kafka_bootstrap,
                             "logger": CLIENT_LOG})  # fmt: skip
        for i in range(20):
            record = {"id": -i, "kind": "Book", "email": f"u{i}@example.com", "phone": None,
                      "amount": f"{i}.25", "created": f"2024-09-13T00:{i:02d}:00Z",
                      "debug": "internal"}  # fmt: skip
            headers = [("trace-id", b"first"), ("trace-id", f"t-{i}".encode())]
            producer.produce(topic, framed(schema_id, record), partition=i % 2, headers=headers,
                             timestamp=1_726_238_205_000 + i)  # fmt: skip
        producer.produce(topic, framed(schema_id, record)[:-3], partition=0)  # truncated
        assert producer.flush(30) == 0
        for attempt in range(2):
            report = json.loads(until_idle(env).stdout)
            assert report["topics"][topic]["staged"] == (20 if attempt == 0 else 0)
        rows = {
            r["id"]: dict(r) for r in client.query(f"SELECT * FROM `{dataset}.orders`").result()
        }
        assert sorted(rows) == sorted(str(-i) for i in range(20))
        row = rows["-7"]
        assert "kind" not in row and "debug" not in row and "phone" not in row
        assert (row["category"], row["source"], row["amount"]) == ("Book", "kafka", "7.25")
        assert str(row["_event_date"]) == "2024-09-13"
        digest = hmac.new(KEY.encode(), b"u7@example.com", hashlib.sha256).hexdigest()
        assert (row["email"], row["trace"]) == (digest, "t-7")
        assert row["kafka_at"] == datetime.fromtimestamp(1_726_238_205.007, UTC)
        reasons = [
            r["reason"] for r in client.query(f"SELECT reason FROM `{dead}.dead_letters`").result()
        ]
        assert reasons == ["body_decode_error"]
    finally:
        drop_datasets(client, dataset, dead)
