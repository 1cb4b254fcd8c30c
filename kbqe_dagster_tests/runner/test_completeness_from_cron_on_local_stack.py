"""Completeness without the daemon: ``kbqe run --until-idle`` from cron, on the local stack.

The sequence a cron user lives through — produce, run, produce late and current records,
look, run, look, run again — with:

- ``ds.orders`` fed by two topics: ``orders`` (3 partitions, the third empty until the second
  step) and ``refunds`` (1 partition), on ``kafka_time`` with 5 min lateness;
- ``ds.devices`` fed by ``devices`` on ``event_time`` with 1 h lateness.

Each run declares the days that became complete (in its ``--json``, in the kept state and as
``day_complete`` in its Dagster instance, as ``completeness_sensor`` would), counts the records
of a declared day loaded afterwards per table and day, and a declared day stays declared when
new messages wait, also in the partition that was empty: ``held_back_by`` then names exactly
the partitions with unloaded messages, by their count, and how long each still needs (known
for the empty one: it was seen caught up by the first run). Afterwards the sensor, on the same
systems, finds nothing left to declare: one state for both.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from datetime import time as day_time

import dagster as dg
import pytest
from confluent_kafka import Producer

from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG
from kbqe_dagster_tests.kbqe_run import KBQE, cli_env, create_topic, drop_datasets, until_idle
from kbqe_dagster_tests.support.json_format import SCHEMA

pytestmark = [pytest.mark.integration, pytest.mark.slow]

UTC = UTC
KAFKA_LATENESS = timedelta(minutes=5)
EVENT_LATENESS = timedelta(hours=1)


@pytest.fixture
def cron(local_stack, local_endpoints, tmp_path):
    now = datetime.now(UTC)
    if not day_time(1, 30) <= now.time() <= day_time(23, 0):
        # The expected days are fixed from the first step on; the whole sequence (a few
        # minutes) must not cross midnight UTC or the first 1 h 30 min after it (lateness).
        pytest.skip("too close to midnight UTC for this test's fixed days")
    run = uuid.uuid4().hex[:8]
    topics = {
        "orders": f"cron.orders.{run}",
        "refunds": f"cron.refunds.{run}",
        "devices": f"cron.devices.{run}",
    }
    create_topic(local_endpoints.kafka_bootstrap, topics["orders"], partitions=3)
    create_topic(local_endpoints.kafka_bootstrap, topics["refunds"], partitions=1)
    create_topic(local_endpoints.kafka_bootstrap, topics["devices"], partitions=1)
    dataset, dead = f"cron_{run}", f"cron_dead_{run}"

    def topic(name: str, table: str, **more) -> dict:
        return {
            "name": topics[name],
            "format": "json",
            "schema": SCHEMA,
            "routing": {"mode": "static", "dataset": dataset, "table": table},
            "event_time": {"fields": ["at"]},
            **more,
        }

    env = cli_env(
        tmp_path,
        {
            "version": 1,
            "topics": [
                topic("orders", "orders"),
                topic("refunds", "orders"),
                topic("devices", "devices", completeness={"basis": "event_time", "lateness": "1h"}),
            ],
            "dead_letter": {"dataset": dead, "table": "dead_letters"},
            "completeness": {"basis": "kafka_time", "lateness": "5m"},
        },
        f"gs://{LOCAL_BUCKET}/cron-{run}",
    )
    # `kbqe completeness` takes a gs:// staging URL to the emulator when told its endpoint.
    env["KBQE_GCS_ENDPOINT"] = local_endpoints.gcs_url
    yield local_endpoints, topics, dataset, env
    drop_datasets(local_bigquery_client(), dataset, dead)


def produce(bootstrap: str, topic: str, partition: int, at: list[datetime]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOG})
    for i, when in enumerate(at):
        record = {
            "datasetName": "x",
            "tableName": "y",
            "url": f"/{partition}/{i}",
            "at": int(when.timestamp() * 1000),
            "user": None,
        }
        producer.produce(topic, json.dumps(record).encode(), partition=partition)
    assert producer.flush(30) == 0


def run_json(env: dict) -> dict:
    return json.loads(until_idle(env).stdout)


def completeness(env: dict) -> dict:
    done = subprocess.run(
        [KBQE, "completeness", "--json"], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["tables"]


def held(table: dict) -> list[tuple[str, int, int, str]]:
    return [
        (h["topic"], h["partition"], h["behind_messages"], h["waiting_for"])
        for h in table["held_back_by"]
    ]


def day_complete_evaluations(env: dict, dataset: str, table: str) -> list[tuple[str, bool]]:
    """``day_complete`` evaluations recorded in the run's Dagster instance: (day, passed)."""
    key = dg.AssetCheckKey(dg.AssetKey(["bigquery", dataset, table]), "day_complete")
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        history = instance.event_log_storage.get_asset_check_execution_history(key, limit=50)
    return sorted(
        (
            r.event.dagster_event.event_specific_data.partition,
            r.event.dagster_event.event_specific_data.passed,
        )
        for r in history
    )


