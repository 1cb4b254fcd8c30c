"""A Debezium database onboarded by one pattern, end to end on the local stack: Debezium
writes one topic per source table, so a keyed ``topic_patterns`` entry (``format:
debezium``, ``table: "{topic}"``) turns each into its own current-state table with no
per-topic configuration. Two tables' topics are merged into their current tables by
``kbqe run --until-idle``; a third topic created afterwards (a table added to the connector)
is merged by the next run with no edit; each second run is idle."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest
import yaml

from kbqe_dagster.demo.debezium import ROW_COLUMNS, CustomersTable, DebeziumTopics, current_state
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster_tests.kbqe_run import until_idle

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 2


@pytest.fixture
def cdc(local_stack, local_endpoints, tmp_path):
    run = uuid.uuid4().hex[:8]
    prefix, dataset, dead = f"disco{run}.inventory.", f"disco_inv_{run}", f"disco_dead_{run}"
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topic_patterns": [
                    {
                        "match": rf"disco{run}\.inventory\..*",
                        "format": "debezium",
                        "keyed": {"deletes": "soft"},
                        "routing": {"mode": "static", "dataset": dataset, "table": "{topic}"},
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
        "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/disco-cdc-{run}",
        "DAGSTER_HOME": str(home),
    }
    client = local_bigquery_client()
    made: list[DebeziumTopics] = []

    def topics(*names: str) -> DebeziumTopics:
        made.append(
            DebeziumTopics(
                local_endpoints.kafka_bootstrap,
                local_endpoints.registry_url,
                [prefix + n for n in names],
                PARTITIONS,
            )
        )
        return made[-1]

    yield topics, dataset, env, client
    for topic_set in made:
        topic_set.delete()
    for name in (dataset, dead):
        client.delete_dataset(name, delete_contents=True, not_found_ok=True)


def kbqe_run(env: dict) -> dict:
    return json.loads(until_idle(env).stdout)


def current_rows(client, dataset: str, topic: str) -> set[tuple]:
    columns = ", ".join(f"`{c}`" if c != "phone" else "NULL AS phone" for c in ROW_COLUMNS)
    sql = (
        f"SELECT {columns}, _op, _source_ts_ms, _deleted, _kafka_partition, _kafka_offset "
        f"FROM `{dataset}.{topic.replace('.', '_')}`"
    )
    return {tuple(row) for row in client.query(sql).result()}


def test_one_keyed_pattern_onboards_every_table_of_a_debezium_database(cdc) -> None:
    topics, dataset, env, client = cdc
    table = CustomersTable(seed=16, partitions=PARTITIONS)
    table.snapshot(12)
    table.round(inserts=4, updates=6, deletes=2)
    first = topics("customers", "orders")
    first.produce(table)
    tombstones = sum(1 for c in table.changes if c.is_tombstone)

    report = kbqe_run(env)
    assert {t: r["staged"] for t, r in report["topics"].items()} == {
        t: len(table.changes) - tombstones for t in first.topics
    }
    for topic in first.topics:
        assert current_rows(client, dataset, topic) == current_state(first.produced[topic], False)
        assert f"{dataset}.{topic.replace('.', '_')}" in report["tables"]  # merged
    assert all(r["staged"] == 0 for r in kbqe_run(env)["topics"].values())

    later = topics("invoices")  # a table added to the connector: a new topic
    later.produce(table)
    report = kbqe_run(env)
    [topic] = later.topics
    assert report["topics"][topic]["staged"] == len(table.changes) - tombstones
    assert current_rows(client, dataset, topic) == current_state(later.produced[topic], False)
    assert all(r["staged"] == 0 for r in kbqe_run(env)["topics"].values())
