"""Topics found by ``topic_patterns`` in Dagster: the definitions hold ``kafka/<topic>`` for
every topic Kafka had when they loaded; the backlog sensor lists the topics at every tick, so
a topic created later is staged with no reload and no edit, and its stage run resolves its
settings through the patterns; a topic deleted from Kafka is no longer polled."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import pytest
import yaml

from kbqe_dagster.definitions import build_definitions
from kbqe_dagster.defs.keys import TOPIC_TAG
from kbqe_dagster.defs.staging import assets as staging_assets
from kbqe_dagster.defs.staging import sensors
from kbqe_dagster.defs.staging.jobs import stage_run_config
from kbqe_dagster.resources.kafka import cluster as kafka_module
from kbqe_dagster.resources.kafka.clients import KafkaReadError, TopicMissing
from kbqe_dagster.staging.backlog import PartitionBacklog, TopicBacklog

PIPELINE = {
    "version": 1,
    "topics": [
        {
            "name": "billing.invoices",
            "event_time": {"fields": ["ts"]},
            "routing": {"mode": "static", "dataset": "billing", "table": "invoices"},
        }
    ],
    "topic_patterns": [
        {
            "match": r"shop\..*",
            "exclude": [r"shop\.tmp\..*"],
            "event_time": {"fields": ["ts"]},
            "routing": {"mode": "static", "dataset": "shop", "table": "{topic}"},
            "staging": {"max_messages_per_batch": 10},
        }
    ],
}


class FakeKafka:
    """The cluster's topic listing, as ``list_topic_names`` answers it; editable mid-test."""

    def __init__(self, *names: str) -> None:
        self.names = set(names)
        self.listings = 0

    def list_topic_names(self, settings, timeout: float = 10.0) -> frozenset[str]:
        self.listings += 1
        return frozenset(self.names)


@pytest.fixture
def kafka(monkeypatch) -> FakeKafka:
    fake = FakeKafka("billing.invoices", "shop.orders", "shop.tmp.x", "__consumer_offsets", "other")
    monkeypatch.setattr(kafka_module, "list_topic_names", fake.list_topic_names)
    return fake


@pytest.fixture
def defs(tmp_path: Path, kafka: FakeKafka, monkeypatch) -> dg.Definitions:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(PIPELINE))
    monkeypatch.setenv("KBQE_STAGING_URL", str(tmp_path / "staging"))
    (tmp_path / "staging").mkdir()
    return build_definitions(str(path), env="local")


def kafka_keys(defs: dg.Definitions) -> set[str]:
    return {
        spec.key.path[1] for spec in defs.resolve_all_asset_specs() if spec.key.path[0] == "kafka"
    }


def test_the_definitions_hold_an_asset_per_listed_and_discovered_topic(defs) -> None:
    assert kafka_keys(defs) == {"billing.invoices", "shop.orders"}
    specs = {s.key: s for s in defs.resolve_all_asset_specs()}
    orders = specs[dg.AssetKey(["kafka", "shop.orders"])]
    assert orders.metadata["topic_pattern"] == r"shop\..*"
    assert dg.AssetKey(["bigquery", "shop", "shop_orders"]) in specs  # its static table
    staging = defs.resolve_assets_def("staging")
    assert dg.AssetKey(["kafka", "shop.orders"]) in staging.dependency_keys


def test_ops_see_the_topics_the_definitions_were_built_from(defs, kafka) -> None:
    kafka.names.add("shop.items")  # created after the definitions loaded
    config = defs.resources["pipeline"].load()
    assert [t.name for t in config.topics] == ["billing.invoices", "shop.orders"]
    assert config.allowed_destinations.allows("shop", "shop_orders")


def test_a_pipeline_without_patterns_never_lists_kafka(tmp_path: Path, kafka) -> None:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump({**PIPELINE, "topic_patterns": None}))
    defs = build_definitions(str(path), env="local")
    assert kafka_keys(defs) == {"billing.invoices"} and kafka.listings == 0


def test_kafka_out_of_reach_at_load_leaves_the_listed_topics(tmp_path: Path, monkeypatch) -> None:
    def down(settings, timeout: float = 10.0):
        raise KafkaReadError("listing the topics of 127.0.0.1:1: timed out")

    monkeypatch.setattr(kafka_module, "list_topic_names", down)
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(PIPELINE))
    assert kafka_keys(build_definitions(str(path), env="local")) == {"billing.invoices"}


def backlog_of(topic: str, lag: int) -> TopicBacklog:
    return TopicBacklog(topic, (PartitionBacklog(0, 0, lag, 0, lag),), None)


