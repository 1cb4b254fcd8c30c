"""``kbqe health`` on the local stack with a configured topic Kafka does not hold: it stays
healthy (exit 0: a topic not created yet is a normal state) and says the ``kafka`` check is
degraded, naming the missing topic and not the one that exists."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from kbqe_dagster_tests.kbqe_run import KBQE, cli_env
from kbqe_dagster_tests.support.json_topics import SCHEMA, Cluster

pytestmark = pytest.mark.integration


def test_health_is_degraded_naming_the_missing_topic(
    local_stack, local_endpoints, tmp_path
) -> None:
    run = uuid.uuid4().hex[:8]
    present, absent = f"mtse.{run}.present", f"mtse.{run}.absent"
    cluster = Cluster(local_endpoints.kafka_bootstrap)
    cluster.create(present, 1)
    try:
        staging = tmp_path / "staging"
        staging.mkdir()
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
                        "routing": {"mode": "static", "dataset": "mtse", "table": "t"},
                    }
                    for name in (present, absent)
                ],
            },
            str(staging),
        )
        done = subprocess.run(
            [KBQE, "health", "--json"], env=env, capture_output=True, text=True, timeout=120
        )
    finally:
        cluster.delete_all()

    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    doc = json.loads(done.stdout)
    assert doc["healthy"] is True and doc["degraded"] == ["kafka"]
    kafka = doc["checks"]["kafka"]
    assert kafka["ok"] is True and kafka["degraded"] is True
    assert kafka["detail"].endswith(f"not staged until they exist): {absent}")
    assert present not in kafka["detail"]
