"""Kafka → Spark stage job → load coordinator → BigQuery emulator, on the whole local stack:
the tables end up with exactly the good messages (count and distinct (partition, offset)) on
their event dates, the dead-letter table with exactly the bad ones, and the staging area
with no avro file left.

Messages use the demo schemas (orders v1 and v2, page views) under datasets of this run
only, so the persistent emulator's demo tables are never touched. Orders v2 adds a field:
the emulator ignores ALLOW_FIELD_ADDITION (DESIGN.md §7), so the local resource adds the
column before the load (``add_columns_before_load``); BigQuery's own behaviour is covered by
``test_emulator_gap_field_addition_*`` against the fake client.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.demo.samples import (
    bad_messages,
    produce,
    register_schemas,
)
from kbqe_dagster.loading.coordinator import LoadCoordinator
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT
from kbqe_dagster.resources.bigquery import EmulatorBigQueryLoads
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stage_context
from kbqe_dagster.staging.job import run_stage
from kbqe_dagster_tests.support.demo_messages import GOOD, good_messages

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 3


def test_kafka_messages_staged_by_spark_land_exactly_once_in_bigquery(
    local_stack, local_endpoints, spark_context
) -> None:
    run = uuid.uuid4().hex[:8]
    topic = f"com.acme.events.e2e{run}"
    admin = AdminClient({"bootstrap.servers": local_endpoints.kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[
        topic
    ].result(30)
    ids = register_schemas(local_endpoints.registry_url)
    placed = produce(
        local_endpoints.kafka_bootstrap,
        topic,
        good_messages(run, ids) + bad_messages(ids),
        PARTITIONS,
    )
    config = parse_pipeline_config(
        {
            "version": 1,
            "topics": [{"name": topic, "event_time": {"fields": ["eventTime", "occurredAt"]}}],
            "allowed_destinations": [f"acme_sales_{run}.*", f"acme_web_{run}.*"],
            "dead_letter": {"dataset": f"dead_{run}", "table": "dead_letters"},
            "load": {"max_retries": 1},
        },
        source="e2e",
    )
    staging = StagingLocation(
        f"gs://{LOCAL_BUCKET}/e2e-{run}", local_endpoints.gcs_url, LOCAL_PROJECT
    )
    ctx = stage_context(
        KafkaSettings(local_endpoints.kafka_bootstrap),
        RegistrySettings(local_endpoints.registry_url),
        staging,
        config,
        topic,
    )
    client = local_bigquery_client()
    try:
        # A fresh partition's first run stages one range (it anchors the chain); the next
        # run stages the rest in parallel ranges.
        while run_stage(
            spark_context, ctx, max_messages_per_run=100_000, max_messages_per_range=400
        ).results:
            pass
        loads = EmulatorBigQueryLoads(client)
        report = LoadCoordinator(staging.open(), loads, config).run_cycle()

        assert report.quarantined == [] and report.pending_after == 0
        assert [c.rows_check.passed for c in report.completed] == [True] * len(report.completed)
        for table in ((f"acme_sales_{run}", "orders"), (f"acme_web_{run}", "page_views")):
            expected = {where: m for where, m in placed.items() if m.expect_table == table}
            rows = [
                tuple(r.values())
                for r in client.query_and_wait(
                    f"SELECT _kafka_partition, _kafka_offset, CAST(_event_date AS STRING) "
                    f"FROM `{table[0]}.{table[1]}` WHERE _kafka_topic = '{topic}'"
                )
            ]
            assert len(rows) == len(expected), table
            assert {(p, o): d for p, o, d in rows} == {w: m.event_date for w, m in expected.items()}
        coupons = {
            tuple(r.values())
            for r in client.query_and_wait(
                f"SELECT COUNT(*), COUNT(coupon) FROM `acme_sales_{run}.orders`"
            )
        }
        orders = sum(
            1 for m in placed.values() if m.expect_table == (f"acme_sales_{run}", "orders")
        )
        assert coupons == {(orders, GOOD // 4)}, "v1 rows have no coupon, every v2 row has one"
        dead = {
            tuple(r.values())
            for r in client.query_and_wait(
                f"SELECT `partition`, `offset` FROM `dead_{run}.dead_letters`"
            )
        }
        assert dead == {w for w, m in placed.items() if m.expect_table is None}
        leftover = [f.name for f in staging.open().list() if f.name.endswith(".avro")]
        assert leftover == []
    finally:
        for dataset in (f"acme_sales_{run}", f"acme_web_{run}", f"dead_{run}"):
            client.delete_dataset(dataset, delete_contents=True, not_found_ok=True)
