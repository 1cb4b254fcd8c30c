"""A ``format: decoder`` topic end to end on the local stack: FIX 4.4 messages produced to
Kafka, decoded by the example decoder inside the Spark stage tasks, loaded into one BigQuery
emulator table per message type field by field by ``kbqe run --until-idle``, the fills also
projected into ``fills_by_symbol`` (a second destination: exactly one row per fill, by offsets),
the bad ones in the dead-letter table with the decoder's reasons; run twice, the second run
changes nothing."""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer

from examples.fix.decoder import decode_fix
from examples.fix.messages import bad_messages, order_flow
from kbqe_dagster import RawMessage
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG
from kbqe_dagster_tests.kbqe_run import create_topic, drop_datasets, until_idle

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
ORDERS = 20
FILL_FIELDS = ["symbol", "side", "last_qty", "last_px", "transact_time", "exec_id"]


@pytest.fixture
def fix_topic(local_stack, local_endpoints, tmp_path):
    run = uuid.uuid4().hex[:8]
    topic = f"decoder.fix{run}"
    create_topic(local_endpoints.kafka_bootstrap, topic)
    dataset, dead = f"fix_{run}", f"fixdead_{run}"
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topics": [
                    {
                        "name": topic,
                        "format": "decoder",
                        "decoder": "examples.fix.decoder:decode_fix",
                        "destinations": [
                            {"routing": {"mode": "schema_name", "dataset": dataset}},
                            {
                                "routing": {
                                    "mode": "static",
                                    "dataset": dataset,
                                    "table": "fills_by_symbol",
                                },
                                "schema_names": ["fix.ExecutionReport"],
                                "when": 'exec_type == "F"',
                                "fields": FILL_FIELDS,
                            },
                        ],
                        "event_time": {
                            "fields": ["transact_time", "sending_time"],
                            "date_rule": "utc",
                        },
                    }
                ],
                "allowed_destinations": [
                    f"{dataset}.new_order_single",
                    f"{dataset}.execution_report",
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
        "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/decoder-{run}",
        "DAGSTER_HOME": str(home),
        # the code location and every Spark stage task import examples.fix.decoder
        "PYTHONPATH": os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
    }
    client = local_bigquery_client()
    yield local_endpoints, topic, dataset, dead, env, client
    drop_datasets(client, dataset, dead)


def test_fix_messages_load_one_table_per_message_type_and_bad_ones_are_dead_lettered(
    fix_topic,
) -> None:
    endpoints, topic, dataset, dead, env, client = fix_topic
    flow, bad = list(order_flow(ORDERS, seed=7)), bad_messages()
    producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap, "logger": CLIENT_LOG})
    for i, sample in enumerate(flow):
        producer.produce(topic, sample.value, partition=(i // 3) % 2)  # an order's 3 together
    for sample in bad:
        producer.produce(topic, sample.value, partition=1)
    assert producer.flush(30) == 0

    for attempt in range(2):
        done = until_idle(env, cwd=REPO)
        report = json.loads(done.stdout)["topics"][topic]
        if attempt == 0:
            assert (report["staged"], report["dead_lettered"]) == (4 * ORDERS, len(bad))
        else:
            assert (report["messages"], report["staged"], report["stage_runs"]) == (0, 0, 0)

    expected = [decode_fix(RawMessage(s.value, None, (), None, topic, 0, 0))[0] for s in flow]
    for table, msg_type, key in (
        ("new_order_single", "D", "cl_ord_id"),
        ("execution_report", "8", "exec_id"),
    ):
        rows = {
            r[key]: dict(r) for r in client.query(f"SELECT * FROM `{dataset}.{table}`").result()
        }
        wanted = {e[key]: e for e in expected if e["msg_type"] == msg_type}
        assert len(rows) == len(wanted) == ORDERS * (1 if msg_type == "D" else 2)
        for name, record in wanted.items():
            row = rows[name]
            for column, value in record.items():
                assert row[column] == value, (table, name, column)
            assert row["_event_date"] == record["transact_time"].date()
            assert row["_kafka_topic"] == topic

    # The fills, projected: one row per ExecType F message, its coordinates the whole row's.
    fills = {
        r["exec_id"]: dict(r)
        for r in client.query(f"SELECT * FROM `{dataset}.fills_by_symbol`").result()
    }
    executions = {
        r["exec_id"]: dict(r)
        for r in client.query(f"SELECT * FROM `{dataset}.execution_report`").result()
    }
    wanted = {e["exec_id"] for e in expected if e["msg_type"] == "8" and e["exec_type"] == "F"}
    assert set(fills) == wanted and len(wanted) == ORDERS
    for exec_id, fill in fills.items():
        whole = executions[exec_id]
        assert [c for c in fill if not c.startswith("_")] == FILL_FIELDS
        assert {c: fill[c] for c in FILL_FIELDS} == {c: whole[c] for c in FILL_FIELDS}
        coordinates = ("_kafka_partition", "_kafka_offset", "_event_date")
        assert [fill[c] for c in coordinates] == [whole[c] for c in coordinates]

    letters = sorted(
        (r["offset"], r["reason"], r["error"])
        for r in client.query(f"SELECT `offset`, reason, error FROM `{dead}.dead_letters`").result()
    )
    assert [reason for _, reason, _ in letters] == ["decoder_rejected"] * len(bad)
    first_bad = sum(1 for i in range(len(flow)) if (i // 3) % 2 == 1)
    for (offset, _, error), sample in zip(letters, bad):
        assert sample.expect in error and f"{topic}[1] offset {offset}" in error
    assert letters[0][0] == first_bad
