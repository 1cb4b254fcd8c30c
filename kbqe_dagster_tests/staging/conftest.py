"""Fixtures of the stage-job tests: a demo topic with known messages on the real local
Kafka, and a pipeline config pointing at it (``spark_context`` is in the top conftest)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import pytest

from kbqe_dagster.core.config.pipeline import PipelineConfig, parse_pipeline_config
from kbqe_dagster.demo.samples import (
    SampleMessage,
    placed_bad,
    placed_good,
    produce,
    register_schemas,
    sample_messages,
)
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stage_context
from kbqe_dagster.staging.context import StageContext


def pipeline_for(topic: str, **topic_overrides) -> PipelineConfig:
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": topic,
                    "routing": {"mode": "fields"},
                    "event_time": {"fields": ["eventTime", "occurredAt"]},
                    **topic_overrides,
                }
            ],
            "allowed_destinations": ["acme_sales.*", "acme_web.*"],
            "staging": {"max_messages_per_range": 2_000},
        },
        source="test",
    )


@dataclass
class DemoTopic:
    topic: str
    placed: dict[tuple[int, int], SampleMessage]
    kafka: KafkaSettings
    registry: RegistrySettings

    def context(self, staging: StagingLocation, **topic_overrides) -> StageContext:
        return stage_context(
            self.kafka,
            self.registry,
            staging,
            pipeline_for(self.topic, **topic_overrides),
            self.topic,
        )

    @property
    def good(self) -> dict[tuple[int, int], SampleMessage]:
        return placed_good(self.placed)

    @property
    def bad(self) -> dict[tuple[int, int], SampleMessage]:
        return placed_bad(self.placed)


def make_demo_topic(endpoints, count: int, partitions: int = 3) -> DemoTopic:
    from confluent_kafka.admin import AdminClient, NewTopic

    # Dots in the name on purpose: names are parsed from the right.
    topic = f"com.acme.events.t{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(30)
    ids = register_schemas(endpoints.registry_url)
    placed = produce(endpoints.kafka_bootstrap, topic, sample_messages(count, ids), partitions)
    return DemoTopic(
        topic,
        placed,
        KafkaSettings(endpoints.kafka_bootstrap),
        RegistrySettings(endpoints.registry_url),
    )


@pytest.fixture(scope="module")
def demo_topic(local_stack, local_endpoints) -> DemoTopic:
    return make_demo_topic(local_endpoints, count=10_000)


@pytest.fixture
def gcs_staging(local_endpoints) -> StagingLocation:
    return StagingLocation(
        f"gs://{LOCAL_BUCKET}/test-{uuid.uuid4().hex[:8]}", local_endpoints.gcs_url, LOCAL_PROJECT
    )
