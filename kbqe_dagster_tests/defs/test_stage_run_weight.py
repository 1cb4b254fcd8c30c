"""A stage run's processes import only what staging uses (issue 42).

Every process that loads the definitions (a Dagster run worker, ``kbqe run``) and every Python
worker of a stage run (which unpickles the stage context: the delivery sink and its table
settings) once imported dagster-gcp, google-cloud-bigquery and, through BigQuery's read
client, pandas, numpy and pyarrow: ~110 MB in the run worker and ~170 MB in each Python
worker, for a stage run that used none of them (bench/bench_stage_run.py: the whole tree
810 MB of PSS at 100,000 messages). Google's clients are imported where a client is built.
Each probe runs in a fresh interpreter: this test process has imported everything.
"""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.delivery.sink import stage_run_sink
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stage_context

REPO = Path(__file__).resolve().parents[2]
HEAVY = (
    "dagster_gcp",
    "google.cloud.bigquery",
    "google.cloud.bigquery_storage_v1",
    "google.cloud.storage",
    "googleapiclient",
    "grpc",
    "pandas",
    "numpy",
    "pyarrow",
)
"""Packages a stage run never calls: BigQuery's clients and what they import."""
DRIVER_SPARED = ("confluent_kafka.schema_registry", "authlib", "requests")
"""Packages a stage run's driver never calls: the registry client (its tasks build it, in the
workers, whose daemon preloads it) and the webhook's HTTP client (the load job's)."""

DEFINITIONS_PROBE = """
import json, sys
from kbqe_dagster.definitions import build_definitions
from kbqe_dagster.defs.staging.jobs import stage_job
for env in ("local", "gcp"):
    build_definitions(sys.argv[1], env=env).resolve_job_def(stage_job.name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {p.split(".")[0] for p in sys.argv[2:]})))
"""

TASK_PROBE = """
import json, pickle, sys
from kbqe_dagster.resources.spark_daemon import PRELOADED
for module in PRELOADED:
    __import__(module)
context = pickle.load(sys.stdin.buffer)
assert context.sink is not None
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in {"dagster", "google", "pandas", "numpy", "pyarrow", "grpc", "dagster_gcp"})))
"""


def _heavy(imported: list[str], heavy: tuple[str, ...] = HEAVY) -> list[str]:
    return [m for m in imported if any(m == h or m.startswith(h + ".") for h in heavy)]


def test_loading_the_definitions_imports_no_client_a_stage_run_never_calls() -> None:
    # Both environments' definitions in one interpreter (its start and Dagster's import are
    # most of the test's time); gcp's add the gcs resource and read the variables below.
    environ = {
        **os.environ,
        "KBQE_STAGING_URL": "gs://acme-staging/kbqe",
        "KBQE_GCP_PROJECT": "acme-prod",
        "KBQE_KAFKA_BOOTSTRAP_SERVERS": "broker:9093",
        "KBQE_SCHEMA_REGISTRY_URL": "https://registry:8081",
        "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
    }
    result = subprocess.run(
        [sys.executable, "-c", DEFINITIONS_PROBE, str(REPO / "examples" / "pipeline.yaml")]
        + ["google", "grpc", "pandas", "numpy", "pyarrow", "dagster_gcp", "googleapiclient"]
        + ["confluent_kafka", "authlib", "requests"],
        capture_output=True,
        text=True,
        timeout=300,
        env=environ,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    imported = json.loads(result.stdout.splitlines()[-1])
    assert _heavy(imported, HEAVY + DRIVER_SPARED) == []
    # Control: the probe sees Google's packages when they are imported (the staging area's
    # Avro-to-Protobuf rows import google.protobuf, which is small and stays).
    assert "google.protobuf" in imported and "confluent_kafka" in imported


def test_a_stage_task_unpickles_its_context_without_dagster_or_a_bigquery_client() -> None:
    pipeline = parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": "orders",
                    "routing": {"mode": "static", "dataset": "sales", "table": "orders"},
                    "event_time": {"kafka_timestamp_fallback": True},
                }
            ],
        },
        source="test",
    )
    # As the stage asset builds it: the delivery sink, with the bigquery resource's settings.
    context = stage_context(
        KafkaSettings("broker:9093"),
        RegistrySettings("https://registry:8081"),
        StagingLocation("gs://acme-staging/kbqe"),
        pipeline,
        "orders",
        sink=stage_run_sink(pipeline, BigQueryResource(project="acme-prod")),
    )
    result = subprocess.run(
        [sys.executable, "-c", TASK_PROBE],
        input=pickle.dumps(context),
        capture_output=True,
        timeout=300,
        env={
            **os.environ,
            "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
        },
    )
    assert result.returncode == 0, result.stderr.decode()[-3000:]
    imported = json.loads(result.stdout.decode().splitlines()[-1])
    assert _heavy(imported, (*HEAVY, "dagster", "google.cloud", "google.api_core")) == []
