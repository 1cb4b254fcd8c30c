"""``kbqe produce-sample`` against the real local Kafka and Apicurio: the topic is created with
the asked partitions, every message lands, and the report counts them per table and reason."""

from __future__ import annotations

import uuid

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from kbqe_dagster.localstack.endpoints import LocalEndpoints
from kbqe_dagster_tests.cli.conftest import Run

BAD_REASONS = {
    "bad_magic": 1,
    "body_decode_error": 3,
    "destination_not_allowed": 1,
    "invalid_event_time": 1,
    "missing_event_time": 1,
    "non_avro_schema": 1,
    "tombstone": 1,
    "too_short": 1,
    "unknown_schema_id": 1,
    "unroutable": 1,
}


def end_offsets(bootstrap: str, topic: str, partitions: int) -> list[int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kbqe-test-unused"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        ]
    finally:
        consumer.close()


def test_a_new_topic_is_created_and_gets_every_sample_message(
    run: Run, local_stack: LocalEndpoints
) -> None:
    topic = f"cli-sample-{uuid.uuid4().hex[:8]}"
    args = (
        "produce-sample",
        "--count",
        "40",
        "--topic",
        topic,
        "--partitions",
        "2",
        "--bootstrap-servers",
        local_stack.kafka_bootstrap,
        "--registry-url",
        local_stack.registry_url,
    )
    try:
        report = run(*args, "--json").json()
        assert (report["topic"], report["partitions"], report["created_topic"]) == (topic, 2, True)
        assert sum(report["per_table"].values()) == 40
        assert set(report["per_table"]) == {"acme_sales.orders", "acme_web.page_views"}
        assert report["per_reason"] == BAD_REASONS
        assert report["produced"] == 40 + sum(BAD_REASONS.values())
        assert set(report["schema_ids"]) == {
            "orders_v1",
            "orders_v2",
            "page_views",
            "pings",
            "json",
        }
        assert sum(end_offsets(local_stack.kafka_bootstrap, topic, 2)) == report["produced"]

        again = run(*args)  # the topic exists now: kept as is, events added
        assert again.code == 0
        assert again.out.splitlines()[0] == (
            f"produced {report['produced']} message(s) to {topic} (2 partitions, existing)"
        )
        assert sum(end_offsets(local_stack.kafka_bootstrap, topic, 2)) == 2 * report["produced"]
    finally:
        admin = AdminClient({"bootstrap.servers": local_stack.kafka_bootstrap})
        admin.delete_topics([topic])[topic].result(timeout=30)


def test_clicks_are_produced_for_the_storage_write_table_when_asked(
    run: Run, local_stack: LocalEndpoints
) -> None:
    topic = f"cli-sample-{uuid.uuid4().hex[:8]}"
    try:
        report = run(
            "produce-sample",
            "--count",
            "10",
            "--clicks",
            "7",
            "--topic",
            topic,
            "--partitions",
            "1",
            "--bootstrap-servers",
            local_stack.kafka_bootstrap,
            "--registry-url",
            local_stack.registry_url,
            "--json",
        ).json()
        assert report["per_table"]["acme_web.clicks"] == 7
        assert report["produced"] == 10 + 7 + sum(BAD_REASONS.values())
        assert sum(end_offsets(local_stack.kafka_bootstrap, topic, 1)) == report["produced"]
    finally:
        admin = AdminClient({"bootstrap.servers": local_stack.kafka_bootstrap})
        admin.delete_topics([topic])[topic].result(timeout=30)


def test_an_unreachable_registry_is_one_error_line(run: Run) -> None:
    result = run(
        "produce-sample",
        "--count",
        "1",
        "--bootstrap-servers",
        "127.0.0.1:1",
        "--registry-url",
        "http://127.0.0.1:1",
    )
    assert result.code == 1
    assert len(result.err.splitlines()) == 1
    assert result.err.startswith(
        "kbqe: error: schema registry at http://127.0.0.1:1: cannot register the demo schemas"
    )
