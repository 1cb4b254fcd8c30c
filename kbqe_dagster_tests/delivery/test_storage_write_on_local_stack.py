"""Storage Write delivery end to end on the local stack (Kafka, registry, fake GCS, the
BigQuery emulator and its Storage Write API on its gRPC port): one topic feeds ``page_views``
(``delivery: load``) and ``orders`` (``delivery: storage_write``); ``kbqe run --until-idle``
twice, the second idle; each table holds every message exactly once (count == distinct
offsets == produced); the orders were appended, never loaded (no avro file of theirs ever in
the staging area, no load job); a kill at each new crash point then a rerun gives exactly one
copy; a table switched from load to storage_write between runs, and back, loses and doubles
nothing.

Isolated like the other ``kbqe run`` tests: a topic, staging prefix, datasets and Dagster
instance of this test only.
"""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml

from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.demo.samples import ORDER_V1, PAGE_VIEW, SampleMessage, produce, register_schemas
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster_tests.kbqe_run import KBQE, cli_env, create_topic, drop_datasets
from kbqe_dagster_tests.loading.test_stage_then_load import _body

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 2
NOW = datetime.now(UTC).replace(microsecond=0)


class Rig:
    """One test's topic, datasets, staging prefix and pipeline file."""

    def __init__(self, endpoints, tmp_path, orders_delivery: str = "storage_write") -> None:
        self.run = uuid.uuid4().hex[:8]
        self.endpoints = endpoints
        self.tmp = tmp_path
        self.topic = f"sw.events{self.run}"
        self.web, self.sales, self.dead = (
            f"sw_web_{self.run}",
            f"sw_sales_{self.run}",
            f"sw_dead_{self.run}",
        )
        self.prefix = f"sw-{self.run}"
        create_topic(endpoints.kafka_bootstrap, self.topic, PARTITIONS)
        self.ids = register_schemas(endpoints.registry_url)
        self.produced = {"page_views": 0, "orders": 0}
        self.client = local_bigquery_client()
        self.env = cli_env(
            tmp_path, self.pipeline(orders_delivery), f"gs://{LOCAL_BUCKET}/{self.prefix}"
        )
        self.env["KBQE_GCS_ENDPOINT"] = self.endpoints.gcs_url
        self.env["KBQE_GCP_PROJECT"] = LOCAL_PROJECT

    def set_delivery(self, orders: str) -> None:
        """Rewrite the pipeline file between runs: ``orders`` delivered by ``orders``."""
        Path(self.env["KBQE_PIPELINE_CONFIG"]).write_text(yaml.safe_dump(self.pipeline(orders)))

    def pipeline(self, orders: str) -> dict:
        return {
            "version": 1,
            "topics": [{"name": self.topic, "event_time": {"fields": ["eventTime", "occurredAt"]}}],
            "allowed_destinations": [f"{self.web}.page_views", f"{self.sales}.orders"],
            "tables": {f"{self.sales}.orders": {"delivery": orders}},
            "dead_letter": {"dataset": self.dead, "table": "dead_letters"},
        }

    def produce(self, views: int, orders: int) -> None:
        out = []
        for i in range(views):
            n = self.produced["page_views"] + i
            moment = NOW - timedelta(minutes=n)
            out.append(
                SampleMessage(
                    None,
                    encode_frame(
                        self.ids["page_views"],
                        _body(
                            PAGE_VIEW,
                            {
                                "datasetName": self.web,
                                "tableName": "page_views",
                                "url": f"/p/{n}",
                                "sessionId": f"s-{n}",
                                "durationMs": n,
                                "occurredAt": moment,
                            },
                        ),
                    ),
                    (self.web, "page_views"),
                    None,
                    moment.date().isoformat(),
                )
            )
        for i in range(orders):
            n = self.produced["orders"] + i
            moment = NOW - timedelta(minutes=n)
            out.append(
                SampleMessage(
                    None,
                    encode_frame(
                        self.ids["orders_v1"],
                        _body(
                            ORDER_V1,
                            {
                                "datasetName": self.sales,
                                "tableName": "orders",
                                "orderId": f"o-{n}",
                                "customerId": n,
                                "amountCents": 100 + n,
                                "currency": "EUR",
                                "eventTime": moment.isoformat(timespec="milliseconds"),
                            },
                        ),
                    ),
                    (self.sales, "orders"),
                    None,
                    moment.date().isoformat(),
                )
            )
        produce(self.endpoints.kafka_bootstrap, self.topic, out, PARTITIONS)
        self.produced["page_views"] += views
        self.produced["orders"] += orders

    def kbqe_run(self, crash_at: str | None = None) -> subprocess.CompletedProcess:
        env = dict(self.env)
        if crash_at:
            env["KBQE_CRASH_AT"] = crash_at
        return subprocess.run(
            [KBQE, "run", "--until-idle", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
        )

    def until_idle(self) -> dict:
        done = self.kbqe_run()
        assert done.returncode == 0, done.stderr[-3000:]
        return json.loads(done.stdout)

    def counts(self, dataset: str, table: str) -> tuple[int, int]:
        """(rows, distinct (partition, offset)) of a table."""
        row = list(
            self.client.query_and_wait(
                f"SELECT COUNT(*) AS n, COUNT(DISTINCT CONCAT(CAST(_kafka_partition AS STRING), ':', "
                f"CAST(_kafka_offset AS STRING))) AS d FROM `{dataset}.{table}`"
            )
        )[0]
        return row["n"], row["d"]

    def assert_exactly_once(self) -> None:
        n = self.produced
        assert self.counts(self.web, "page_views") == (n["page_views"], n["page_views"])
        assert self.counts(self.sales, "orders") == (n["orders"], n["orders"])

    def staging_names(self) -> list[str]:
        store = StagingLocation(
            f"gs://{LOCAL_BUCKET}/{self.prefix}", self.endpoints.gcs_url, LOCAL_PROJECT
        ).open()
        return sorted(f.name for f in store.list(""))

    def remove(self) -> None:
        drop_datasets(self.client, self.web, self.sales, self.dead)


@pytest.fixture
def rig(local_stack, local_endpoints, tmp_path):
    rig = Rig(local_endpoints, tmp_path)
    yield rig
    rig.remove()


def test_one_topic_two_tables_each_row_once_and_the_appended_table_never_loaded(rig) -> None:
    rig.produce(views=30, orders=24)
    first = rig.until_idle()
    assert first["topics"][rig.topic]["staged"] == 54
    again = rig.until_idle()
    assert again["topics"][rig.topic]["staged"] == 0, "the second run is idle"
    rig.assert_exactly_once()
    names = rig.staging_names()
    assert not [n for n in names if ".orders." in n and n.endswith(".avro")]
    assert [n for n in names if ".orders." in n and n.endswith(".done")]
    assert not [
        n
        for n in names
        if n.endswith(".intent") and ".orders." in n and n.replace(".intent", ".done") not in names
    ], "no open intent left"
    with dg.DagsterInstance.from_config(rig.env["DAGSTER_HOME"]) as instance:
        key = dg.AssetKey(["bigquery", rig.sales, "orders"])
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key), limit=100
        ).records
        metadata = [r.asset_materialization.metadata for r in records]
        (check,) = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(key, "rows_loaded"), limit=1
        )
    assert sum(m["dagster/row_count"].value for m in metadata) == 24
    assert all(m["delivery"].value == "storage_write" and "job_id" not in m for m in metadata)
    assert check.status.value == "SUCCEEDED"


