"""An Avro topic with two destinations end to end on the local stack: framed Avro produced to
Kafka with a registry schema, staged on Spark into a whole table and a projected one, loaded
into the BigQuery emulator by ``kbqe run --until-idle``: exactly one row per message per
destination (checked by Kafka coordinates), the message one destination cannot take in the
dead letters once and in neither table; run twice, the second run is idle."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG
from kbqe_dagster_tests.kbqe_run import create_topic, drop_datasets, until_idle
from kbqe_dagster_tests.support.framing import avro_framed

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
MESSAGES = 24
SCHEMA = {
    "type": "record",
    "name": "Execution",
    "namespace": "fix",
    "fields": [
        {"name": "exec_id", "type": "string"},
        {"name": "symbol", "type": "string"},
        {"name": "last_qty", "type": "string"},
        {"name": "last_px", "type": "double"},
        {"name": "venue", "type": "string"},
        {"name": "transact_time", "type": "string"},
    ],
}


@pytest.fixture
def fanned_topic(local_stack, local_endpoints, tmp_path):
    run = uuid.uuid4().hex[:8]
    topic = f"destinations.executions.{run}"
    create_topic(local_endpoints.kafka_bootstrap, topic)
    registry = SchemaRegistryClient({"url": local_endpoints.registry_url})
    schema_id = registry.register_schema(
        f"destinations-{run}-value", Schema(json.dumps(SCHEMA), "AVRO")
    )
    dataset, dead = f"destinations_{run}", f"destinations_dead_{run}"
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topics": [
                    {
                        "name": topic,
                        "destinations": [
                            {
                                "routing": {
                                    "mode": "static",
                                    "dataset": dataset,
                                    "table": "executions",
                                }
                            },
                            {
                                "routing": {
                                    "mode": "static",
                                    "dataset": dataset,
                                    "table": "fills_by_symbol",
                                },
                                "transforms": [
                                    {"cast": "last_qty", "to": "double"},
                                    {
                                        "compute": "notional",
                                        "expression": "last_qty * last_px",
                                        "type": "double",
                                    },
                                ],
                                "fields": ["symbol", "last_qty", "notional"],
                            },
                        ],
                        "event_time": {"fields": ["transact_time"], "date_rule": "utc"},
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
        "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/destinations-{run}",
        "DAGSTER_HOME": str(home),
    }
    client = local_bigquery_client()
    yield local_endpoints, topic, schema_id, dataset, dead, env, client
    drop_datasets(client, dataset, dead)


def framed(schema_id: int, record: dict) -> bytes:
    return avro_framed(schema_id, SCHEMA, record)


def test_each_message_lands_once_per_destination_and_a_bad_one_in_neither(fanned_topic) -> None:
    endpoints, topic, schema_id, dataset, dead, env, client = fanned_topic
    executions = [
        {
            "exec_id": f"E{i}",
            "symbol": "ACME" if i % 3 else "GOOG",
            "last_qty": str(i + 1),
            "last_px": 2.5,
            "venue": "XPAR",
            "transact_time": f"2024-09-13T14:{i:02d}:00Z",
        }
        for i in range(MESSAGES)
    ]
    bad = {**executions[0], "exec_id": "BAD", "last_qty": "ten"}
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap, "logger": CLIENT_LOG})
    produced: dict[tuple[int, int], bytes] = {}

    def delivered(error, msg) -> None:
        assert error is None, error
        produced[(msg.partition(), msg.offset())] = msg.value()

    for i, record in enumerate(executions):
        producer.produce(topic, framed(schema_id, record), partition=i % 2, on_delivery=delivered)
    producer.produce(topic, framed(schema_id, bad), partition=1, on_delivery=delivered)
    assert producer.flush(30) == 0

    for attempt in range(2):
        done = until_idle(env)
        report = json.loads(done.stdout)["topics"][topic]
        if attempt == 0:
            assert (report["staged"], report["dead_lettered"]) == (2 * MESSAGES, 1)
        else:
            assert (report["messages"], report["staged"], report["stage_runs"]) == (0, 0, 0)

    good = {coords for coords, value in produced.items() if b"BAD" not in value}
    [bad_coords] = set(produced) - good
    for table in ("executions", "fills_by_symbol"):
        rows = [
            (r["_kafka_partition"], r["_kafka_offset"])
            for r in client.query(
                f"SELECT _kafka_partition, _kafka_offset FROM `{dataset}.{table}`"
            ).result()
        ]
        assert sorted(rows) == sorted(good), table  # exactly once each, the bad one in neither
    whole = {
        r["exec_id"]: dict(r)
        for r in client.query(f"SELECT * FROM `{dataset}.executions`").result()
    }
    assert whole["E4"]["last_qty"] == "5" and whole["E4"]["venue"] == "XPAR"
    fills = [
        dict(r)
        for r in client.query(
            f"SELECT * FROM `{dataset}.fills_by_symbol` WHERE _kafka_partition = 0 "
            "AND _kafka_offset = 2"
        ).result()
    ]
    assert len(fills) == 1
    fill = {k: v for k, v in fills[0].items() if not k.startswith("_")}
    assert fill == {"symbol": "ACME", "last_qty": 5.0, "notional": 12.5}  # E4: 3rd of part. 0
    assert str(fills[0]["_event_date"]) == "2024-09-13"
    letters = [
        dict(r)
        for r in client.query(
            f"SELECT reason, error, `partition`, `offset` FROM `{dead}.dead_letters`"
        ).result()
    ]
    assert [(x["partition"], x["offset"], x["reason"]) for x in letters] == [
        (*bad_coords, "transform_failed")
    ]
    assert "destinations[1] (" in letters[0]["error"]
    assert "transforms[0] (cast) field 'last_qty': 'ten' is not a double" in letters[0]["error"]


@pytest.mark.parametrize("switch", ["on", "off"], ids=["kernel", "python"])
def test_destinations_the_kernel_does_load_the_same_rows_on_either_stage_path(
    switch, local_stack, local_endpoints, tmp_path
) -> None:
    """Static destinations with projections in their own order, one with its own rename and
    constant after the topic's drop (formats/avro_destination_kernel.py): staged on the kernel
    when it is built and the switch is on, on the Python path otherwise; the same rows, and a
    truncated body in the dead letters once, either way."""
    run = uuid.uuid4().hex[:8]
    topic = f"destinations.kernel.{run}"
    create_topic(local_endpoints.kafka_bootstrap, topic)
    registry = SchemaRegistryClient({"url": local_endpoints.registry_url})
    schema_id = registry.register_schema(
        f"destinations-kernel-{run}-value", Schema(json.dumps(SCHEMA), "AVRO")
    )
    dataset, dead = f"kernel_dest_{run}", f"kernel_dest_dead_{run}"
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(yaml.safe_dump({
        "version": 1,
        "topics": [{
            "name": topic,
            "transforms": [{"drop": ["venue"]}],
            "destinations": [
                {"routing": {"mode": "static", "dataset": dataset, "table": "executions"}},
                {"routing": {"mode": "static", "dataset": dataset, "table": "prices"},
                 "fields": ["last_px", "symbol", "exec_id"]},
                {"routing": {"mode": "static", "dataset": dataset, "table": "fills"},
                 "transforms": [{"rename": "last_qty", "to": "quantity"},
                                {"add": "desk", "value": "equities"}],
                 "fields": ["exec_id", "quantity", "desk"]},
            ],
            "event_time": {"fields": ["transact_time"], "date_rule": "utc"},
        }],
        "dead_letter": {"dataset": dead, "table": "dead_letters"},
    }))  # fmt: skip
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {
        **os.environ,
        "KBQE_ENV": "local",
        "KBQE_PIPELINE_CONFIG": str(pipeline),
        "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/kernel-dest-{run}",
        "DAGSTER_HOME": str(home),
        "KBQE_STAGE_KERNEL": switch,
    }
    client = local_bigquery_client()
    try:
        producer = Producer({"bootstrap.servers": local_endpoints.kafka_bootstrap,
                             "logger": CLIENT_LOG})  # fmt: skip
        for i in range(MESSAGES):
            record = {"exec_id": f"E{i}", "symbol": "ACME", "last_qty": str(i + 1),
                      "last_px": 2.5, "venue": "XPAR",
                      "transact_time": f"2024-09-13T14:{i:02d}:00Z"}  # fmt: skip
            producer.produce(topic, framed(schema_id, record), partition=i % 2)
        producer.produce(topic, framed(schema_id, record)[:-3], partition=0)  # truncated
        assert producer.flush(30) == 0
        for attempt in range(2):
            report = json.loads(until_idle(env).stdout)["topics"][topic]
            assert report["staged"] == (3 * MESSAGES if attempt == 0 else 0)

        def rows(table: str) -> dict[str, dict]:
            query = f"SELECT * FROM `{dataset}.{table}`"
            return {r["exec_id"]: {k: v for k, v in dict(r).items() if not k.startswith("_")}
                    for r in client.query(query).result()}  # fmt: skip

        executions, prices, fills = rows("executions"), rows("prices"), rows("fills")
        assert len(executions) == len(prices) == len(fills) == MESSAGES
        assert "venue" not in executions["E7"] and executions["E7"]["last_qty"] == "8"
        assert prices["E7"] == {"last_px": 2.5, "symbol": "ACME", "exec_id": "E7"}
        assert fills["E7"] == {"exec_id": "E7", "quantity": "8", "desk": "equities"}
        reasons = [
            r["reason"] for r in client.query(f"SELECT reason FROM `{dead}.dead_letters`").result()
        ]
        assert reasons == ["body_decode_error"]
    finally:
        drop_datasets(client, dataset, dead)
