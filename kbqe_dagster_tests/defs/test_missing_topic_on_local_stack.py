"""A configured topic that does not exist in Kafka yet, against the real local Kafka: a normal
state, not an error. ``kafka_backlog_sensor`` (invoked with Dagster's own context builder) skips
it with a one-line reason naming it, records ``missing`` on its ``kafka/<topic>`` asset and
keeps serving the topic that exists; a stage run's preparation plans nothing for it and says
why, while the topic that exists is planned."""

from __future__ import annotations

import uuid
from pathlib import Path

import dagster as dg
import pytest
import yaml

from kbqe_dagster.core.protocol.offsets import StartPolicy
from kbqe_dagster.defs.keys import TOPIC_TAG
from kbqe_dagster.defs.staging.sensors import kafka_backlog_sensor
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource, StagingResource
from kbqe_dagster.resources.kafka.clients import KafkaSettings, TopicMissing
from kbqe_dagster.resources.staging_store import LocalStagingStore
from kbqe_dagster.staging.prepare import prepare_topic
from kbqe_dagster_tests.support.json_topics import SCHEMA, Cluster

pytestmark = pytest.mark.integration

BATCH = 20


@pytest.fixture
def topics(local_stack, local_endpoints):
    """``present`` (2 partitions, 30 messages) exists in Kafka; ``absent`` is configured only."""
    run = uuid.uuid4().hex[:8]
    present, absent = f"mtse.{run}.present", f"mtse.{run}.absent"
    cluster = Cluster(local_endpoints.kafka_bootstrap)
    cluster.create(present, 30)
    yield present, absent, cluster
    cluster.delete_all()


def resources(tmp_path: Path, bootstrap: str, names: list[str], batch: int) -> dict:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topics": [
                    {
                        "name": name,
                        "format": "json",
                        "schema": SCHEMA,
                        "event_time": {"fields": ["at"]},
                        "routing": {"mode": "static", "dataset": "mtse", "table": "t"},
                    }
                    for name in names
                ],
                "staging": {"max_messages_per_batch": batch, "allowed_latency": "15m"},
            }
        )
    )
    (tmp_path / "staging").mkdir()
    return {
        "pipeline": PipelineResource(config_path=str(pipeline)),
        "kafka": KafkaResource(bootstrap_servers=bootstrap),
        "staging": StagingResource(url=str(tmp_path / "staging")),
    }


def tick(resources: dict) -> dg.SensorResult:
    with dg.instance_for_test() as instance:
        return kafka_backlog_sensor(dg.build_sensor_context(instance=instance, resources=resources))


def observations(result: dg.SensorResult) -> dict[str, dict]:
    return {
        e.asset_key.path[1]: {k: v.value for k, v in e.metadata.items()}
        for e in result.asset_events
    }


def test_the_sensor_launches_the_topic_that_exists_and_marks_the_missing_one(
    tmp_path, local_endpoints, topics
) -> None:
    present, absent, _ = topics
    result = tick(resources(tmp_path, local_endpoints.kafka_bootstrap, [absent, present], BATCH))

    [request] = result.run_requests
    assert request.tags[TOPIC_TAG] == present
    seen = observations(result)
    assert seen[present]["missing"] is False and seen[present]["lag"] == 30
    assert seen[absent] == {"missing": True, "reason": str(TopicMissing(absent))}
    assert seen[absent]["reason"] == (
        f"topic '{absent}' does not exist in Kafka (not created yet, or deleted); not staged "
        "until it exists"
    )


def test_a_tick_that_launches_nothing_gives_the_missing_topic_as_its_skip_reason(
    tmp_path, local_endpoints, topics
) -> None:
    present, absent, _ = topics
    # Below the size trigger and younger than allowed_latency: nothing is due.
    result = tick(resources(tmp_path, local_endpoints.kafka_bootstrap, [present, absent], 1_000))

    assert result.run_requests == []
    assert result.skip_reason.skip_message == str(TopicMissing(absent))
    assert observations(result)[present]["lag"] == 30


def test_the_topic_once_created_is_observed_and_launched_at_the_next_tick(
    tmp_path, local_endpoints, topics
) -> None:
    present, absent, cluster = topics
    config = resources(tmp_path, local_endpoints.kafka_bootstrap, [absent], BATCH)
    first = tick(config)
    assert first.run_requests == [] and observations(first)[absent]["missing"] is True

    cluster.create(absent, 25)
    second = tick(config)

    [request] = second.run_requests
    assert request.tags[TOPIC_TAG] == absent
    assert observations(second)[absent]["missing"] is False
    assert observations(second)[absent]["lag"] == 25
    assert second.skip_reason is None


def test_a_stage_run_preparation_plans_nothing_for_a_missing_topic_and_says_why(
    tmp_path, local_endpoints, topics, caplog
) -> None:
    present, absent, _ = topics
    store = LocalStagingStore(tmp_path)
    kafka = KafkaSettings(local_endpoints.kafka_bootstrap)

    def prepare(topic: str):
        return prepare_topic(
            store,
            kafka,
            topic,
            max_messages_per_run=1_000,
            max_messages_per_range=1_000,
            start_policy=StartPolicy.EARLIEST,
        )

    with caplog.at_level("WARNING", logger="kbqe_dagster.staging.prepare"):
        missing = prepare(absent)
    found = prepare(present)

    assert (missing.missing, missing.plan.ranges) == (str(TopicMissing(absent)), ())
    assert [r.getMessage() for r in caplog.records] == [f"not staged: {TopicMissing(absent)}"]
    assert found.missing is None
    assert sorted((r.partition, r.start, r.end_exclusive) for r in found.plan.ranges) == [
        (0, 0, 15),
        (1, 0, 15),
    ]
