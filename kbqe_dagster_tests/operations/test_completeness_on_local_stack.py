"""Completeness end to end on the local stack: a topic of three partitions, two with messages
and one idle, staged and loaded by ``kbqe run --until-idle``, which declares yesterday
complete; ``kbqe completeness --json`` then says so (the idle partition does not hold it
back). New messages on one partition, not loaded yet, make that partition the one holding today back, by exactly
their count."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG
from kbqe_dagster_tests.kbqe_run import drop_datasets, until_idle
from kbqe_dagster_tests.support.json_format import SCHEMA

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KBQE = str(Path(sys.executable).parent / "kbqe")
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def completeness_topic(local_stack, local_endpoints, tmp_path):
    run = uuid.uuid4().hex[:8]
    topic = f"completeness.clicks.{run}"
    admin = AdminClient(
        {"bootstrap.servers": local_endpoints.kafka_bootstrap, "logger": CLIENT_LOG}
    )
    admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])[topic].result(30)
    dataset, dead = f"completeness_{run}", f"completeness_dead_{run}"
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topics": [
                    {
                        "name": topic,
                        "format": "json",
                        "schema": SCHEMA,
                        "routing": {"mode": "static", "dataset": dataset, "table": "clicks"},
                        "event_time": {"fields": ["at"]},
                    }
                ],
                "dead_letter": {"dataset": dead, "table": "dead_letters"},
                "completeness": {"basis": "kafka_time", "lateness": "5m"},
            }
        )
    )
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "KBQE_ENV": "local",
        "KBQE_PIPELINE_CONFIG": str(pipeline),
        "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/completeness-{run}",
        "DAGSTER_HOME": str(home),
    }
    yield local_endpoints, topic, f"{dataset}.clicks", env
    client = local_bigquery_client()
    drop_datasets(client, dataset, dead)
    admin.delete_topics([topic])


def newest_expected():
    """With every partition caught up: the day before today, 5 minutes (the lateness) ago."""
    return (datetime.now(UTC) - timedelta(minutes=5)).date() - timedelta(days=1)


def produce(bootstrap: str, topic: str, partition: int, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOG})
    now_ms = int(time.time() * 1000)
    for i in range(count):
        record = {
            "datasetName": "x",
            "tableName": "y",
            "url": f"/p/{partition}/{i}",
            "at": now_ms + i,
            "user": None,
        }
        producer.produce(topic, json.dumps(record).encode(), partition=partition)
    assert producer.flush(30) == 0


def sensor_tick(env: dict, endpoints) -> list:
    """One ``completeness_sensor`` tick on the run's pipeline, staging area and Kafka."""
    import dagster as dg

    from kbqe_dagster.defs.completeness.sensors import completeness_sensor
    from kbqe_dagster.resources.configurable import (
        KafkaResource,
        PipelineResource,
        StagingResource,
    )

    resources = {
        "pipeline": PipelineResource(config_path=env["KBQE_PIPELINE_CONFIG"]),
        "kafka": KafkaResource(bootstrap_servers=endpoints.kafka_bootstrap),
        "staging": StagingResource(
            url=env["KBQE_STAGING_URL"], gcs_endpoint=endpoints.gcs_url, gcs_project=LOCAL_PROJECT
        ),
    }
    with dg.instance_for_test() as instance:
        result = completeness_sensor(
            dg.build_sensor_context(instance=instance, resources=resources)
        )
    return list(result.asset_events or [])


def completeness(env: dict, table: str, gcs: str) -> dict:
    # The CLI takes a gs:// staging URL to real GCS unless told the emulator's endpoint.
    done = subprocess.run(
        [KBQE, "completeness", "--table", table, "--json"],
        env={**env, "KBQE_GCS_ENDPOINT": gcs},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["tables"][table]


def test_an_idle_partition_does_not_hold_a_day_back_and_a_lagging_one_does(completeness_topic):
    endpoints, topic, table, env = completeness_topic
    produce(endpoints.kafka_bootstrap, topic, 0, 30)
    produce(endpoints.kafka_bootstrap, topic, 1, 20)  # partition 2 stays idle
    done = until_idle(env)

    yesterday = newest_expected()
    after_run = completeness(env, table, endpoints.gcs_url)
    assert newest_expected() == yesterday, "the day turned during the test: run it again"
    assert after_run["partitioning"] == "day" and after_run["basis"] == "kafka_time"
    assert after_run["newest_complete"] == yesterday.isoformat()
    assert after_run["held_back_by"] == [] and after_run["late_after_complete"] == 0
    assert after_run["partitions"] == 3

    # The run declared yesterday itself, as the sensor would have (one function for both):
    # the sensor, in process against the same systems, finds nothing left to declare.
    assert json.loads(done.stdout)["completeness"][table]["newly_complete"] == [
        yesterday.isoformat()
    ]
    assert sensor_tick(env, endpoints) == [], "declared once, by the run"

    produce(endpoints.kafka_bootstrap, topic, 1, 7)  # staged by nobody yet
    lagging = completeness(env, table, endpoints.gcs_url)
    assert lagging["newest_complete"] == yesterday.isoformat()
    assert [
        (h["topic"], h["partition"], h["behind_messages"], h["waiting_for"])
        for h in lagging["held_back_by"]
    ] == [(topic, 1, 7, "stage")]
    # Known seconds (not null) means the staged ranges' manifests carried the Kafka time they
    # reached: what partition 1 still needs for today is today's end + 5 min - that time.
    assert 0 < lagging["held_back_by"][0]["behind_seconds"] <= 86400 + 300
