"""``topic_patterns`` end to end on the local stack, with no hand work: a pipeline file that
lists no topic; two topics created in Kafka that its pattern matches and one it does not;
``kbqe run --until-idle`` stages and loads both matching topics into their own tables of the
BigQuery emulator and leaves the other alone. A third matching topic created afterwards is
picked up by the next ``kbqe run --until-idle`` with no edit of the file, and each second run
is idle. A topic deleted from Kafka after its messages were staged is no longer polled, and
its staged data still loads. The time from creating a topic to its first rows in the emulator
is measured."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster_tests.kbqe_run import until_idle
from kbqe_dagster_tests.support.json_topics import SCHEMA, Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def discovery(local_stack, local_endpoints, tmp_path):
    run = uuid.uuid4().hex[:8]
    prefix, dataset, dead = f"disco.{run}.", f"disco_{run}", f"disco_dead_{run}"
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topic_patterns": [
                    {
                        "match": rf"disco\.{run}\..*",
                        "format": "json",
                        "schema": SCHEMA,
                        "event_time": {"fields": ["at"]},
                        "routing": {"mode": "static", "dataset": dataset, "table": "{topic}"},
                        "staging": {"max_messages_per_batch": 10},  # due at once for the sensor
                    }
                ],
                "dead_letter": {"dataset": dead, "table": "dead_letters"},
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
        "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/disco-{run}",
        "DAGSTER_HOME": str(home),
    }
    cluster = Cluster(local_endpoints.kafka_bootstrap)
    client = local_bigquery_client()
    yield run, prefix, dataset, env, cluster, client
    cluster.delete_all()
    for name in (dataset, dead):
        client.delete_dataset(name, delete_contents=True, not_found_ok=True)


def kbqe_run(env: dict) -> dict:
    done = until_idle(env)
    return json.loads(done.stdout)


STAGE_ONLY = """
import sys
from kbqe_dagster.runner.in_process import in_process_pipeline
with in_process_pipeline() as pipeline:
    [outcome] = pipeline.stage(pipeline.backlogs([sys.argv[1]]))
assert outcome.ok and outcome.records == int(sys.argv[2]), outcome
"""


def stage_only(env: dict, topic: str, messages: int = 5) -> None:
    """One stage run of ``topic``, recorded in the test's Dagster instance, and no load."""
    done = subprocess.run(
        [sys.executable, "-c", STAGE_ONLY, topic, str(messages)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]


def staged(report: dict) -> dict[str, int]:
    return {topic: t["staged"] for topic, t in report["topics"].items()}


def rows(client, dataset: str, topic: str) -> list[int]:
    table = topic.replace(".", "_")
    return sorted(r["n"] for r in client.query(f"SELECT n FROM `{dataset}.{table}`").result())


def test_topics_matching_a_pattern_are_staged_and_loaded_with_no_edit(discovery) -> None:
    run, prefix, dataset, env, cluster, client = discovery
    orders, items, other = f"{prefix}orders", f"{prefix}items", f"nodisco.{run}.orders"
    started = time.monotonic()
    cluster.create(orders, 30)
    cluster.create(items, 20)
    cluster.create(other, 5)

    first = kbqe_run(env)
    first_rows_s = time.monotonic() - started
    assert staged(first) == {orders: 30, items: 20}  # the non-matching topic is not there
    assert rows(client, dataset, orders) == list(range(30))
    assert rows(client, dataset, items) == list(range(20))
    assert staged(kbqe_run(env)) == {orders: 0, items: 0}

    late = f"{prefix}late"
    created = time.monotonic()
    cluster.create(late, 12)
    third = kbqe_run(env)
    late_rows_s = time.monotonic() - created
    assert staged(third) == {orders: 0, items: 0, late: 12}
    assert rows(client, dataset, late) == list(range(12))
    assert staged(kbqe_run(env)) == {orders: 0, items: 0, late: 0}
    tables = {t.table_id for t in client.list_tables(dataset)}
    assert tables == {orders.replace(".", "_"), items.replace(".", "_"), late.replace(".", "_")}

    # Staged, then deleted from Kafka before any load: no longer polled, its data still loads.
    cluster.produce(items, range(20, 25))
    stage_only(env, items)
    cluster.delete(items)
    after = kbqe_run(env)
    assert staged(after) == {orders: 0, late: 0}
    assert rows(client, dataset, items) == list(range(25))
    print(
        f"\ntopic creation to first rows via kbqe run: first two topics {first_rows_s:.1f}s, "
        f"the late topic {late_rows_s:.1f}s"
    )


SENSED = """
import json, sys, time
import dagster as dg
from kbqe_dagster.definitions import build_definitions
from kbqe_dagster.defs.staging.sensors import kafka_backlog_sensor
from kbqe_dagster.runner.in_process import execute_job, stage_outcome
from kbqe_dagster_tests.support.json_topics import Cluster

topic, bootstrap = sys.argv[1:3]
defs = build_definitions()  # the code location, loaded before the topic exists
assets = sorted(s.key.path[1] for s in defs.resolve_all_asset_specs() if s.key.path[0] == "kafka")
created = time.monotonic()
Cluster(bootstrap).create(topic, 12)
with dg.DagsterInstance.get() as instance:
    tick = kafka_backlog_sensor(dg.build_sensor_context(instance=instance, resources=defs.resources))
    [request] = [r for r in tick.run_requests if r.tags["kbqe/topic"] == topic]
    run = execute_job(defs, instance, "stage_job", request.run_config, request.tags)
print(json.dumps({"assets": assets, "run_key": request.run_key, "ok": run.ok, "error": run.error,
                  "records": stage_outcome(topic, run).records,
                  "staged_s": time.monotonic() - created}))
"""


def test_a_topic_created_after_the_definitions_loaded_is_staged_by_their_sensor(
    discovery,
) -> None:
    # Dagster's path, without a reload: definitions built, then the topic created; one tick
    # of their backlog sensor over the real Kafka requests its stage run, which stages it.
    run, prefix, dataset, env, cluster, client = discovery
    topic = f"{prefix}sensed"
    cluster.created.append(topic)  # deleted by the fixture
    done = subprocess.run(
        [sys.executable, "-c", SENSED, topic, cluster.bootstrap],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    sensed = json.loads(done.stdout.strip().splitlines()[-1])
    assert topic not in sensed["assets"]
    assert sensed["run_key"] == f"{topic}|0=0,1=0|0"
    assert sensed["ok"], sensed["error"]
    assert sensed["records"] == 12
    assert staged(kbqe_run(env)) == {topic: 0}  # staged already; this run loads it
    assert rows(client, dataset, topic) == list(range(12))
    print(f"\ntopic creation to staged by the sensor's run: {sensed['staged_s']:.1f}s")
