"""Debezium on a real Postgres through Kafka Connect, end to end, with Postgres as the oracle
(issue 37, DESIGN.md §14): after every ``kbqe run --until-idle``, ``SELECT *`` in Postgres
equals the live rows of ``D.T`` value by value under the documented mapping, and
``D.T_history`` holds each key's versions in order, once each.

Both encodings at every step, off one source table: two connectors capture it, one with
Apicurio's Avro converter (Confluent framing), one with Connect's JsonConverter and embedded
schemas, each into a topic of its own, and one pipeline stages both topics into a dataset
each (one ``kbqe run`` per step serves both). The source table has a column of every mapped
type and a TOASTed text; the steps are what an application does to it: a snapshot, inserts (some
all-NULL), updates that leave the TOASTed column alone, deletes, a primary-key update, one
transaction of 5,000 rows, ``ALTER TABLE`` adding a column with a default and dropping one,
a Kafka Connect worker killed with SIGKILL mid-stream and restarted (Debezium then sends
again from its last committed offset), and a truncate.
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
ENCODINGS = ("avro", "json")


@dataclass
class Feed:
    """One encoding's way from the source table to BigQuery: its connector (and replication
    slot), its topic and its dataset."""

    encoding: str
    topic: str
    connector: str
    slot: str
    dataset: str


@dataclass
class Rig:
    """One source table, a feed per encoding, the pipeline that stages them all."""

    endpoints: Any
    source: Source
    feeds: list[Feed]
    env: dict
    client: Any = field(default_factory=local_bigquery_client)
    unavailable: set[tuple[int, str]] = field(default_factory=set)
    """TOASTed values no change carried (a primary-key update's new key): NULL in D.T."""

    @property
    def connect(self) -> ConnectClient:
        return ConnectClient(self.endpoints.connect_url)

    def start_connectors(self) -> None:
        for feed in self.feeds:
            config = debezium_postgres_config(
                self.endpoints,
                feed.topic.rsplit(".", 2)[0],
                feed.slot,
                [self.source.qualified],
                feed.encoding,
                {"skipped.operations": "none", "slot.drop.on.stop": "false"},
            )
            self.connect.put(feed.connector, config)
        for feed in self.feeds:
            self.connect.wait_running(feed.connector)

    def end_offset(self, feed: Feed) -> int:
        from confluent_kafka import Consumer

        consumer = Consumer(
            {"bootstrap.servers": self.endpoints.kafka_bootstrap, "group.id": "oracle-probe",
             "logger": CLIENT_LOG}
        )  # fmt: skip
        try:
            metadata = consumer.list_topics(feed.topic, timeout=10).topics.get(feed.topic)
            if metadata is None or metadata.error is not None:
                return 0
            total = 0
            for partition in metadata.partitions:
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(feed.topic, partition), timeout=10
                )
                total += high
            return total
        finally:
            consumer.close()

    def end_offsets(self) -> dict[str, int]:
        return {feed.encoding: self.end_offset(feed) for feed in self.feeds}

    def delivered(self, at_least: dict[str, int], timeout: float = 120.0) -> None:
        """Wait until each feed's topic holds ``at_least`` messages and stopped growing."""
        for feed in self.feeds:
            wait_until_stable(lambda f=feed: self.end_offset(f), at_least[feed.encoding], timeout)

    def run(self) -> dict:
        began = time.monotonic()
        report = json.loads(until_idle(self.env).stdout)
        print(f"oracle: kbqe run took {time.monotonic() - began:.0f}s")
        assert report["ok"] is True, report
        for feed in self.feeds:
            topic = report["topics"].get(feed.topic, {})
            assert topic.get("dead_lettered", 0) == 0, (feed.encoding, topic)
        return report

    def table_rows(self, feed: Feed) -> dict[int, dict]:
        rows = self.client.query_and_wait(
            f"SELECT * FROM `{feed.dataset}.items` WHERE NOT _deleted"
        )
        return {r["id"]: dict(r.items()) for r in rows}

    def assert_equal_to_postgres(self, added_after: dict[str, int] | None = None) -> None:
        source = self.source.rows()
        for feed in self.feeds:
            table = self.table_rows(feed)
            found = differences(source, table, frozenset(self.unavailable))
            # A column added with a default: Debezium sends no event for the rows the ALTER
            # filled, so a row not changed since reads NULL there until its next change.
            found = [
                d
                for d in found
                if not any(
                    f".{c}: postgres" in d and d.endswith("bigquery None")
                    for c in (added_after or {})
                )
            ]
            assert not found, feed.encoding + ":\n" + "\n".join(found[:40])
            assert len(table) == len(source), feed.encoding

    def assert_history_in_order(self) -> None:
        for feed in self.feeds:
            rows = list(
                self.client.query_and_wait(
                    f"SELECT id, _source_ts_ms, _kafka_partition, _kafka_offset, _valid_from, "
                    f"_valid_to, _is_current FROM `{feed.dataset}.items_history` "
                    "ORDER BY id, _valid_from, _kafka_offset"
                )
            )
            versions = [(r["id"], r["_source_ts_ms"]) for r in rows]
            assert len(versions) == len(set(versions)), f"{feed.encoding}: a version twice"
            by_key: dict[int, list] = {}
            for r in rows:
                by_key.setdefault(r["id"], []).append(r)
            for key, history in by_key.items():
                assert [r["_is_current"] for r in history] == [False] * (len(history) - 1) + [
                    True
                ], (feed.encoding, key)
                for earlier, later in zip(history, history[1:], strict=False):
                    assert earlier["_valid_to"] == later["_valid_from"], (feed.encoding, key)