def tick(defs: dg.Definitions, monkeypatch, lags: dict[str, int | Exception]) -> dg.SensorResult:
    polled = []

    def fake_backlog(store, settings, topics, **kwargs):
        polled.extend(topics)
        return {
            topic: lags[topic]
            if isinstance(lags[topic], Exception)
            else backlog_of(topic, lags[topic])
            for topic in topics
        }

    monkeypatch.setattr(sensors, "fleet_backlog", fake_backlog)
    with dg.instance_for_test() as instance:
        context = dg.build_sensor_context(instance=instance, resources=defs.resources)
        result = sensors.kafka_backlog_sensor(context)
    result.polled = polled
    return result


def test_a_topic_created_after_the_definitions_is_staged_at_the_next_tick(
    defs, kafka, monkeypatch
) -> None:
    assert "shop.items" not in kafka_keys(defs)
    kafka.names.add("shop.items")
    result = tick(defs, monkeypatch, {"billing.invoices": 0, "shop.orders": 0, "shop.items": 10})
    assert result.polled == ["billing.invoices", "shop.items", "shop.orders"]
    [request] = result.run_requests
    assert request.tags[TOPIC_TAG] == "shop.items"
    assert request.run_config == stage_run_config("shop.items")
    assert request.run_key == "shop.items|0=0|0"
    observed = {e.asset_key.path[1] for e in result.asset_events}
    assert observed == {"billing.invoices", "shop.orders", "shop.items"}


def test_a_deleted_topic_is_no_longer_polled(defs, kafka, monkeypatch) -> None:
    kafka.names.discard("shop.orders")
    result = tick(defs, monkeypatch, {"billing.invoices": 0})
    assert result.polled == ["billing.invoices"] and result.run_requests == []


def test_a_topic_deleted_between_listing_and_reading_is_skipped_for_this_tick(
    defs, kafka, monkeypatch
) -> None:
    result = tick(
        defs, monkeypatch, {"billing.invoices": 0, "shop.orders": TopicMissing("shop.orders")}
    )
    observed = {e.asset_key.path[1]: e.metadata["missing"].value for e in result.asset_events}
    assert observed == {"billing.invoices": False, "shop.orders": True}
    assert result.run_requests == []
    assert result.skip_reason.skip_message.startswith("topic 'shop.orders' does not exist in Kafka")


def test_a_listed_topic_kafka_does_not_hold_is_skipped_and_the_others_served(
    defs, monkeypatch
) -> None:
    result = tick(
        defs, monkeypatch, {"billing.invoices": TopicMissing("billing.invoices"), "shop.orders": 10}
    )
    [request] = result.run_requests
    assert request.tags[TOPIC_TAG] == "shop.orders"
    observed = {e.asset_key.path[1]: e.metadata["missing"].value for e in result.asset_events}
    assert observed == {"billing.invoices": True, "shop.orders": False}


class _Resolved(Exception):
    """Raised in place of staging: what the stage run resolved, before Spark starts."""


def test_the_stage_run_of_a_topic_newer_than_the_definitions_resolves_its_settings(
    defs, kafka, monkeypatch
) -> None:
    seen = {}

    def capture(**kwargs):
        seen.update(kwargs)
        raise _Resolved

    monkeypatch.setattr(staging_assets, "stage_context", capture)
    kafka.names.add("shop.late")
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("stage_job").execute_in_process(
            run_config=stage_run_config("shop.late"),
            instance=instance,
            raise_on_error=False,
            tags={TOPIC_TAG: "shop.late"},
        )
    assert not result.success  # stopped on purpose, before Spark
    assert seen["topic_name"] == "shop.late"
    pipeline = seen["pipeline"]
    assert pipeline.topic("shop.late").routing.table == "shop_late"
    assert pipeline.router("shop.late").allowed.allows("shop", "shop_late")
    assert pipeline.topic("shop.late").staging.max_messages_per_batch == 10


def test_a_keyed_pattern_gives_each_discovered_topic_its_keyed_assets(
    tmp_path, monkeypatch
) -> None:
    fake = FakeKafka("dbserver1.inventory.customers")
    monkeypatch.setattr(kafka_module, "list_topic_names", fake.list_topic_names)
    path = tmp_path / "pipeline.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topic_patterns": [
                    {
                        "match": r"dbserver1\.inventory\..*",
                        "format": "debezium",
                        "keyed": {"deletes": "soft", "history": True},
                        "routing": {"mode": "static", "dataset": "inventory", "table": "{topic}"},
                    }
                ],
            }
        )
    )
    defs = build_definitions(str(path), env="local")
    keys = {s.key.to_user_string() for s in defs.resolve_all_asset_specs()}
    table = "bigquery/inventory/dbserver1_inventory_customers"
    assert {
        table,
        f"{table}_changelog",
        f"{table}_history",
        "kafka/dbserver1.inventory.customers",
    } <= keys
    assert defs.resolve_job_def("merge_keyed_tables_job") is not None
