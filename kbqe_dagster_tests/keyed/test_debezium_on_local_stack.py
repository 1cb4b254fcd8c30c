"""Debezium change streams into current-state tables and SCD type II history, end to end:
real Kafka, the registry, fake GCS, the BigQuery emulator and Spark, driven by
``kbqe run --until-idle`` as an operator runs it, over several rounds.

Each round produces more changes (see debezium_world.py: snapshot reads, inserts, updates,
deletes with their tombstones, a key re-created in the delete's millisecond, redelivered
duplicates, an out-of-order version, and from round 2 a column added by schema v2). After each
round ``D.T`` and ``D.T_history`` equal the oracle, for soft and for hard deletes; a round
with nothing new changes nothing.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster_tests.keyed.debezium_world import (
    ROW_COLUMNS,
    ROW_V1,
    ROW_V2,
    CustomersTable,
    Produced,
    current_state,
    envelope_schema,
    frame,
    history,
    key_schema,
    value_record,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KBQE = str(Path(sys.executable).parent / "kbqe")
REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 3
MODES = ("soft", "hard")


class Stream:
    """One Debezium topic per delete mode, fed the same changes."""

    def __init__(self, endpoints, run: str) -> None:
        self.run = run
        self.namespace = "dbserver1.inventory.customers"
        self.topics = {mode: f"dbserver1.inventory.customers{run}{mode}" for mode in MODES}
        self.bootstrap = endpoints.kafka_bootstrap
        admin = AdminClient({"bootstrap.servers": self.bootstrap})
        futures = admin.create_topics(
            [NewTopic(t, num_partitions=PARTITIONS, replication_factor=1)
             for t in self.topics.values()])
        for future in futures.values():
            future.result(30)
        self.registry = SchemaRegistryClient({"url": endpoints.registry_url})
        self.produced: dict[str, list[Produced]] = {mode: [] for mode in MODES}
        self.sent = 0

    def _register(self, subject: str, schema: dict) -> int:
        return self.registry.register_schema(subject, Schema(json.dumps(schema), "AVRO"))

    def produce(self, table: CustomersTable) -> int:
        """Send the table's changes not sent yet to both topics; returns their count."""
        rows = ROW_V2 if table.schema_version >= 2 else ROW_V1
        new = table.changes[self.sent:]
        for mode, topic in self.topics.items():
            value_schema = envelope_schema(self.namespace, rows)
            value_id = self._register(f"{topic}-value", value_schema)
            key = key_schema(self.namespace)
            key_id = self._register(f"{topic}-key", key)
            producer = Producer({"bootstrap.servers": self.bootstrap,
                                 "logger": logging.getLogger("kbqe_dagster.kafka")})
            delivered: list[Produced] = []
            for change in new:
                def done(err, msg, change=change):
                    assert err is None, err
                    delivered.append(Produced(change, msg.partition(), msg.offset()))

                value = None if change.is_tombstone else frame(
                    value_id, value_schema, value_record(change, self.namespace))
                producer.produce(topic, value=value, key=frame(key_id, key, {"id": change.id}),
                                 partition=change.id % PARTITIONS, on_delivery=done)
                producer.poll(0)
            assert producer.flush(30) == 0
            self.produced[mode] += delivered
        self.sent = len(table.changes)
        return len(new)


@pytest.fixture
def world(local_stack, local_endpoints, tmp_path):
    run = uuid.uuid4().hex[:8]
    stream = Stream(local_endpoints, run)
    dataset = f"inventory_{run}"
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(yaml.safe_dump({
        "version": 1,
        "topics": [
            {"name": stream.topics[mode], "format": "debezium",
             "routing": {"mode": "static", "dataset": dataset, "table": f"customers_{mode}"},
             "keyed": {"deletes": mode, "history": True}}  # key: the Kafka key's schema
            for mode in MODES
        ],
        "dead_letter": {"dataset": f"dead_{run}", "table": "dead_letters"},
        "staging": {"max_messages_per_range": 40},
    }))
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    env = {**os.environ, "KBQE_ENV": "local", "KBQE_PIPELINE_CONFIG": str(pipeline),
           "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/keyed-{run}", "DAGSTER_HOME": str(home)}
    client = local_bigquery_client()
    yield stream, dataset, env, client
    for name in (dataset, f"dead_{run}"):
        client.delete_dataset(name, delete_contents=True, not_found_ok=True)