def dsn(endpoints) -> str:
    return (
        f"host=127.0.0.1 port={endpoints.postgres_port} user={USER} password={PASSWORD} "
        f"dbname={DATABASE}"
    )


@pytest.fixture
def rig(cdc_stack, tmp_path) -> Iterator[Rig]:
    run = uuid.uuid4().hex[:8]
    schema = f"oracle_{run}"
    conn = psycopg.connect(dsn(cdc_stack), autocommit=True)
    source = Source(conn, schema)
    source.create()
    feeds = [
        Feed(
            encoding,
            f"oracle_{encoding}_{run}.{schema}.items",
            f"oracle-{encoding}-{run}",
            f"oracle_{encoding}_{run}",
            f"pg_{encoding}_{run}",
        )
        for encoding in ENCODINGS
    ]
    topics = [pipeline(f.topic, f.dataset) for f in feeds]
    both = {**topics[0], "topics": [t for p in topics for t in p["topics"]]}
    # One dead-letter table for the pipeline (the first feed's dataset): a test failure names
    # the topic, and the runs assert that neither topic dead-letters anything.
    env = cli_env(tmp_path, both, str(tmp_path / "staging"))
    rig = Rig(cdc_stack, source, feeds, env)
    try:
        yield rig
    finally:
        names = rig.connect.names()
        for feed in feeds:
            if feed.connector in names:
                rig.connect.delete(feed.connector)
                rig.connect.wait_deleted(feed.connector)
        for feed in feeds:
            drop_slot_when_released(conn, feed.slot)
            with conn.cursor() as cur:
                cur.execute(f"DROP PUBLICATION IF EXISTS {feed.slot}_publication")
        with conn.cursor() as cur:
            cur.execute(f"DROP SCHEMA {schema} CASCADE")
        conn.close()
        for feed in feeds:
            drop_datasets(rig.client, feed.dataset, f"{feed.dataset}_dead")


def kill_connect_and_restart(rig: Rig) -> None:
    """SIGKILL the Connect worker (no offset flush, no clean shutdown), then start it again
    and wait for the connectors: Debezium resumes from its last committed offset."""
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
    for feed in rig.feeds:
        rig.connect.wait_running(feed.connector, timeout=180)


def test_postgres_is_the_oracle_of_the_debezium_tables_in_both_encodings(rig) -> None:
    src = rig.source
    started = time.monotonic()

    # 1. Rows before the connectors: their snapshots read them (op r).
    src.insert(30, nulls_every=7)
    rig.start_connectors()
    rig.delivered({e: 30 for e in ENCODINGS})
    rig.run()
    rig.assert_equal_to_postgres()

    # 2. Inserts, updates that leave the TOASTed column alone (its placeholder), deletes
    #    (key-only before images), a primary-key update (delete, tombstone, create).
    src.insert(10)
    src.update(src.live_ids()[:12])
    src.sql(f"DELETE FROM {src.qualified} WHERE id IN (2, 3, 5)")
    src.sql(f"UPDATE {src.qualified} SET id = 100000 WHERE id = 20")  # a TOASTed row
    rig.unavailable.add((100000, "c_big_text"))
    rig.delivered(rig.end_offsets())
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
    rig.delivered({e: 5_000 for e in ENCODINGS})
    rig.run()
    rig.assert_equal_to_postgres()

    # 4. The schema changes: a column added with a default, another dropped.
    src.sql(f"ALTER TABLE {src.qualified} ADD COLUMN c_added text DEFAULT 'dflt'")
    src.update(src.live_ids()[:5])
    src.insert(3)
    src.drop_column("c_bool")
    src.insert(2)
    src.update(src.live_ids()[5:8])
    rig.delivered(rig.end_offsets())
    rig.run()
    rig.assert_equal_to_postgres(added_after={"c_added": 1})

    # 5. The Connect worker killed mid-stream: changes made around the kill are delivered
    #    again from Debezium's last committed offset, so Kafka holds duplicates.
    before_kill = rig.end_offsets()
    writer = threading.Thread(target=lambda: src.update(src.live_ids()[:400], ("c_text",)))
    writer.start()
    time.sleep(1.0)
    kill_connect_and_restart(rig)
    writer.join()
    rig.delivered({e: n + 400 for e, n in before_kill.items()}, timeout=240)
    rig.run()
    rig.assert_equal_to_postgres(added_after={"c_added": 1})
    rig.assert_history_in_order()

    # 6. A truncate empties the table; rows inserted after it live.
    src.sql(f"TRUNCATE {src.qualified}")
    src.insert(4)
    rig.delivered(rig.end_offsets())
    rig.run()
    rig.assert_equal_to_postgres(added_after={"c_added": 1})

    # 7. Nothing new: a run changes nothing.
    before = {feed.encoding: rig.table_rows(feed) for feed in rig.feeds}
    report = rig.run()
    for feed in rig.feeds:
        assert report["topics"].get(feed.topic, {}).get("staged", 0) == 0, feed.encoding
        assert rig.table_rows(feed) == before[feed.encoding], feed.encoding
    print(
        f"oracle: {len(before['avro'])} live rows, messages {rig.end_offsets()}, "
        f"{time.monotonic() - started:.0f}s"
    )
