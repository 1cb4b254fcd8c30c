"""A compacted topic of customers (``cleanup.policy=compact``, an Avro key through the registry)
that the broker really compacts, and the topic read back as a table: the oracle of
kbqe_dagster_tests/keyed/test_compacted_topic_on_local_stack.py and reliability/compacted_daemon.py
(a topic keyed by its Kafka key, ``keyed.key_from: kafka_key``: core/keyed/contract.py).

Every message is produced on its own, one second later than the previous one in Kafka time, so
that each rolls a new segment (``segment.ms``: only closed segments are compacted) without a
sleep; :meth:`CompactedTopic.seal` closes the active segments; the only wait is for the broker's
cleaner (``log.cleaner.backoff.ms``, 15 s by default)."""

from __future__ import annotations

import io
import json
import time
from typing import Any

import fastavro

from kbqe_dagster.core.record.wire import encode_frame

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
    """A compacted topic of customers: its registered schemas, what was produced, and the topic
    read back."""

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
        out: list[tuple[int, int, int, dict | None]] = []
        try:
            for partition in range(PARTITIONS):
                _, high = consumer.get_watermark_offsets(TopicPartition(self.name, partition), 30)
                consumer.assign([TopicPartition(self.name, partition, 0)])
                position = 0
                while position < high:
                    msg = consumer.poll(10)
                    assert msg is not None and msg.error() is None, f"{self.name}[{partition}]"
                    offset, key, value = msg.offset(), msg.key(), msg.value()
                    assert offset is not None and key is not None, f"{self.name}[{partition}]"
                    record = None if value is None else _decoded(VALUE, value)
                    out.append((partition, offset, _decoded(KEY, key)["id"], record))
                    position = offset + 1
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
    record = fastavro.schemaless_reader(io.BytesIO(framed[5:]), fastavro.parse_schema(schema), None)
    assert isinstance(record, dict)
    return record
