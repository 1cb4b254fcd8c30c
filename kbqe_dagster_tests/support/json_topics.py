"""Topics of one test (``disco.<run>.*`` and names that match no pattern) holding JSON orders
(``SCHEMA``), created, produced to and deleted on a Kafka cluster: what the topic-discovery
and missing-topic tests share."""

from __future__ import annotations

import json
import time

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbqe_dagster.resources.kafka.clients import CLIENT_LOG

SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "disco",
    "fields": [
        {"name": "n", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


class Cluster:
    """Topics of this test only (``disco.<run>.*`` and one non-matching name)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.admin = AdminClient({"bootstrap.servers": bootstrap, "logger": CLIENT_LOG})
        self.producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOG})
        self.created: list[str] = []

    def create(self, topic: str, messages: int) -> None:
        self.admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])[
            topic
        ].result(30)
        self.created.append(topic)
        self.produce(topic, range(messages))

    def produce(self, topic: str, numbers: range) -> None:
        for n in numbers:
            value = {"n": n, "at": 1_726_238_205_000 + n}
            self.producer.produce(topic, json.dumps(value).encode(), partition=n % 2)
        assert self.producer.flush(30) == 0

    def delete(self, topic: str) -> None:
        """Delete ``topic`` and wait until the cluster no longer lists it."""
        self.admin.delete_topics([topic])[topic].result(30)
        self.created.remove(topic)
        deadline = time.monotonic() + 30
        while topic in self.admin.list_topics(timeout=10).topics:
            assert time.monotonic() < deadline, f"{topic} still listed 30s after its deletion"
            time.sleep(0.5)

    def delete_all(self) -> None:
        if self.created:
            for future in self.admin.delete_topics(self.created).values():
                future.result(30)
