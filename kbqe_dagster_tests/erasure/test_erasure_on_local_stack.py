"""Erasure on the local stack, driven by the commands a user runs: real Kafka, fake GCS, the
BigQuery emulator and Spark. An append table and the dead-letter table: after ``kbqe erase``
no row of the subject is left (the dead letters matched on the raw Kafka key), the other
subjects' rows are untouched, a dry run counts and deletes nothing, a request re-run is
harmless and says it found nothing, and the audit table holds only the subject's salted hash.
A request racing a load: rows staged but not loaded, and rows still in Kafka, when it arrives
are erased by the pass after their load, and only then is the request complete. Requests on
the requests topic: the sensor launches the ``erasure`` job, the catch-up applies them, a bad
one is refused and audited, and the audit check finds every request read."""

from __future__ import annotations

import hashlib
import hmac
import json
import subprocess
import uuid

import pytest
from confluent_kafka import Producer

from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG
from kbqe_dagster_tests.kbqe_run import KBQE, cli_env, create_topic, drop_datasets, until_idle

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SALT = "test-salt-not-a-secret"
SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "erasure",
    "fields": [
        {"name": "customer_id", "type": "string"},
        {"name": "n", "type": "long"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
CUSTOMERS = ("c0", "c1", "c2", "c3")
DAY_MS = 86_400_000


class Rig:
    def __init__(self, endpoints, tmp_path) -> None:
        run = uuid.uuid4().hex[:8]
        self.topic = f"erasure.{run}.orders"
        self.dataset = f"erasure_{run}"
        self.dead = f"erasure_{run}_dead"
        self.audit = f"erasure_{run}_audit"
        self.requests = f"erasure.{run}.requests"  # created by the test that uses it
        self.bootstrap = endpoints.kafka_bootstrap
        self.env = cli_env(
            tmp_path,
            {
                "version": 1,
                "topics": [
                    {
                        "name": self.topic,
                        "format": "json",
                        "schema": SCHEMA,
                        "event_time": {"fields": ["at"]},
                        "routing": {"mode": "static", "dataset": self.dataset, "table": "orders"},
                    }
                ],
                "enrichment": {"key_column": "_kafka_key"},
                "dead_letter": {"dataset": self.dead, "table": "dead_letters"},
                "erasure": {
                    "tables": {
                        f"{self.dataset}.orders": {"columns": ["customer_id"]},
                        f"{self.dead}.dead_letters": {"kafka_key": True},
                    },
                    "audit": {"dataset": self.audit, "table": "requests"},
                    "requests_topic": self.requests,
                },
            },
            f"gs://{LOCAL_BUCKET}/erasure-{run}",
        )
        self.env["KBQE_ERASURE_SALT"] = SALT
        create_topic(endpoints.kafka_bootstrap, self.topic, partitions=2)
        self.producer = Producer(
            {"bootstrap.servers": endpoints.kafka_bootstrap, "logger": CLIENT_LOG}
        )
        self.client = local_bigquery_client()
        self.produced = 0

    def produce(self, orders: int, bad_for: tuple[str, ...] = ()) -> None:
        """``orders`` orders spread over the customers and three days (keyed by customer),
        then one message that is not JSON per customer of ``bad_for`` (a dead letter)."""
        for i in range(self.produced, self.produced + orders):
            customer = CUSTOMERS[i % len(CUSTOMERS)]
            value = {"customer_id": customer, "n": i, "at": 1_726_238_205_000 + (i % 3) * DAY_MS}
            self.producer.produce(
                self.topic, json.dumps(value).encode(), key=customer.encode(), partition=i % 2
            )
        for customer in bad_for:
            self.producer.produce(self.topic, b"not json {", key=customer.encode(), partition=0)
        self.produced += orders
        assert self.producer.flush(30) == 0

    def erase(self, *args: str, expect: int = 0) -> dict:
        done = subprocess.run(
            [KBQE, "erase", *args, "--json"], env=self.env, capture_output=True, text=True,
            timeout=300,
        )  # fmt: skip
        assert done.returncode == expect, done.stderr[-3000:] + done.stdout[-2000:]
        return json.loads(done.stdout)

    def orders_of(self) -> dict[str, int]:
        sql = f"SELECT customer_id, COUNT(*) n FROM `{self.dataset}.orders` GROUP BY 1"
        return {r["customer_id"]: r["n"] for r in self.client.query(sql).result()}

    def dead_letters_of(self) -> dict[str, int]:
        sql = f"SELECT raw_key, COUNT(*) n FROM `{self.dead}.dead_letters` GROUP BY 1"
        return {bytes(r["raw_key"]).decode(): r["n"] for r in self.client.query(sql).result()}

    def audit_rows(self) -> list[dict]:
        sql = f"SELECT * FROM `{self.audit}.requests` ORDER BY recorded_at, pass_number"
        return [dict(r.items()) for r in self.client.query(sql).result()]

    def remove(self) -> None:
        drop_datasets(self.client, self.dataset, self.dead, self.audit)


@pytest.fixture
def rig(local_stack, local_endpoints, tmp_path):
    rig = Rig(local_endpoints, tmp_path)
    yield rig
    rig.remove()


def salted(subject: str) -> str:
    return hmac.new(SALT.encode(), subject.encode(), hashlib.sha256).hexdigest()


def test_an_erased_subject_leaves_no_row_in_the_table_or_the_dead_letters(rig) -> None:
    rig.produce(40, bad_for=("c1", "c1", "c2"))
    until_idle(rig.env)
    assert rig.orders_of() == {c: 10 for c in CUSTOMERS}
    assert rig.dead_letters_of() == {"c1": 2, "c2": 1}

    # A dry run counts what would go and touches nothing: no DELETE, no audit, no state.
    dry = rig.erase("--subject", "c1", "--request-id", "r-1", "--dry-run")
    assert dry["dry_run"] is True and dry["rows_deleted"] == 0
    found = {t["table"]: t["rows_found"] for t in dry["tables"]}
    assert found == {f"{rig.dataset}.orders": 10, f"{rig.dead}.dead_letters": 2}
    assert rig.orders_of()["c1"] == 10 and rig.dead_letters_of()["c1"] == 2

    # The erasure: everything Kafka held is loaded, so one pass completes the request.
    done = rig.erase("--subject", "c1", "--request-id", "r-1")
    assert done["rows_deleted"] == 12
    assert [(r["request_id"], r["status"], r["rows_deleted"]) for r in done["requests"]] == [
        ("r-1", "complete", 12)
    ]
    assert rig.orders_of() == {"c0": 10, "c2": 10, "c3": 10}
    assert rig.dead_letters_of() == {"c2": 1}

    # The same request again: harmless, and it says it found nothing.
    again = rig.erase("--subject", "c1", "--request-id", "r-1")
    assert again["rows_deleted"] == 0
    assert again["requests"][0]["status"] == "complete"
    assert again["requests"][0]["note"].endswith("nothing found")
    assert rig.orders_of() == {"c0": 10, "c2": 10, "c3": 10}

    # The audit: every pass of the request, the subject only as its salted hash.
    audit = rig.audit_rows()
    assert [(a["request_id"], a["status"], a["rows_deleted"]) for a in audit] == [
        ("r-1", "complete", 12),
        ("r-1", "complete", 0),
    ]
    assert {a["subject_hash"] for a in audit} == {salted("c1")}
    assert not any(v == "c1" for a in audit for v in a.values())
    assert audit[0]["tables"] == f"{rig.dataset}.orders,{rig.dead}.dead_letters"


def test_rows_staged_or_in_kafka_when_the_request_arrives_are_erased_after_their_load(
    rig,
) -> None:
    rig.produce(20)
    until_idle(rig.env)
    # Staged, not loaded: the run is killed before its first load job is submitted.
    rig.produce(20, bad_for=("c1",))
    killed = subprocess.run(
        [KBQE, "run", "--until-idle", "--json"],
        env={**rig.env, "KBQE_CRASH_AT": "load_before_submit:1"},
        capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert rig.orders_of()["c1"] == 5
    # And some not staged at all: still in Kafka.
    rig.produce(8)

    pending = rig.erase("--subject", "c1", "--request-id", "race-1", expect=3)
    (request,) = pending["requests"]
    assert request["status"] == "pending" and request["rows_deleted"] == 5
    assert {w["topic"] for w in request["waiting_for"]} == {rig.topic}
    assert rig.orders_of().get("c1") is None

    # The catch-up loads the staged rows and the rest, then its erasure step erases them.
    report = json.loads(until_idle(rig.env).stdout)
    assert report["ok"] is True
    assert rig.orders_of() == {"c0": 12, "c2": 12, "c3": 12}
    assert "c1" not in rig.dead_letters_of()
    audit = [(a["request_id"], a["status"]) for a in rig.audit_rows()]
    assert audit[0] == ("race-1", "pending") and audit[-1] == ("race-1", "complete")
    # A later pass of nothing pending finds nothing and changes nothing.
    assert rig.erase("--pending")["requests"] == []


def test_requests_on_the_topic_are_applied_refused_audited_and_checked(rig, monkeypatch) -> None:
    import dagster as dg

    from kbqe_dagster.core.erasure.requests import ErasureRequest, request_message
    from kbqe_dagster.defs.erasure.assets import erasure_checks
    from kbqe_dagster.defs.erasure.sensors import erasure_request_sensor
    from kbqe_dagster.resources.configurable import PipelineResource
    from kbqe_dagster.resources.environment import resources_for_environment

    rig.produce(20)
    until_idle(rig.env)
    create_topic(rig.bootstrap, rig.requests, partitions=1)
    rig.producer.produce(rig.requests, request_message(ErasureRequest("q-1", "c2"))[1], key=b"q-1")
    rig.producer.produce(rig.requests, b"not json", key=b"q-bad")
    assert rig.producer.flush(30) == 0

    monkeypatch.setenv("KBQE_STAGING_URL", rig.env["KBQE_STAGING_URL"])
    monkeypatch.setenv("KBQE_ERASURE_SALT", SALT)
    resources = resources_for_environment(
        "local", PipelineResource(config_path=rig.env["KBQE_PIPELINE_CONFIG"])
    )
    sensor_resources = {k: resources[k] for k in ("pipeline", "staging", "kafka")}

    def tick():
        with dg.instance_for_test() as instance:
            context = dg.build_sensor_context(instance=instance, resources=sensor_resources)
            return erasure_request_sensor(context)

    launched = tick()
    assert isinstance(launched, dg.SensorResult) and len(launched.run_requests) == 1
    assert launched.run_requests[0].tags["kbqe/erasure_reason"] == "2 new request message(s)"

    # The catch-up's erasure step is the job the sensor launches.
    until_idle(rig.env)
    assert rig.orders_of() == {"c0": 5, "c1": 5, "c3": 5}
    audit = {(a["request_id"], a["status"]) for a in rig.audit_rows()}
    assert audit == {("q-1", "complete"), ("q-bad", "refused")}
    refused = next(a for a in rig.audit_rows() if a["request_id"] == "q-bad")
    assert f"kafka:{rig.requests}/0/1" in refused["note"] and refused["subject_hash"] is None

    # Read and applied: nothing for the sensor, and the audit holds every request read.
    assert isinstance(tick(), dg.SkipReason)
    (check,) = erasure_checks(resources["pipeline"].load())
    result = check(**{k: resources[k] for k in ("pipeline", "staging", "kafka", "bigquery")})
    assert result.passed and result.metadata["requests_seen"].value == 2
