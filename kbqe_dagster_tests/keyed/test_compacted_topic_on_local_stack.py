"""A compacted topic becomes its current table, end to end on the local stack, with the broker as
the oracle (DESIGN.md §14): a ``cleanup.policy=compact`` topic keyed by an Avro key gets
updates, tombstones, re-creates and a key whose versions span both runs; the broker really
compacts it between the runs (read back from the beginning, it holds fewer records than were
produced, some of them never read by kbqe); after each ``kbqe run --until-idle``, ``D.T``
equals the topic read as a table (the last value per key, tombstoned keys deleted).

Cheap by construction: two ``kbqe run`` subprocesses, a few dozen messages. Every message is
produced on its own, one second later than the previous one in Kafka time, so that each rolls
a new segment (``segment.ms``: only closed segments are compacted) without a sleep; the only
wait is for the broker's cleaner to pass (``log.cleaner.backoff.ms``, 15 s by default)."""

from __future__ import annotations

import io
import json
import time
import uuid
from typing import Any

import fastavro
import pytest

from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster_tests.kbqe_run import cli_env, drop_datasets, until_idle

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 2
VALUE = {"type": "record", "name": "Customer", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "tier", "type": ["null", "string"], "default": None},
]}  # fmt: skip
KEY = {"type": "record", "name": "CustomerKey", "namespace": "shop",
       "fields": [{"name": "id", "type": "long"}]}  # fmt: skip
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "100",  # each message of a later Kafka time rolls a segment
    "min.cleanable.dirty.ratio": "0.01",
}


class CompactedTopic:
    """The test's topic: its registered schemas, what was produced, and the topic read back."""

    def __init__(self, endpoints: Any, name: str) -> None:
        from confluent_kafka import Producer
        from confluent_kafka.admin import AdminClient, NewTopic
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        self.name, self.bootstrap = name, endpoints.kafka_bootstrap
        self.admin = AdminClient({"bootstrap.servers": self.bootstrap})
        topic = NewTopic(name, num_partitions=PARTITIONS, replication_factor=1, config=COMPACTED)
        self.admin.create_topics([topic])[name].result(30)
        registry = SchemaRegistryClient({"url": endpoints.registry_url})
        self.key_id = registry.register_schema(f"{name}-key", Schema(json.dumps(KEY), "AVRO"))
        self.value_id = registry.register_schema(f"{name}-value", Schema(json.dumps(VALUE), "AVRO"))
        self.producer = Producer({"bootstrap.servers": self.bootstrap})
        self.kafka_ms = int(time.time() * 1000) - 600_000
        self.produced = 0

    def put(self, id_: int, name: str | None, tier: str | None = None, **where: Any) -> None:
        """One message of key ``id_``: its value, or a tombstone when ``name`` is None
        (``where``: the producer's ``partition``, for :meth:`seal`)."""
        value = None
        if name is not None:
            record = {"id": id_, "name": name, "tier": tier}
            value = encode_frame(self.value_id, _avro(VALUE, record))
        self.kafka_ms += 1000
        self.producer.produce(
            self.name,
            value=value,
            key=encode_frame(self.key_id, _avro(KEY, {"id": id_})),
            timestamp=self.kafka_ms,
            **where,
        )
        self.producer.flush(30)  # one batch per message: each its own segment
        self.produced += 1

    def read_back(self) -> list[tuple[int, int, int, dict | None]]:
        """Every message the topic holds now, from the beginning: (partition, offset, key id,
        value or None)."""
        from confluent_kafka import Consumer, TopicPartition

        consumer = Consumer({"bootstrap.servers": self.bootstrap, "group.id": "compacted-oracle",
                             "enable.auto.commit": False})  # fmt: skip
        out = []
        try:
            for partition in range(PARTITIONS):
                _, high = consumer.get_watermark_offsets(TopicPartition(self.name, partition), 30)
                consumer.assign([TopicPartition(self.name, partition, 0)])
                position = 0
                while position < high:
                    msg = consumer.poll(10)
                    assert msg is not None and msg.error() is None, f"{self.name}[{partition}]"
                    key = _decoded(KEY, msg.key())["id"]
                    value = None if msg.value() is None else _decoded(VALUE, msg.value())
                    out.append((partition, msg.offset(), key, value))
                    position = msg.offset() + 1
        finally:
            consumer.close()
        return out

    def as_table(self) -> set[tuple]:
        """The topic read as a table: the last value per key, tombstoned keys deleted."""
        last: dict[int, dict | None] = {}
        for _, _, key, value in sorted(self.read_back(), key=lambda m: (m[0], m[1])):
            last[key] = value
        return {(k, v["name"], v["tier"]) for k, v in last.items() if v is not None}

    def seal(self) -> None:
        """Roll every partition's active segment (never compacted) with one message of a key
        of its own, so that everything before it may be compacted."""
        for partition in range(PARTITIONS):
            self.put(1000 + partition, "seal", partition=partition)

    def wait_for_compaction(self, gone: set[tuple[int, str]], timeout: float = 90.0) -> int:
        """Polls until the broker's cleaner has removed the values ``gone`` ((key, name) of
        superseded values); returns how many records the topic holds then."""
        deadline = time.monotonic() + timeout
        while True:
            held = self.read_back()
            if not gone & {(k, v["name"]) for _, _, k, v in held if v is not None}:
                return len(held)
            assert time.monotonic() < deadline, f"{self.name}: not compacted in {timeout}s"
            time.sleep(1)

    def delete(self) -> None:
        self.admin.delete_topics([self.name])[self.name].result(30)