def test_cron_runs_declare_days_count_late_records_and_never_take_a_day_back(cron):
    endpoints, topics, dataset, env = cron
    bootstrap = endpoints.kafka_bootstrap
    orders, devices = f"{dataset}.orders", f"{dataset}.devices"
    now = datetime.now(UTC)
    today = now.date()
    yesterday = today - timedelta(days=1)
    late_at = datetime.combine(yesterday, day_time(12), tzinfo=UTC)

    # --- 1. produce, run: yesterday is declared for both tables -------------------------
    produce(bootstrap, topics["orders"], 0, [now] * 30)
    produce(bootstrap, topics["orders"], 1, [now] * 20)  # orders[2] stays empty
    produce(bootstrap, topics["refunds"], 0, [now] * 10)
    produce(bootstrap, topics["devices"], 0, [now] * 8)
    first_started = datetime.now(UTC)
    first = run_json(env)
    first_ended = datetime.now(UTC)

    assert first["tables"][orders]["rows_loaded"] == 60
    assert first["tables"][devices]["rows_loaded"] == 8
    assert set(first["completeness"]) == {orders, devices}
    for name, basis in ((orders, "kafka_time"), (devices, "event_time")):
        table = first["completeness"][name]
        assert (table["basis"], table["newest_complete"], table["newly_complete"]) == (
            basis,
            yesterday.isoformat(),
            [yesterday.isoformat()],
        )
        assert (table["held_back_by"], table["late_after_complete"]) == ([], 0)
    assert first["completeness"][orders]["topics"] == sorted([topics["orders"], topics["refunds"]])
    assert first["completeness"][orders]["partitions"] == 4
    for table in ("orders", "devices"):
        assert day_complete_evaluations(env, dataset, table) == [(yesterday.isoformat(), True)]

    # --- 2. late records of the declared day, current ones, the empty partition gets some --
    produce(bootstrap, topics["orders"], 0, [late_at] * 2 + [now] * 3)
    produce(bootstrap, topics["orders"], 2, [now] * 4)
    produce(bootstrap, topics["refunds"], 0, [late_at])
    produce(bootstrap, topics["devices"], 0, [late_at] * 3 + [now] * 2)

    waiting = completeness(env)
    for name in (orders, devices):
        assert waiting[name]["newest_complete"] == yesterday.isoformat(), "declared stays"
        assert waiting[name]["next_day"] == today.isoformat()
        assert waiting[name]["late_after_complete_by_day"] == {}, "nothing loaded yet"
    assert held(waiting[orders]) == [
        (topics["orders"], 0, 5, "stage"),
        (topics["orders"], 2, 4, "stage"),
        (topics["refunds"], 0, 1, "stage"),
    ]
    assert held(waiting[devices]) == [(topics["devices"], 0, 5, "stage")]
    # Each was seen caught up by the first run: what it still needs for today is known, today's
    # end plus its lateness minus that moment (the empty partition included).
    tomorrow = datetime.combine(today + timedelta(days=1), day_time(0), tzinfo=UTC)
    for name, lateness in ((orders, KAFKA_LATENESS), (devices, EVENT_LATENESS)):
        for h in waiting[name]["held_back_by"]:
            seconds = h["behind_seconds"]
            assert seconds is not None, f"{h['topic']}[{h['partition']}] unknown"
            assert (tomorrow + lateness - first_ended).total_seconds() - 1 <= seconds
            assert seconds <= (tomorrow + lateness - first_started).total_seconds() + 1

    # --- 3. run: the late records are counted per table and day, nothing taken back --------
    second = run_json(env)
    assert second["tables"][orders]["rows_loaded"] == 10
    assert second["tables"][devices]["rows_loaded"] == 5
    late = {orders: 3, devices: 3}
    for name in (orders, devices):
        table = second["completeness"][name]
        assert (table["newest_complete"], table["newly_complete"]) == (yesterday.isoformat(), [])
        assert table["held_back_by"] == []
        assert table["late_after_complete"] == late[name]
        assert table["late_after_complete_by_day"] == {yesterday.isoformat(): late[name]}

    after = completeness(env)
    for name in (orders, devices):
        assert after[name]["newest_complete"] == yesterday.isoformat()
        assert after[name]["held_back_by"] == []
        assert after[name]["late_after_complete_by_day"] == {yesterday.isoformat(): late[name]}

    # --- 4. run again as cron does, then the sensor on the same systems: one state ----------
    third = run_json(env)
    assert third["tables"] == {}
    for name in (orders, devices):
        assert third["completeness"][name]["newly_complete"] == []
        assert third["completeness"][name]["late_after_complete_by_day"] == {
            yesterday.isoformat(): late[name]
        }, "each late record is counted once"
    assert sensor_tick(env, endpoints) == [], "the runs declared what the sensor would"
    for table in ("orders", "devices"):
        assert day_complete_evaluations(env, dataset, table) == [(yesterday.isoformat(), True)]
    assert completeness(env) == after


def sensor_tick(env: dict, endpoints) -> list:
    """One ``completeness_sensor`` tick against the runs' instance, pipeline, staging, Kafka."""
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
    with dg.DagsterInstance.from_config(env["DAGSTER_HOME"]) as instance:
        result = completeness_sensor(
            dg.build_sensor_context(instance=instance, resources=resources)
        )
    return list(result.asset_events or [])