def run_until_idle(env: dict[str, str]) -> dict:
    done = subprocess.run([KBQE, "run", "--until-idle", "--json"], env=env, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    return json.loads(done.stdout)


def _row_columns(client, table: str) -> str:
    """The row columns, NULL for one the table does not have yet (before schema v2)."""
    present = {f.name for f in client.query(f"SELECT * FROM `{table}` LIMIT 0").result().schema}
    return ", ".join(f"`{c}`" if c in present else f"NULL AS `{c}`" for c in ROW_COLUMNS)


def current_rows(client, dataset: str, mode: str) -> set[tuple]:
    table = f"{dataset}.customers_{mode}"
    sql = (f"SELECT {_row_columns(client, table)}, _op, _source_ts_ms, _deleted, "
           f"_kafka_partition, _kafka_offset FROM `{table}`")
    return {tuple(row) for row in client.query(sql).result()}


def history_rows(client, dataset: str, mode: str) -> set[tuple]:
    table = f"{dataset}.customers_{mode}_history"
    sql = (f"SELECT {_row_columns(client, table)}, _op, _deleted, _valid_from, _valid_to, "
           f"_is_current FROM `{table}`")
    return {tuple(row) for row in client.query(sql).result()}


def assert_tables_equal_the_oracle(stream: Stream, dataset: str, client) -> None:
    for mode in MODES:
        produced = stream.produced[mode]
        expected = current_state(produced, hard=mode == "hard")
        assert current_rows(client, dataset, mode) == expected, mode
        assert history_rows(client, dataset, mode) == history(produced), mode


def test_debezium_changes_land_as_current_state_and_history_over_rounds(world) -> None:
    stream, dataset, env, client = world
    table = CustomersTable(seed=13, partitions=PARTITIONS)

    # Round 1: a snapshot, then live changes of schema v1.
    table.snapshot(30)
    table.round(inserts=10, updates=15, deletes=4)
    stream.produce(table)
    report = run_until_idle(env)
    assert report["ok"] is True
    tombstones = sum(1 for c in table.changes if c.is_tombstone)
    for mode in MODES:
        topic = report["topics"][stream.topics[mode]]
        assert topic["tombstones"] == tombstones
        assert topic["dead_lettered"] == 0
        assert topic["staged"] == len(table.changes) - tombstones
        assert report["tables"][f"{dataset}.customers_{mode}"]["keys_merged"] > 0
    assert_tables_equal_the_oracle(stream, dataset, client)

    # Round 2: schema v2 adds a column mid-stream; older rows read NULL there.
    table.schema_version = 2
    table.round(inserts=8, updates=12, deletes=5)
    stream.produce(table)
    assert run_until_idle(env)["ok"] is True
    assert_tables_equal_the_oracle(stream, dataset, client)

    # Round 3: nothing new: nothing staged, nothing merged, the tables unchanged.
    before = {m: current_rows(client, dataset, m) for m in MODES}
    report = run_until_idle(env)
    assert report["ok"] is True
    for mode in MODES:
        assert report["topics"][stream.topics[mode]]["staged"] == 0
        assert report["tables"].get(f"{dataset}.customers_{mode}", {}).get("keys_merged", 0) == 0
        assert current_rows(client, dataset, mode) == before[mode]
    assert_tables_equal_the_oracle(stream, dataset, client)


CRASH_POINTS = ("merge_statement_0:1", "merge_statement_1:1", "merge_before_state:2")
"""Where the merge is killed (SIGKILL of the `kbqe run` process): after the current-state
MERGE, after the hard-delete memory's MERGE, and after the second table's merge but before
its merge state is written (keyed/merge.py)."""


def test_a_merge_killed_at_each_point_is_repaired_by_the_next_run(world) -> None:
    stream, dataset, env, client = world
    table = CustomersTable(seed=29, partitions=PARTITIONS)
    table.snapshot(20)
    for number, point in enumerate(CRASH_POINTS):
        table.schema_version = 1 if number == 0 else 2
        table.round(inserts=6, updates=10, deletes=3)
        stream.produce(table)
        killed = subprocess.run([KBQE, "run", "--until-idle", "--json"],
                                env={**env, "KBQE_CRASH_AT": point}, capture_output=True,
                                text=True, timeout=900)
        assert killed.returncode == -9, (point, killed.stderr[-2000:])
        report = run_until_idle(env)  # exits 0 only when the keyed checks pass too
        assert report["ok"] is True
        assert_tables_equal_the_oracle(stream, dataset, client)
        for mode in MODES:
            duplicates = list(client.query(
                f"SELECT id FROM `{dataset}.customers_{mode}` GROUP BY id HAVING COUNT(*) > 1"
            ).result())
            assert duplicates == [], (point, mode)
