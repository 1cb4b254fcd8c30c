"""Debezium on a real Postgres through Kafka Connect, end to end, with Postgres as the oracle
(issue 37, DESIGN.md §14): after every ``kbqe run --until-idle``, ``SELECT *`` in Postgres
equals the live rows of ``D.T`` value by value under the documented mapping, and
``D.T_history`` holds each key's versions in order, once each.

One test per encoding: Avro through Apicurio's converter (Confluent framing) and Connect's
JsonConverter with embedded schemas. The source table has a column of every mapped type and
a TOASTed text; the steps are what an application does to it: a snapshot, inserts (some
all-NULL), updates that leave the TOASTed column alone, deletes, a primary-key update, one
transaction of 5,000 rows, ``ALTER TABLE`` adding a column with a default and dropping one,
a Kafka Connect worker killed with SIGKILL mid-stream and restarted (Debezium then sends
again from its last committed offset), and a truncate. Each encoding takes about six minutes
on two cores (seven ``kbqe run``s of 10 to 55 s each, most of it the BigQuery emulator).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from confluent_kafka import TopicPartition

from kbqe_dagster.localstack import stack
from kbqe_dagster.localstack.cdc import ConnectClient, debezium_postgres_config
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.postgres import DATABASE, PASSWORD, USER
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG
from kbqe_dagster_tests.kbqe_run import cli_env, drop_datasets, until_idle
from reliability.postgres_oracle import (
    Source,
    differences,
    drop_slot_when_released,
    pipeline,
    wait_until_stable,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1800)]


@dataclass
class Rig:
    """One source table, its connector, its pipeline and its BigQuery dataset."""

    endpoints: Any
    encoding: str
    source: Source
    topic: str
    connector: str
    slot: str
    dataset: str
    env: dict
    client: Any = field(default_factory=local_bigquery_client)

    @property
    def connect(self) -> ConnectClient:
        return ConnectClient(self.endpoints.connect_url)

    def start_connector(self) -> None:
        config = debezium_postgres_config(
            self.endpoints,
            self.topic.rsplit(".", 2)[0],
            self.slot,
            [self.source.qualified],
            self.encoding,
            {"skipped.operations": "none", "slot.drop.on.stop": "false"},
        )
        self.connect.put(self.connector, config)
        self.connect.wait_running(self.connector)

    def end_offset(self) -> int:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {"bootstrap.servers": self.endpoints.kafka_bootstrap, "group.id": "oracle-probe",
             "logger": CLIENT_LOG}
        )  # fmt: skip
        try:
            metadata = consumer.list_topics(self.topic, timeout=10).topics.get(self.topic)
            if metadata is None or metadata.error is not None:
                return 0
            total = 0
            for partition in metadata.partitions:
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(self.topic, partition), timeout=10
                )
                total += high
            return total
        finally:
            consumer.close()

    def run(self) -> dict:
        began = time.monotonic()
        report = json.loads(until_idle(self.env).stdout)
        print(f"oracle[{self.encoding}]: kbqe run took {time.monotonic() - began:.0f}s")
        assert report["ok"] is True, report
        topic = report["topics"].get(self.topic, {})
        assert topic.get("dead_lettered", 0) == 0, topic
        return report

    def table_rows(self) -> dict[int, dict]:
        rows = self.client.query_and_wait(
            f"SELECT * FROM `{self.dataset}.items` WHERE NOT _deleted"
        )
        return {r["id"]: dict(r.items()) for r in rows}

    unavailable: set[tuple[int, str]] = field(default_factory=set)
    """TOASTed values no change carried (a primary-key update's new key): NULL in D.T."""

    def assert_equal_to_postgres(self, added_after: dict[str, int] | None = None) -> None:
        source = self.source.rows()
        table = self.table_rows()
        found = differences(source, table, frozenset(self.unavailable))
        # A column added with a default: Debezium sends no event for the rows the ALTER
        # filled, so a row not changed since reads NULL there until its next change.
        found = [
            d
            for d in found
            if not any(
                f".{c}: postgres" in d and d.endswith("bigquery None") for c in (added_after or {})
            )
        ]
        assert not found, "\n".join(found[:40])
        assert len(table) == len(source)

    def assert_history_in_order(self) -> None:
        rows = list(
            self.client.query_and_wait(
                f"SELECT id, _source_ts_ms, _kafka_partition, _kafka_offset, _valid_from, "
                f"_valid_to, _is_current FROM `{self.dataset}.items_history` "
                "ORDER BY id, _valid_from, _kafka_offset"
            )
        )
        versions = [(r["id"], r["_source_ts_ms"]) for r in rows]
        assert len(versions) == len(set(versions)), "a version is in the history twice"
        by_key: dict[int, list] = {}
        for r in rows:
            by_key.setdefault(r["id"], []).append(r)
        for key, history in by_key.items():
            assert [r["_is_current"] for r in history] == [False] * (len(history) - 1) + [True]
            for earlier, later in zip(history, history[1:], strict=False):
                assert earlier["_valid_to"] == later["_valid_from"], key


def dsn(endpoints) -> str:
    return (
        f"host=127.0.0.1 port={endpoints.postgres_port} user={USER} password={PASSWORD} "
        f"dbname={DATABASE}"
    )


@pytest.fixture(params=["avro", "json"])
def rig(request, cdc_stack, tmp_path) -> Iterator[Rig]:
    encoding = request.param
    run = uuid.uuid4().hex[:8]
    schema = f"oracle_{encoding}_{run}"
    conn = psycopg.connect(dsn(cdc_stack), autocommit=True)
    source = Source(conn, schema)
    source.create()
    dataset = f"pg_{encoding}_{run}"
    prefix = f"oracle_{encoding}_{run}"
    topic = f"{prefix}.{schema}.items"
    env = cli_env(tmp_path, pipeline(topic, dataset), str(tmp_path / "staging"))
    rig = Rig(cdc_stack, encoding, source, topic, f"oracle-{encoding}-{run}", prefix, dataset, env)
    try:
        yield rig
    finally:
        if rig.connector in rig.connect.names():
            rig.connect.delete(rig.connector)
            rig.connect.wait_deleted(rig.connector)
        drop_slot_when_released(conn, rig.slot)
        with conn.cursor() as cur:
            cur.execute(f"DROP PUBLICATION IF EXISTS {rig.slot}_publication")
            cur.execute(f"DROP SCHEMA {schema} CASCADE")
        conn.close()
        drop_datasets(rig.client, dataset, f"{dataset}_dead")


def kill_connect_and_restart(rig: Rig) -> None:
    """SIGKILL the Connect worker (no offset flush, no clean shutdown), then start it again
    and wait for the connector: Debezium resumes from its last committed offset."""
    service = next(
        s for s in stack.build(["connect"], endpoints=rig.endpoints) if s.name == "connect"
    )
    pid = service.pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while service.pid() is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    stack.up_services([service])
    rig.connect.wait_running(rig.connector, timeout=180)


def test_postgres_is_the_oracle_of_the_debezium_table(rig) -> None:
    src = rig.source
    started = time.monotonic()

    # 1. Rows before the connector: its snapshot reads them (op r).
    src.insert(30, nulls_every=7)
    rig.start_connector()
    wait_until_stable(rig.end_offset, 30)
    rig.run()
    rig.assert_equal_to_postgres()

    # 2. Inserts, updates that leave the TOASTed column alone (its placeholder), deletes
    #    (key-only before images), a primary-key update (delete, tombstone, create).
    src.insert(10)
    src.update(src.live_ids()[:12])
    src.sql(f"DELETE FROM {src.qualified} WHERE id IN (2, 3, 5)")
    src.sql(f"UPDATE {src.qualified} SET id = 100000 WHERE id = 20")  # a TOASTed row
    rig.unavailable.add((100000, "c_big_text"))
    wait_until_stable(rig.end_offset, rig.end_offset())
    rig.run()
    rig.assert_equal_to_postgres()
    rig.assert_history_in_order()

    # 3. One transaction of 5,000 rows, then more TOAST-unchanged updates.
    with src.conn.transaction(), src.conn.cursor() as cur:
        for _ in range(5_000):
            values = src.row(src.next_id)
            src.next_id += 1
            cur.execute(
                f"INSERT INTO {src.qualified} ({', '.join(values)}) "
                f"VALUES ({', '.join(['%s'] * len(values))})",
                tuple(values.values()),
            )
    src.update(src.live_ids()[-20:], columns=("c_int_array", "c_timestamptz"))
    wait_until_stable(rig.end_offset, 5_000)
    rig.run()
    rig.assert_equal_to_postgres()

    # 4. The schema changes: a column added with a default, another dropped.
    src.sql(f"ALTER TABLE {src.qualified} ADD COLUMN c_added text DEFAULT 'dflt'")
    src.update(src.live_ids()[:5])
    src.insert(3)
    src.drop_column("c_bool")
    src.insert(2)
    src.update(src.live_ids()[5:8])
    wait_until_stable(rig.end_offset, rig.end_offset())
    rig.run()
    rig.assert_equal_to_postgres(added_after={"c_added": 1})

    # 5. The Connect worker killed mid-stream: changes made around the kill are delivered
    #    again from Debezium's last committed offset, so Kafka holds duplicates.
    before_kill = rig.end_offset()
    writer = threading.Thread(target=lambda: src.update(src.live_ids()[:400], ("c_text",)))
    writer.start()
    time.sleep(1.0)
    kill_connect_and_restart(rig)
    writer.join()
    wait_until_stable(rig.end_offset, before_kill + 400, timeout=240)
    rig.run()
    rig.assert_equal_to_postgres(added_after={"c_added": 1})
    rig.assert_history_in_order()

    # 6. A truncate empties the table; rows inserted after it live.
    src.sql(f"TRUNCATE {src.qualified}")
    src.insert(4)
    wait_until_stable(rig.end_offset, rig.end_offset())
    rig.run()
    rig.assert_equal_to_postgres(added_after={"c_added": 1})

    # 7. Nothing new: a run changes nothing.
    before = rig.table_rows()
    report = rig.run()
    assert report["topics"].get(rig.topic, {}).get("staged", 0) == 0
    assert rig.table_rows() == before
    print(f"oracle[{rig.encoding}]: {len(before)} live rows, {rig.end_offset()} messages, "
          f"{time.monotonic() - started:.0f}s")  # fmt: skip
