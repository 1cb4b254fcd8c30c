"""A schema that gains a field, then loses a required field, then an optional one (each
version registered under BACKWARD compatibility), end to end on the local stack with
``kbqe run --until-idle``: one topic feeds a ``load`` table and a ``storage_write`` table, a
plain keyed topic feeds its changelog and current table. The first run creates the tables
from the base version and takes the added field; the second takes both deletions, into
tables that exist (a ``destinations:`` table's files carry derived schema ids, so its versions
load in any order: each load job's table takes its files' schema first). Every row is in each table exactly once, nothing is quarantined, the deleted required field's column is
NULLABLE (the metadata the emulator keeps: it never enforces REQUIRED, see
``test_emulator_gap_required_mode_not_enforced``) and the later rows hold NULL there (and in the
deleted optional field's column); a last run finds nothing to do and changes nothing.

Isolated like the other ``kbqe run`` tests: topics, staging prefix, datasets and Dagster
instance of this test only.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.demo.samples import SampleMessage, produce
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster_tests.kbqe_run import cli_env, create_topic, drop_datasets, until_idle
from kbqe_dagster_tests.support.framing import avro_body

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 1
PER_VERSION = 4
NOW = datetime.now(UTC).replace(microsecond=0)

BASE = {
    "type": "record",
    "name": "Account",
    "namespace": "kbqe.evolution",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "ts", "type": "long"},
        {"name": "amount", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
COUPON = {"name": "coupon", "type": ["null", "string"], "default": None}
ADDED = {**BASE, "fields": [*BASE["fields"], COUPON]}
NO_AMOUNT = {**ADDED, "fields": [f for f in ADDED["fields"] if f["name"] != "amount"]}
NO_NOTE = {**NO_AMOUNT, "fields": [f for f in NO_AMOUNT["fields"] if f["name"] != "note"]}
VERSIONS = [BASE, ADDED, NO_AMOUNT, NO_NOTE]
"""The base schema, then: a field added, a required field deleted, an optional one deleted."""


class Rig:
    def __init__(self, endpoints, tmp_path) -> None:
        run = uuid.uuid4().hex[:8]
        self.endpoints = endpoints
        self.events, self.accounts = f"evo.events{run}", f"evo.accounts{run}"
        self.dataset, self.dead = f"evo_{run}", f"evo_dead_{run}"
        self.prefix = f"evo-{run}"
        for topic in (self.events, self.accounts):
            create_topic(endpoints.kafka_bootstrap, topic, PARTITIONS)
        registry = SchemaRegistryClient({"url": endpoints.registry_url})
        subject = f"{self.events}-value"
        registry.set_compatibility(subject, "BACKWARD")
        self.ids = [
            registry.register_schema(subject, Schema(json.dumps(s), "AVRO")) for s in VERSIONS
        ]
        self.registry, self.subject = registry, subject
        self.client = local_bigquery_client()
        self.env = cli_env(tmp_path, self.pipeline(), f"gs://{LOCAL_BUCKET}/{self.prefix}")
        self.env["KBQE_GCS_ENDPOINT"] = endpoints.gcs_url
        self.env["KBQE_GCP_PROJECT"] = LOCAL_PROJECT
        self.produced: list[dict] = []  # every record, in order, with its version

    def pipeline(self) -> dict:
        event_time = {"fields": ["ts"], "epoch_unit": "ms"}
        return {
            "version": 1,
            "topics": [
                {
                    "name": self.events,
                    "event_time": event_time,
                    "destinations": [
                        {"routing": {"mode": "static", "dataset": self.dataset, "table": t}}
                        for t in ("loaded", "appended")
                    ],
                },
                {
                    "name": self.accounts,
                    "event_time": event_time,
                    "routing": {"mode": "static", "dataset": self.dataset, "table": "accounts"},
                    "keyed": {"key": ["id"], "version": "ts"},
                },
            ],
            "allowed_destinations": [f"{self.dataset}.loaded", f"{self.dataset}.appended"],
            "tables": {f"{self.dataset}.appended": {"delivery": "storage_write"}},
            "dead_letter": {"dataset": self.dead, "table": "dead_letters"},
        }

    def produce(self, version: int) -> None:
        """``PER_VERSION`` records of schema ``VERSIONS[version]`` to both topics; the keyed
        topic updates the same keys every time, so its current rows are the latest version's."""
        schema, out = VERSIONS[version], []
        for key in range(PER_VERSION):
            n = len(self.produced)
            record = {"id": key, "ts": int((NOW - timedelta(minutes=60 - n)).timestamp() * 1000)}
            names = {f["name"] for f in schema["fields"]}
            record |= {"amount": 100 + n, "note": f"n-{n}", "coupon": f"c-{n}"}
            record = {k: v for k, v in record.items() if k in names}
            self.produced.append({**record, "version": version})
            value = encode_frame(self.ids[version], avro_body(schema, record))
            out.append(SampleMessage(None, value, None, None))
        for topic in (self.events, self.accounts):
            produce(self.endpoints.kafka_bootstrap, topic, out, PARTITIONS)

    def run(self) -> dict:
        report = json.loads(until_idle(self.env).stdout)
        assert report["quarantined_tables"] == []
        return report

    def query(self, sql: str) -> list[tuple]:
        return [tuple(r.values()) for r in self.client.query_and_wait(sql)]

    def rows(self, table: str) -> list[tuple]:
        """(amount, note, coupon) of each row, ordered by ``ts``."""
        return self.query(f"SELECT amount, note, coupon FROM `{self.dataset}.{table}` ORDER BY ts")

    def expected(self) -> list[tuple]:
        return [(r.get("amount"), r.get("note"), r.get("coupon")) for r in self.produced]

    def once(self, table: str) -> tuple[int, int]:
        [row] = self.query(
            "SELECT COUNT(*), COUNT(DISTINCT FORMAT('%d:%d', _kafka_partition, _kafka_offset)) "
            f"FROM `{self.dataset}.{table}`"
        )
        return row

    def mode(self, table: str, column: str) -> str:
        return {f.name: f.mode for f in self.client.get_table(f"{self.dataset}.{table}").schema}[
            column
        ]

    def staging_names(self) -> list[str]:
        store = StagingLocation(
            f"gs://{LOCAL_BUCKET}/{self.prefix}", self.endpoints.gcs_url, LOCAL_PROJECT
        ).open()
        return sorted(f.name for f in store.list(""))

    def remove(self) -> None:
        drop_datasets(self.client, self.dataset, self.dead)
        self.registry.delete_subject(self.subject, permanent=False)


