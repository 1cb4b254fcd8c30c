"""An HOUR-partitioned table end to end on the local stack: ``kbqe run --until-idle`` stages
page views (``tables: {...page_views: {partitioning: hour}}``) and orders (DAY) from one
topic and loads them into the BigQuery emulator; each page view carries its UTC event hour,
the load reports one materialization per hour partition, ``kbqe completeness --json`` speaks
in hours; run again, nothing happens.

The emulator does not record a load's time partitioning (DAY or HOUR): the table it reports
is unpartitioned — the gap ``test_emulator_gap_hour_partitioning_of_a_load_not_recorded``
pins (kbqe_dagster_tests/localstack/test_bigquery_contract.py); that the load job asks for
HOUR on ``_event_hour`` is tested at the boundary (resources/test_bigquery_loads.py).

Isolated like the other ``kbqe run`` tests: a topic, staging prefix, datasets and Dagster
instance of this run only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml

from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.demo.samples import ORDER_V1, PAGE_VIEW, SampleMessage, produce, register_schemas
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT
from kbqe_dagster.resources.bigquery import GoogleBigQueryLoads
from kbqe_dagster_tests.kbqe_run import create_topic, drop_datasets
from kbqe_dagster_tests.support.framing import avro_body

pytestmark = [pytest.mark.integration, pytest.mark.slow]

KBQE = Path(sys.executable).parent / "kbqe"
REPO = Path(__file__).resolve().parents[2]
PARTITIONS = 2
START = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) - timedelta(hours=30)


def _messages(run: str, ids: dict[str, int]) -> list[SampleMessage]:
    """40 page views 37 minutes apart (26 hours of them) and 10 orders."""
    views = (f"hourly_web_{run}", "page_views")
    orders = (f"hourly_sales_{run}", "orders")
    out = []
    for i in range(40):
        moment = START + timedelta(minutes=37 * i, seconds=i)
        value = encode_frame(
            ids["page_views"],
            avro_body(
                PAGE_VIEW,
                {
                    "datasetName": views[0],
                    "tableName": views[1],
                    "url": f"/p/{i}",
                    "sessionId": f"s-{i}",
                    "durationMs": i,
                    "occurredAt": moment,
                },
            ),
        )
        out.append(SampleMessage(None, value, views, None, moment.date().isoformat()))
    for i in range(10):
        moment = START + timedelta(hours=i)
        value = encode_frame(
            ids["orders_v1"],
            avro_body(
                ORDER_V1,
                {
                    "datasetName": orders[0],
                    "tableName": orders[1],
                    "orderId": f"o-{i}",
                    "customerId": i,
                    "amountCents": 100 + i,
                    "currency": "EUR",
                    "eventTime": moment.isoformat(timespec="milliseconds"),
                },
            ),
        )
        out.append(SampleMessage(None, value, orders, None, moment.date().isoformat()))
    return out


@pytest.fixture
def hourly(local_stack, local_endpoints, tmp_path):
    run = uuid.uuid4().hex[:8]
    topic = f"hourly.events{run}"
    create_topic(local_endpoints.kafka_bootstrap, topic, PARTITIONS)
    ids = register_schemas(local_endpoints.registry_url)
    produce(local_endpoints.kafka_bootstrap, topic, _messages(run, ids), PARTITIONS)
    views, orders, dead = f"hourly_web_{run}", f"hourly_sales_{run}", f"hourly_dead_{run}"
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topics": [{"name": topic, "event_time": {"fields": ["eventTime", "occurredAt"]}}],
                "allowed_destinations": [f"{views}.page_views", f"{orders}.*"],
                "tables": {f"{views}.page_views": {"partitioning": "hour"}},
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
        "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/hourly-{run}",
        "DAGSTER_HOME": str(home),
    }
    client = local_bigquery_client()
    # `kbqe completeness` reads a gs:// staging URL through the endpoint and project named.
    env["KBQE_GCS_ENDPOINT"], env["KBQE_GCP_PROJECT"] = local_endpoints.gcs_url, LOCAL_PROJECT
    yield topic, views, orders, env, home, client
    drop_datasets(client, views, orders, dead)


def _kbqe(env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(KBQE), *args], env=env, capture_output=True, text=True, timeout=900)


def test_an_hour_table_loads_per_hour_and_a_second_run_is_idle(hourly) -> None:
    topic, views, orders, env, home, client = hourly
    expected_hours = Counter(
        (START + timedelta(minutes=37 * i, seconds=i)).strftime("%Y-%m-%dT%H") for i in range(40)
    )

    for attempt in range(2):
        done = _kbqe(env, "run", "--until-idle", "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        report = json.loads(done.stdout)
        assert report["topics"][topic]["staged"] == (50 if attempt == 0 else 0)
        assert report["topics"][topic]["dead_lettered"] == 0

    rows = [
        dict(r)
        for r in client.query_and_wait(
            f"SELECT url, occurredAt, _event_hour, _event_date FROM `{views}.page_views`"
        )
    ]
    assert len(rows) == 40, "each page view once, after two runs"
    for row in rows:
        truncated = row["occurredAt"].replace(minute=0, second=0, microsecond=0)
        assert row["_event_hour"] == truncated, row
        assert row["_event_date"] == row["occurredAt"].date(), row
    order_columns = {f.name for f in client.get_table(f"{orders}.orders").schema}
    assert "_event_hour" not in order_columns and "_event_date" in order_columns
    assert list(client.query_and_wait(f"SELECT COUNT(*) AS n FROM `{orders}.orders`"))[0]["n"] == 10
    # The emulator's creating load records no partitioning (test_emulator_gap_hour_*): the
    # local load path gives it by a table update, so the table reads back as on BigQuery.
    partitioning = client.get_table(f"{views}.page_views").time_partitioning
    assert (partitioning.type_, partitioning.field) == ("HOUR", "_event_hour")
    # The opt-in duplicate-offset query prunes an HOUR table on its TIMESTAMP column.
    duplicates = GoogleBigQueryLoads(client).duplicate_offsets(
        views,
        "page_views",
        ("_kafka_topic", "_kafka_partition", "_kafka_offset"),
        "_event_hour",
        START.date(),
        timestamp_column=True,
    )
    assert duplicates.duplicates == ()

    with dg.DagsterInstance.from_config(str(home)) as instance:
        key = dg.AssetKey(["bigquery", views, "page_views"])
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key), limit=1000
        ).records
        per_hour: Counter[str] = Counter()
        for record in records:
            materialization = record.asset_materialization
            per_hour[materialization.partition] += materialization.metadata[
                "dagster/row_count"
            ].value
        orders_keys = {
            r.asset_materialization.partition
            for r in instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=dg.AssetKey(["bigquery", orders])), limit=1000
            ).records
        }
    assert per_hour == expected_hours
    assert all("T" not in str(k) for k in orders_keys), "the DAY table reports days"

    completeness = _kbqe(env, "completeness", "--json", "--table", f"{views}.page_views")
    assert completeness.returncode == 0, completeness.stderr[-3000:]
    table = json.loads(completeness.stdout)["tables"][f"{views}.page_views"]
    assert table["partitioning"] == "hour"
    # Both partitions are caught up: complete up to the hour before now minus the lateness.
    newest = datetime.strptime(table["newest_complete"], "%Y-%m-%dT%H").replace(tzinfo=UTC)
    assert datetime.now(UTC) - newest < timedelta(hours=3)
    assert table["held_back_by"] == []
