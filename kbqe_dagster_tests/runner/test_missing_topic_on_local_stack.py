"""``kbqe run --until-idle`` on the local stack with a configured topic Kafka does not hold yet:
the topic that exists is staged and loaded, the missing one is reported (one progress line and
``missing`` in its totals) and fails nothing: exit 0. Once created, the next run stages it."""

from __future__ import annotations

import json
import uuid

import pytest

from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.resources.kafka.clients import TopicMissing
from kbqe_dagster_tests.kbqe_run import cli_env, drop_datasets, until_idle
from kbqe_dagster_tests.support.json_topics import SCHEMA, Cluster

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_a_missing_topic_is_reported_and_the_others_staged_and_loaded(
    local_stack, local_endpoints, tmp_path
) -> None:
    run = uuid.uuid4().hex[:8]
    present, absent = f"mtse.{run}.present", f"mtse.{run}.absent"
    dataset = f"mtse_{run}"
    env = cli_env(
        tmp_path,
        {
            "version": 1,
            "topics": [
                {
                    "name": name,
                    "format": "json",
                    "schema": SCHEMA,
                    "event_time": {"fields": ["at"]},
                    "routing": {
                        "mode": "static",
                        "dataset": dataset,
                        "table": name.rsplit(".", 1)[1],
                    },
                }
                for name in (absent, present)
            ],
            "dead_letter": {"dataset": f"{dataset}_dead", "table": "dead_letters"},
        },
        f"gs://{LOCAL_BUCKET}/mtse-{run}",
    )
    cluster, client = Cluster(local_endpoints.kafka_bootstrap), local_bigquery_client()
    cluster.create(present, 30)
    try:
        first = until_idle(env)
        report = json.loads(first.stdout)
        assert report["ok"] is True and report["error"] is None
        assert report["topics"][present]["staged"] == 30
        assert "missing" not in report["topics"][present]
        assert report["topics"][absent] == {
            "staged": 0,
            "dead_lettered": 0,
            "tombstones": 0,
            "messages": 0,
            "stage_runs": 0,
            "missing": str(TopicMissing(absent)),
        }
        skipped = [
            line for line in first.stderr.splitlines() if f"skipped: topic '{absent}'" in line
        ]
        assert len(skipped) == 1, first.stderr[-3000:]  # once, not once per round
        table = f"{dataset}.present"
        assert [r["c"] for r in client.query(f"SELECT COUNT(*) c FROM `{table}`").result()] == [30]

        cluster.create(absent, 12)
        second = json.loads(until_idle(env).stdout)
        assert second["ok"] is True
        assert {t: totals["staged"] for t, totals in second["topics"].items()} == {
            present: 0,
            absent: 12,
        }
        assert "missing" not in second["topics"][absent]
    finally:
        cluster.delete_all()
        drop_datasets(client, dataset, f"{dataset}_dead")
