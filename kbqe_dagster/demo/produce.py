"""Producing the demo's events (``demo/samples.py``) for ``kbqe produce-sample`` and
``kbqe demo``: realistic events on a local topic —
orders (two schema versions) and page views, plus one message of every bad-input kind.

The topic is created when missing, with an explicit partition count (the broker default of
one partition would hide per-partition behaviour); an existing topic keeps its partitions.
Schemas are registered idempotently, so running the command twice adds events, not schemas.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from kbqe_dagster.core.errors import OperatorCommandError
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG

# librdkafka's lines go to the logger every Kafka client of the package uses.
kafka_log = CLIENT_LOG

TOPIC_TIMEOUT_SECONDS = 10.0


@dataclass(frozen=True)
class SampleReport:
    topic: str
    partitions: int
    created_topic: bool
    schema_ids: dict[str, int]
    per_table: dict[str, int]
    """Good messages per destination ``dataset.table``."""
    per_reason: dict[str, int]
    """Bad messages per dead-letter reason they must get."""

    @property
    def total(self) -> int:
        return sum(self.per_table.values()) + sum(self.per_reason.values())

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partitions": self.partitions,
            "created_topic": self.created_topic,
            "schema_ids": dict(self.schema_ids),
            "produced": self.total,
            "per_table": dict(self.per_table),
            "per_reason": dict(self.per_reason),
        }


def ensure_topic(bootstrap_servers: str, topic: str, partitions: int) -> tuple[int, bool]:
    """The partition count of ``topic``, creating it with ``partitions`` when missing;
    returns (partitions, created)."""
    from confluent_kafka import KafkaError, KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    # librdkafka's connection chatter goes to our logger, not straight to stderr.
    admin = AdminClient({"bootstrap.servers": bootstrap_servers, "logger": kafka_log})
    try:
        existing = _partition_count(admin, topic)
        if existing is not None:
            return existing, False
        future = admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
        )[topic]
        try:
            future.result(timeout=TOPIC_TIMEOUT_SECONDS)
            return partitions, True
        except KafkaException as exc:
            if exc.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
        return _partition_count(admin, topic) or partitions, False
    except KafkaException as exc:
        raise OperatorCommandError(
            f"Kafka at {bootstrap_servers}: cannot create or describe topic {topic!r}: "
            f"{exc.args[0]} (is the broker running? `kbqe stack up kafka`)"
        ) from exc


def _partition_count(admin: Any, topic: str) -> int | None:
    meta = admin.list_topics(topic=topic, timeout=TOPIC_TIMEOUT_SECONDS)
    info = meta.topics.get(topic)
    if info is None or info.error is not None or not info.partitions:
        return None
    return len(info.partitions)


def produce_sample(
    bootstrap_servers: str,
    registry_url: str,
    *,
    topic: str,
    count: int,
    partitions: int = 3,
    seed: int = 7,
    clicks: int = 0,
) -> SampleReport:
    """Produce ``count`` good demo messages plus the bad ones to ``topic``, then ``clicks``
    clicks (``kbqe demo``'s Storage Write table, ``acme_web.clicks``)."""
    from kbqe_dagster.demo.samples import (
        click_messages,
        produce,
        register_click_schema,
        register_schemas,
        sample_messages,
    )
    from kbqe_dagster.resources.schema_registry import split_user_info

    if count < 0:
        raise OperatorCommandError(f"--count must be 0 or more, got {count}")
    if partitions < 1:
        raise OperatorCommandError(f"--partitions must be at least 1, got {partitions}")
    # Credentials written into the URL are split off so they are never printed or logged.
    url, auth = split_user_info(registry_url)
    try:
        ids = register_schemas(url, auth)
        if clicks:
            ids["clicks"] = register_click_schema(url, auth)
    except Exception as exc:  # noqa: BLE001 - the registry client raises many kinds
        raise OperatorCommandError(
            f"schema registry at {url}: cannot register the demo schemas: {exc} "
            "(is it running? `kbqe stack up apicurio`)"
        ) from exc
    actual, created = ensure_topic(bootstrap_servers, topic, partitions)
    messages = sample_messages(count, ids, seed=seed)
    if clicks:
        messages += click_messages(clicks, ids["clicks"], seed=seed)
    try:
        produce(bootstrap_servers, topic, messages, actual, {"logger": kafka_log})
    except RuntimeError as exc:
        raise OperatorCommandError(f"producing to {topic!r} at {bootstrap_servers}: {exc}") from exc
    per_table = Counter(".".join(m.expect_table) for m in messages if m.expect_table)
    per_reason = Counter(m.expect_reason for m in messages if m.expect_reason)
    return SampleReport(
        topic=topic,
        partitions=actual,
        created_topic=created,
        schema_ids=dict(sorted(ids.items())),
        per_table=dict(sorted(per_table.items())),
        per_reason=dict(sorted(per_reason.items())),
    )