@pytest.mark.parametrize(
    "point", ["storage_write_intent:1", "storage_write_appended:1", "storage_write_delivered:1"]
)
def test_a_kill_at_each_new_crash_point_then_a_rerun_gives_exactly_one_copy(rig, point) -> None:
    rig.produce(views=10, orders=10)
    rig.until_idle()
    rig.produce(views=8, orders=12)
    killed = rig.kbqe_run(crash_at=point)
    assert killed.returncode != 0, "the crash point was reached"
    assert [
        n
        for n in rig.staging_names()
        if n.endswith(".intent") and n.replace(".intent", ".done") not in rig.staging_names()
    ], "an open intent"
    rig.until_idle()
    rig.until_idle()
    rig.assert_exactly_once()


def test_switching_a_table_between_load_and_storage_write_loses_and_doubles_nothing(
    rig, local_stack
) -> None:
    rig.set_delivery("load")
    rig.produce(views=6, orders=9)
    rig.until_idle()
    rig.assert_exactly_once()
    rig.set_delivery("storage_write")
    rig.produce(views=5, orders=11)
    rig.until_idle()
    rig.assert_exactly_once()
    rig.set_delivery("load")
    rig.produce(views=4, orders=7)
    rig.until_idle()
    rig.until_idle()
    rig.assert_exactly_once()
