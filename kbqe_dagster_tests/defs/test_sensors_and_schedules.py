"""The Dagster decisions that start every run, under test with Dagster's own context builders:
the backlog sensor (run key, skip while a run of the topic from the same offsets is in flight,
nothing when nothing is due), the staging observation sensor (the one pending definition),
and the schedules' skip while their job is in flight."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml

from kbqe_dagster.defs.bigquery.schedules import skipping_schedule
from kbqe_dagster.defs.keys import FROM_OFFSETS_TAG, STAGING_KEY, TOPIC_TAG
from kbqe_dagster.defs.staging import sensors
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource, StagingResource
from kbqe_dagster.staging.backlog import PartitionBacklog, TopicBacklog

TOPIC = "com.acme.events"


@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance


@pytest.fixture
def resources(tmp_path: Path) -> dict:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topics": [
                    {
                        "name": TOPIC,
                        "event_time": {"fields": ["ts"]},
                        "staging": {"max_messages_per_batch": 100, "allowed_latency": "15m"},
                    }
                ],
                "allowed_destinations": ["sales.*"],
            }
        )
    )
    (tmp_path / "staging").mkdir()
    return {
        "pipeline": PipelineResource(config_path=str(pipeline)),
        "kafka": KafkaResource(bootstrap_servers="127.0.0.1:1"),
        "staging": StagingResource(url=str(tmp_path / "staging")),
    }


def backlog(lag: int, age_s: float | None = None) -> TopicBacklog:
    oldest = None if age_s is None else int((datetime.now(UTC).timestamp() - age_s) * 1000)
    return TopicBacklog(
        TOPIC, (PartitionBacklog(0, 0, 10 + lag, 10, lag), PartitionBacklog(1, 0, 4, 4, 0)), oldest
    )


def tick(instance, resources, monkeypatch, topic_backlog: TopicBacklog) -> dg.SensorResult:
    monkeypatch.setattr(
        sensors,
        "fleet_backlog",
        lambda store, settings, topics, **kwargs: {t: topic_backlog for t in topics},
    )
    context = dg.build_sensor_context(instance=instance, resources=resources)
    return sensors.kafka_backlog_sensor(context)


def test_a_full_batch_launches_one_run_keyed_by_topic_and_start_offsets(
    instance, resources, monkeypatch
) -> None:
    result = tick(instance, resources, monkeypatch, backlog(100))
    [request] = result.run_requests
    assert request.run_key == f"{TOPIC}|0=10,1=4|0"
    assert request.tags[TOPIC_TAG] == TOPIC and request.tags[FROM_OFFSETS_TAG] == "0=10,1=4"
    assert "max_messages_per_batch" in request.tags["kbqe/reason"]
    [observation] = result.asset_events
    assert observation.metadata["lag"].value == 100


def test_nothing_is_launched_when_nothing_is_due(instance, resources, monkeypatch) -> None:
    assert tick(instance, resources, monkeypatch, backlog(99, age_s=60)).run_requests == []
    assert tick(instance, resources, monkeypatch, backlog(0, age_s=10_000)).run_requests == []


def test_an_old_message_launches_a_run_before_the_batch_is_full(
    instance, resources, monkeypatch
) -> None:
    [request] = tick(instance, resources, monkeypatch, backlog(3, age_s=16 * 60)).run_requests
    assert "allowed_latency" in request.tags["kbqe/reason"]


def _run(
    instance, status: dg.DagsterRunStatus, job_name: str = "stage_job", tags: dict | None = None
) -> None:
    """A run of ``job_name`` recorded in the instance with ``status``."""
    job = dg.JobDefinition(graph_def=dg.GraphDefinition(name=job_name))
    instance.create_run_for_job(job, status=status, tags=tags)


def test_a_run_in_flight_from_the_same_offsets_is_not_launched_again(
    instance, resources, monkeypatch
) -> None:
    tags = {TOPIC_TAG: TOPIC, FROM_OFFSETS_TAG: "0=10,1=4"}
    _run(instance, dg.DagsterRunStatus.STARTED, tags=tags)
    assert tick(instance, resources, monkeypatch, backlog(100)).run_requests == []


def test_a_failed_run_from_the_same_offsets_is_retried_under_a_new_key(
    instance, resources, monkeypatch
) -> None:
    _run(
        instance, dg.DagsterRunStatus.FAILURE, tags={TOPIC_TAG: TOPIC, FROM_OFFSETS_TAG: "0=10,1=4"}
    )
    [request] = tick(instance, resources, monkeypatch, backlog(100)).run_requests
    assert request.run_key == f"{TOPIC}|0=10,1=4|1"


def test_the_staging_observation_reports_the_one_pending_definition(
    instance, resources, tmp_path: Path
) -> None:
    area = tmp_path / "staging"
    stem = f"{TOPIC}.0.sales.orders.1.0"
    (area / f"{stem}.avro").write_bytes(b"x" * 10)
    (area / f"{stem}.9.done").write_bytes(b"")
    (area / f"{TOPIC}.0.sales.orders.1.10.avro").write_bytes(b"y" * 7)  # uncommitted
    context = dg.build_sensor_context(instance=instance, resources=resources)
    [observation] = sensors.staging_observation_sensor(context).asset_events
    assert observation.asset_key == STAGING_KEY
    metadata = {k: v.value for k, v in observation.metadata.items()}
    assert (metadata["pending_files"], metadata["pending_bytes"]) == (1, 10)
    assert metadata["uncommitted_files"] == 1 and metadata["quarantined_files"] == 0
    assert metadata["oldest_pending_age_s"] >= 0


@dg.op
def _noop() -> None:
    pass


@dg.job
def some_job() -> None:
    _noop()


def test_a_schedule_skips_while_its_job_is_in_flight_and_runs_otherwise(instance) -> None:
    schedule = skipping_schedule("some", some_job, timedelta(minutes=5), "every 5m")
    context = dg.build_schedule_context(instance=instance)
    assert isinstance(schedule(context), dg.RunRequest)
    _run(instance, dg.DagsterRunStatus.STARTED, job_name="some_job")
    skipped = schedule(dg.build_schedule_context(instance=instance))
    assert isinstance(skipped, dg.SkipReason) and "still in flight" in skipped.skip_message