@pytest.fixture
def rig(local_stack, local_endpoints, tmp_path):
    rig = Rig(local_endpoints, tmp_path)
    yield rig
    rig.remove()


APPEND_ONLY = ("loaded", "appended", "accounts_changelog")


def test_a_field_added_then_a_required_then_an_optional_field_deleted_loses_and_doubles_nothing(
    rig,
) -> None:
    rig.produce(0)
    rig.produce(1)  # a field added: a NULLABLE column, NULL in the older rows
    rig.run()
    for table in APPEND_ONLY:
        assert (rig.mode(table, "amount"), rig.mode(table, "coupon")) == (
            "REQUIRED",
            "NULLABLE",
        ), table

    rig.produce(2)  # the required field deleted: its column relaxed, NULL in the newer rows
    rig.produce(3)  # the optional field deleted: nothing to change, NULL in the newer rows
    rig.run()
    for table in APPEND_ONLY:
        assert (rig.mode(table, "amount"), rig.mode(table, "id")) == ("NULLABLE", "REQUIRED"), (
            f"{table}: the deleted required field's column relaxed, no other"
        )
    idle = rig.run()  # run twice: nothing to do, nothing changed
    assert {t: r["staged"] for t, r in idle["topics"].items()} == {rig.events: 0, rig.accounts: 0}

    produced = len(rig.produced)
    expected = rig.expected()
    for table in APPEND_ONLY:
        assert rig.once(table) == (produced, produced), f"{table}: every row exactly once"
        assert rig.rows(table) == expected, table
    latest = rig.produced[-PER_VERSION:]  # the keyed topic's current rows: the last version's
    assert rig.query(
        f"SELECT id, amount, note, coupon FROM `{rig.dataset}.accounts` ORDER BY id"
    ) == [(r["id"], None, None, r["coupon"]) for r in latest]
    assert not [n for n in rig.staging_names() if n.startswith("_kbqe/quarantine/")]
