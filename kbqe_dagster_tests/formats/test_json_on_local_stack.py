"""A ``format: json`` topic end to end on the local stack: JSON values produced to Kafka,
staged on Spark, loaded into the BigQuery emulator field by field by ``kbqe run
--until-idle``, the bad ones in the dead-letter table with their reasons; run twice, the
second run changes nothing."""

from __future__ import annotations

import hmac
import json
import os
import shutil
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer

from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG
from kbqe_dagster_tests.kbqe_run import create_topic, drop_datasets, until_idle
from kbqe_dagster_tests.support.json_format import SCHEMA

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(params=["on", "off"], ids=["kernel", "python"])
def json_topic(request, local_stack, local_endpoints, tmp_path):
    """A JSON topic staged with the native kernel (when built) or, with the switch off, on
    the Python path: the same rows and dead letters either way."""
    yield from _json_topic(request.param, local_endpoints, tmp_path)


HMAC_ENV = "KBQE_JSON_E2E_HMAC_KEY"
MASKS_AND_PARTS = [
    {"mask": "url", "key_env": HMAC_ENV},
    {"add": "trace", "header": "trace"},
    {"add": "off", "message": "offset"},
    {"add": "k", "message": "key"},
]


@pytest.fixture(params=["on", "off"], ids=["kernel", "python"])
def masked_json_topic(request, local_stack, local_endpoints, tmp_path):
    """The JSON topic with an hmac mask and parts of the message added (MASKS_AND_PARTS),
    which the native kernel (when built with rewrites) stages itself, through the native
    consumer's key and headers."""
    yield from _json_topic(request.param, local_endpoints, tmp_path, MASKS_AND_PARTS)


def _json_topic(kernel, local_endpoints, tmp_path, transforms=None):
    run = uuid.uuid4().hex[:8]
    topic = f"shop.clicks.json{run}"
    create_topic(local_endpoints.kafka_bootstrap, topic)
    dataset, dead = f"web_{run}", f"dead_{run}"
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
                        "event_time": {"fields": ["at"]},
                        **({"transforms": transforms} if transforms else {}),
                    }
                ],
                "allowed_destinations": [f"{dataset}.*"],
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
        "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/json-{run}",
        "DAGSTER_HOME": str(home),
        "KBQE_STAGE_KERNEL": kernel,
        HMAC_ENV: "e2e-key",
    }
    client = local_bigquery_client()
    yield local_endpoints, topic, dataset, dead, env, client
    drop_datasets(client, dataset, dead)


def test_json_values_load_field_by_field_and_bad_ones_are_dead_lettered(json_topic) -> None:
    endpoints, topic, dataset, dead, env, client = json_topic
    good = [
        {
            "datasetName": dataset,
            "tableName": "clicks",
            "url": f"/p/{i}",
            "at": 1_726_238_205_123 + i,
            "user": {"id": i} if i % 2 else None,
        }
        for i in range(40)
    ]
    bad = [b"{oops", json.dumps({"datasetName": dataset, "tableName": "clicks"}).encode()]
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap, "logger": CLIENT_LOG})
    for i, record in enumerate(good):
        producer.produce(topic, json.dumps(record).encode(), partition=i % 2)
    for value in bad:
        producer.produce(topic, value, partition=0)
    assert producer.flush(30) == 0

    for attempt in range(2):
        done = until_idle(env)
        report = json.loads(done.stdout)
        assert report["topics"][topic]["staged"] == (40 if attempt == 0 else 0)

    rows = {
        r["url"]: dict(r)
        for r in client.query(
            f"SELECT url, `at`, user, _kafka_partition FROM `{dataset}.clicks`"
        ).result()
    }
    assert len(rows) == 40
    assert rows["/p/3"]["user"] == {"id": 3} and rows["/p/2"]["user"] is None
    assert rows["/p/5"]["at"].timestamp() * 1000 == pytest.approx(1_726_238_205_128)
    reasons = sorted(
        r["reason"] for r in client.query(f"SELECT reason FROM `{dead}.dead_letters`").result()
    )
    assert reasons == ["json_decode_error", "json_schema_mismatch"]


def test_masked_json_values_with_message_parts_load_as_python_stages_them(
    masked_json_topic,
) -> None:
    """The url hmac-masked, the last ``trace`` header, the offset and the key: the same rows
    with the kernel switch on and off (the report does not say which path staged; the
    in-process differential tests, test_json_kernel.py, prove the kernel stages them)."""
    endpoints, topic, dataset, _, env, client = masked_json_topic
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap, "logger": CLIENT_LOG})
    for i in range(20):
        record = {"datasetName": dataset, "tableName": "clicks", "url": f"/p/{i}",
                  "at": 1_726_238_205_123 + i, "user": None}  # fmt: skip
        headers = [("trace", f"t{i}".encode()), ("trace", f"t{i}-last".encode())]
        producer.produce(topic, json.dumps(record).encode(), key=f"k{i}".encode(),
                         headers=headers, partition=0)  # fmt: skip
    assert producer.flush(30) == 0
    done = until_idle(env)
    assert json.loads(done.stdout)["topics"][topic]["staged"] == 20
    rows = sorted(
        (r["off"], r["url"], r["trace"], r["k"])
        for r in client.query(f"SELECT off, url, trace, k FROM `{dataset}.clicks`").result()
    )
    digest = lambda v: hmac.digest(b"e2e-key", v.encode(), "sha256").hex()  # noqa: E731
    assert rows == [(i, digest(f"/p/{i}"), f"t{i}-last", f"k{i}") for i in range(20)]
