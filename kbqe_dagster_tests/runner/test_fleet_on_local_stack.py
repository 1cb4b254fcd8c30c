"""A fleet of small topics end to end on the local stack: five topics found by a pattern,
``stage_runs.max_topics_per_run: 3``; ``kbqe run --until-idle`` stages them in two grouped
stage runs (not five), loads each topic's rows once into its own table, and a second run finds
nothing to do."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import dagster as dg
import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbqe_dagster.defs.keys import TOPICS_TAG
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KBQE = str(Path(sys.executable).parent / "kbqe")
REPO = Path(__file__).resolve().parents[2]
SCHEMA = {
    "type": "record",
    "name": "Ping",
    "namespace": "fleet",
    "fields": [
        {"name": "n", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
TOPICS = 5


@pytest.fixture
def fleet(local_stack, local_endpoints, tmp_path):
    run = uuid.uuid4().hex[:8]
    prefix = f"fleetrun{run}"
    topics = [f"{prefix}.t{i}" for i in range(TOPICS)]
    admin = AdminClient(
        {"bootstrap.servers": local_endpoints.kafka_bootstrap, "logger": CLIENT_LOG}
    )
    for future in admin.create_topics(
        [NewTopic(t, num_partitions=3, replication_factor=1) for t in topics]
    ).values():
        future.result(30)
    dataset = f"fleet_{run}"
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topic_patterns": [
                    {
                        "match": rf"{prefix}\..*",
                        "format": "json",
                        "schema": SCHEMA,
                        "event_time": {"fields": ["at"]},
                        "routing": {"mode": "static", "dataset": dataset, "table": "{topic}"},
                    }
                ],
                "dead_letter": {"dataset": f"dead_{run}", "table": "dead_letters"},
                "stage_runs": {"max_topics_per_run": 3},
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
        "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/fleet-{run}",
        "DAGSTER_HOME": str(home),
    }
    client = local_bigquery_client()
    yield local_endpoints, topics, dataset, env, home, client
    client.delete_dataset(dataset, delete_contents=True, not_found_ok=True)
    for future in admin.delete_topics(topics).values():
        future.result(30)


def kbqe_run(env: dict) -> dict:
    done = subprocess.run(
        [KBQE, "run", "--until-idle", "--json"],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_small_topics_share_stage_runs_and_each_row_loads_once(fleet) -> None:
    endpoints, topics, dataset, env, home, client = fleet
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap, "logger": CLIENT_LOG})
    sent = {t: 4 + 3 * i for i, t in enumerate(topics)}
    for topic, count in sent.items():
        for n in range(count):
            producer.produce(
                topic, json.dumps({"n": n, "at": 1_726_238_205_000 + n}).encode(), partition=n % 3
            )
    assert producer.flush(30) == 0

    first = kbqe_run(env)

    assert {t: first["topics"][t]["staged"] for t in topics} == sent
    with dg.DagsterInstance.from_config(str(home)) as instance:
        stage_runs = instance.get_runs(filters=dg.RunsFilter(job_name="stage_job"))
    # A partition's first range commits alone (it anchors the chain), so one round stages all.
    assert sorted(r.tags.get(TOPICS_TAG) for r in stage_runs) == [
        ",".join(topics[:3]),
        ",".join(topics[3:]),
    ]
    assert all(r.status == dg.DagsterRunStatus.SUCCESS for r in stage_runs)
    for topic, count in sent.items():
        table = f"{dataset}.{topic.replace('.', '_')}"
        rows = [
            tuple(r.values())
            for r in client.query_and_wait(
                f"SELECT _kafka_partition, _kafka_offset, n FROM `{table}`"
            )
        ]
        assert len(rows) == count and len(set(rows)) == count, table
        assert sorted(r[2] for r in rows) == list(range(count))

    second = kbqe_run(env)

    assert second["ok"] is True and second["runs"] == 0 and second["rounds"] == 1
    assert all(second["topics"][t]["staged"] == 0 for t in topics)
