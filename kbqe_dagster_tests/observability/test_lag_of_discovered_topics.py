"""The exporter's lag covers the topics ``topic_patterns`` take at each scrape, like the
backlog sensor; a listing that fails is Kafka's problem, reported as no topic readable."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.observability import lag as lag_module
from kbqe_dagster.observability.lag import NoTopicReadable, read_lag
from kbqe_dagster.resources.kafka import cluster as kafka_module
from kbqe_dagster.resources.kafka.clients import KafkaReadError, KafkaSettings
from kbqe_dagster.staging.backlog import PartitionBacklog, TopicBacklog

PIPELINE = parse_pipeline_config(
    {
        "version": 1,
        "topics": [{"name": "billing.invoices", "event_time": {"fields": ["ts"]}}],
        "topic_patterns": [{"match": r"shop\..*", "event_time": {"fields": ["ts"]}}],
        "allowed_destinations": ["shop.*", "billing.*"],
    }
)


def fake_backlog(store, kafka, topics, oldest_wanted) -> dict[str, TopicBacklog]:
    return {t: TopicBacklog(t, (PartitionBacklog(0, 0, 7, 3, 4),), None) for t in topics}


def test_lag_is_read_for_listed_and_discovered_topics(monkeypatch) -> None:
    monkeypatch.setattr(
        kafka_module,
        "list_topic_names",
        lambda settings, timeout=10.0: frozenset({"shop.orders", "other"}),
    )
    monkeypatch.setattr(lag_module, "fleet_backlog", fake_backlog)
    view = read_lag(None, KafkaSettings("127.0.0.1:1"), PIPELINE)
    assert sorted(b.topic for b in view.topics) == ["billing.invoices", "shop.orders"]


def test_a_failed_listing_means_no_topic_is_readable(monkeypatch) -> None:
    def down(settings, timeout=10.0):
        raise KafkaReadError("listing the topics of 127.0.0.1:1: timed out")

    monkeypatch.setattr(kafka_module, "list_topic_names", down)
    with pytest.raises(NoTopicReadable, match="listing topics: listing the topics of"):
        read_lag(None, KafkaSettings("127.0.0.1:1"), PIPELINE)


def test_one_topic_kafka_cannot_read_is_reported_and_the_others_still_are(monkeypatch) -> None:
    monkeypatch.setattr(
        kafka_module, "list_topic_names", lambda settings, timeout=10.0: frozenset({"shop.orders"})
    )

    def one_gone(store, kafka, topics, oldest_wanted):
        out = fake_backlog(store, kafka, topics, oldest_wanted)
        out["shop.orders"] = KafkaReadError("topic 'shop.orders' is not available: missing")
        return out

    monkeypatch.setattr(lag_module, "fleet_backlog", one_gone)
    view = read_lag(None, KafkaSettings("127.0.0.1:1"), PIPELINE)
    assert [b.topic for b in view.topics] == ["billing.invoices"]
    assert view.unreadable == {
        "shop.orders": "KafkaReadError: topic 'shop.orders' is not available: missing"
    }


def test_kafka_down_for_the_one_read_means_no_topic_is_readable(monkeypatch) -> None:
    monkeypatch.setattr(
        kafka_module, "list_topic_names", lambda settings, timeout=10.0: frozenset()
    )

    def down(store, kafka, topics, oldest_wanted):
        raise KafkaReadError("listing the topics of 127.0.0.1:1: timed out")

    monkeypatch.setattr(lag_module, "fleet_backlog", down)
    with pytest.raises(NoTopicReadable, match="billing.invoices: KafkaReadError: listing"):
        read_lag(None, KafkaSettings("127.0.0.1:1"), PIPELINE)
