"""A rig on the local stack for a topic whose tables take the Storage Write API (page views) and
batch loads (orders): it produces, runs ``kbqe run --until-idle`` and reads the tables back.
What the storage-write, table-contract, cost and stage-loop tests share."""

from __future__ import annotations

import json
import subprocess
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

import yaml

from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.demo.samples import ORDER_V1, PAGE_VIEW, SampleMessage, produce, register_schemas
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster_tests.kbqe_run import KBQE, cli_env, create_topic, drop_datasets
from kbqe_dagster_tests.support.framing import avro_body

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
                        avro_body(
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
                        avro_body(
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
