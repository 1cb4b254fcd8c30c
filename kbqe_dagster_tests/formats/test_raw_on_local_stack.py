"""``format: raw`` end to end on the local stack: values of every kind (garbage that is not
UTF-8, JSON text, Avro framed with an id no registry knows, an empty value, tombstones) with
keys and headers produced to Kafka, archived by ``kbqe run --until-idle`` into a DAY table and
an HOUR table: every message is one row holding its exact bytes, nothing is dead-lettered,
and a second run changes nothing.

Not here: a ``delivery: storage_write`` raw table. Its rows have the headers column, a REPEATED
RECORD, and the emulator's Storage Write path loses the rows of a table with a RECORD column
(docs/architecture.md, "Local stack and its gaps": its insert fails after the offset
advanced); ``test_raw_stage.py`` proves the raw rows encode as Storage Write rows and parse
back to the staged values."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from confluent_kafka import Producer

from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG
from kbqe_dagster_tests.kbqe_run import cli_env, create_topic, drop_datasets, until_idle

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TS = 1_726_238_205_123  # 2024-09-13T14:36:45.123Z
VALUES = [
    b"\xff\xfe\x00\x80not utf-8\xc3",
    b'{"json": "text", "n": 1}',
    b"\x00\x00\x0f\x42\x3f\x02\x0cfoobar",  # framed Avro of schema id 999999: unknown here
    b"",
    None,  # a tombstone
]
TABLES = {"day": "events", "hour": "events_hourly"}


@pytest.fixture
def raw_topics(local_stack, local_endpoints, tmp_path):
    run = uuid.uuid4().hex[:8]
    topics = {kind: f"audit.raw{run}.{kind}" for kind in TABLES}
    for topic in topics.values():
        create_topic(local_endpoints.kafka_bootstrap, topic, 2)
    dataset, dead = f"archive_{run}", f"dead_{run}"
    pipeline = {
        "version": 1,
        "topics": [
            {
                "name": topic,
                "format": "raw",
                "routing": {"mode": "static", "dataset": dataset, "table": TABLES[kind]},
            }
            for kind, topic in topics.items()
        ],
        "tables": {f"{dataset}.events_hourly": {"partitioning": "hour"}},
        "dead_letter": {"dataset": dead, "table": "dead_letters"},
    }
    env = cli_env(tmp_path, pipeline, f"gs://{LOCAL_BUCKET}/raw-{run}")
    client = local_bigquery_client()
    yield local_endpoints, topics, dataset, dead, env, client
    drop_datasets(client, dataset, dead)


def produce(bootstrap: str, topic: str) -> list[tuple[bytes | None, bytes, int]]:
    """Every value of VALUES on both partitions, three hours apart (across midnight UTC):
    (value, key, timestamp)."""
    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOG})
    sent = []
    for i, value in enumerate(VALUES * 2):
        key = b"key-\xff-%d" % i
        ts = TS + i * 3 * 3_600_000
        headers = [("trace", b"\x00\x01"), ("empty", None), ("trace", b"second")]
        producer.produce(topic, value, key, partition=i % 2, timestamp=ts, headers=headers)
        sent.append((value, key, ts))
    assert producer.flush(30) == 0
    return sent


def test_every_message_is_archived_as_its_bytes_once_in_a_day_and_an_hour_table(
    raw_topics,
) -> None:
    endpoints, topics, dataset, dead, env, client = raw_topics
    sent = {kind: produce(endpoints.kafka_bootstrap, topic) for kind, topic in topics.items()}

    for attempt in range(2):
        report = json.loads(until_idle(env).stdout)
        for topic in topics.values():
            assert report["topics"][topic]["staged"] == (len(VALUES) * 2 if attempt == 0 else 0)

    for kind, table in TABLES.items():
        rows = [
            dict(r)
            for r in client.query(
                f"SELECT * FROM `{dataset}.{table}` ORDER BY _kafka_timestamp"
            ).result()
        ]
        assert [(r["value"], r["_kafka_key"]) for r in rows] == [(v, k) for v, k, _ in sent[kind]]
        assert [int(r["_kafka_timestamp"].timestamp() * 1000) for r in rows] == [
            ts for _, _, ts in sent[kind]
        ]
        assert len({(r["_kafka_partition"], r["_kafka_offset"]) for r in rows}) == len(rows)
        assert rows[0]["_kafka_headers"] == [
            {"key": "trace", "value": b"\x00\x01"},
            {"key": "empty", "value": None},
            {"key": "trace", "value": b"second"},
        ]
        assert [r["_event_date"] for r in rows] == [
            datetime.fromtimestamp(ts / 1000, UTC).date() for _, _, ts in sent[kind]
        ]
        assert {str(r["_event_date"]) for r in rows} == {"2024-09-13", "2024-09-14"}
        if kind == "hour":
            assert [r["_event_hour"] for r in rows] == [
                datetime.fromtimestamp(ts // 3_600_000 * 3600, UTC) for _, _, ts in sent[kind]
            ]
    assert not _dead_letters(client, dead)


def _dead_letters(client, dead: str) -> list:
    datasets = {d.dataset_id for d in client.list_datasets()}
    if dead not in datasets:
        return []
    return list(client.query(f"SELECT reason FROM `{dead}.dead_letters`").result())