def _avro(schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def _decoded(schema: dict, framed: bytes) -> dict:
    return fastavro.schemaless_reader(io.BytesIO(framed[5:]), fastavro.parse_schema(schema), None)


@pytest.fixture
def compacted(local_stack, local_endpoints, tmp_path):
    run = uuid.uuid4().hex[:8]
    name, dataset, dead = f"compact{run}.shop.customers", f"compact_{run}", f"compact_dead_{run}"
    topic = CompactedTopic(local_endpoints, name)
    pipeline = {
        "version": 1,
        "topics": [{
            "name": name,
            "routing": {"mode": "static", "dataset": dataset, "table": "customers"},
            "event_time": {"fields": [], "kafka_timestamp_fallback": True},
            "keyed": {"key_from": "kafka_key", "deletes": "hard", "history": True},
        }],
        "dead_letter": {"dataset": dead, "table": "dead_letters"},
    }  # fmt: skip
    env = cli_env(tmp_path, pipeline, f"gs://{LOCAL_BUCKET}/compacted-{run}")
    client = local_bigquery_client()
    yield topic, dataset, env, client
    topic.delete()
    drop_datasets(client, dataset, dead)


def current_table(client, dataset: str) -> set[tuple]:
    rows = client.query(f"SELECT id, name, tier FROM `{dataset}.customers`").result()
    return {tuple(row) for row in rows}


def test_a_compacted_topic_is_its_current_table_before_and_after_the_broker_compacts(
    compacted,
) -> None:
    topic, dataset, env, client = compacted
    # Run 1: creates, updates, a delete, a key created and deleted.
    for id_ in range(1, 7):
        topic.put(id_, f"c{id_}")
    topic.put(2, "c2 v2", "gold")
    topic.put(2, "c2 v3", "gold")
    topic.put(3, None)
    topic.put(7, "c7")
    topic.put(7, None)
    until_idle(env)
    assert current_table(client, dataset) == topic.as_table() != set()

    before = topic.produced
    # Run 2: key 1's versions span both runs, key 3 and key 7 are re-created, key 5 is
    # deleted, key 6 changes three times (the broker keeps only the last), a new key.
    topic.put(1, "c1 v2", "silver")
    topic.put(3, "c3 again")
    topic.put(7, "c7 again", "gold")
    topic.put(5, None)
    for version in range(2, 5):
        topic.put(6, f"c6 v{version}")
    topic.put(8, "c8")
    topic.put(1, "c1 v3", "gold")
    topic.seal()
    produced = topic.produced - before
    left = topic.wait_for_compaction({(6, "c6 v2"), (6, "c6 v3"), (1, "c1 v2")})
    assert left < topic.produced
    report = json.loads(until_idle(env).stdout)
    # Run 2 read a compacted topic: values it never saw were gone before it ran.
    assert report["topics"][topic.name]["messages"] < produced
    table = topic.as_table()
    assert current_table(client, dataset) == table
    assert {row[0] for row in table} == {1, 2, 3, 4, 6, 7, 8, 1000, 1001}

    # The history: a tombstone closes its key's version and is the key's current, deleted,
    # version until the key is written again (key 3: the broker may have compacted its first
    # value away before kbqe read it; the history holds what Kafka delivered).
    history = client.query(
        f"SELECT id, name, _deleted, _is_current FROM `{dataset}.customers_history` "
        "WHERE id IN (3, 5)"
    ).result()
    versions = {(r["id"], r["name"], r["_deleted"], r["_is_current"]) for r in history}
    assert {(5, "c5", False, False), (5, "c5", True, True)} <= versions
    assert {v[:3] for v in versions if v[3]} == {(3, "c3 again", False), (5, "c5", True)}
