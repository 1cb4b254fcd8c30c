"""Per-table options on the load path, against the fake BigQuery client at the boundary: the
request a creating load sends, the one table update an existing table gets when the
configuration changed (its field mask and values), the one metadata read per run it costs, and a
clustering column refused naming it. The emulator shows the tables these requests make
(``test_table_options_on_emulators.py``) but neither records a creating load's options nor
validates clustering columns and labels: pinned by ``test_emulator_gap_table_options_of_a_load_not_recorded``
and ``test_emulator_gap_clustering_and_labels_not_validated`` (localstack/test_bigquery_contract.py)."""

from __future__ import annotations

import logging
from datetime import date
from typing import Any

from google.api_core.exceptions import BadRequest

from kbqe_dagster.core.config.pipeline import PipelineConfig, parse_pipeline_config
from kbqe_dagster.core.record.partitioning import Partitioning
from kbqe_dagster.core.record.table_options import DAY_MS
from kbqe_dagster.loading.coordinator import LoadCoordinator
from kbqe_dagster.resources.bigquery import GoogleBigQueryLoads, LoadRequest
from kbqe_dagster.resources.bigquery.jobs import new_table
from kbqe_dagster.resources.staging_store import LocalStagingStore
from kbqe_dagster_tests.loading.conftest import ORDERS_V1, TOPIC
from kbqe_dagster_tests.loading.fake_bigquery import FakeBigQueryClient
from kbqe_dagster_tests.loading.staged import ORDER_V1, Table, stage_range

DAY = date(2024, 9, 13)
ORDERS = ("acme_sales", "orders")
FIRST = {
    "clustering": ["orderId"],
    "partition_expiration_days": 400,
    "labels": {"team": "sales"},
    "description": "Orders as placed",
}


def pipeline(orders: dict[str, Any] | None = None) -> PipelineConfig:
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [{"name": TOPIC, "event_time": {"fields": ["eventTime"]}}],
            "allowed_destinations": ["acme_sales.*"],
            "tables": {"acme_sales.orders": orders} if orders else {},
            "load": {"max_retries": 1},
        },
        source="test",
    )


def cycle(store, bq: FakeBigQueryClient, config: PipelineConfig, first_offset: int):
    stage_range(store, TOPIC, 0, first_offset, first_offset + 2, [(ORDERS_V1, 3, DAY)])
    return LoadCoordinator(store, GoogleBigQueryLoads(bq), config).run_cycle()


def test_a_creating_load_carries_the_options_and_the_job_keeps_its_own_labels(store, bq) -> None:
    report = cycle(store, bq, pipeline(FIRST), 0)

    [job_id] = report.submitted
    config = bq.jobs[job_id].config
    assert config.clustering_fields == ["orderId"]
    assert config.time_partitioning.field == "_event_date"
    assert config.time_partitioning.expiration_ms == 400 * DAY_MS
    assert config._properties["load"]["destinationTableProperties"] == {
        "description": "Orders as placed",
        "labels": {"team": "sales"},
    }
    assert config.labels == {
        "pipeline": "kbqe_dagster",
        "kbqe_dataset": "acme_sales",
        "kbqe_table": "orders",
    }
    created = bq.tables[ORDERS]
    assert (created.clustering_fields, created.description) == (["orderId"], "Orders as placed")
    assert created.labels["team"] == "sales"
    assert bq.table_updates == [(("labels",), {"labels": created.labels})]  # the feed label only


def test_a_table_in_step_is_not_updated_and_its_options_cost_one_read_per_run(tmp_path) -> None:
    def second_load(orders: dict[str, Any] | None) -> tuple[int, list]:
        store, bq = LocalStagingStore(tmp_path / str(orders is None)), FakeBigQueryClient()
        cycle(store, bq, pipeline(orders), 0)
        bq.table_reads.clear()
        updates = len(bq.table_updates)
        cycle(store, bq, pipeline(orders), 3)
        return bq.table_reads.count(ORDERS), bq.table_updates[updates:]

    (with_options, updates), (without, _) = second_load(FIRST), second_load(None)

    assert with_options == without + 1  # a table without options pays nothing
    assert updates == []


def test_changed_options_are_one_update_of_the_fields_that_differ(store, bq, caplog) -> None:
    cycle(store, bq, pipeline(FIRST), 0)
    feed_labels = dict(bq.tables[ORDERS].labels)
    before = len(bq.table_updates)
    changed = {
        "clustering": ["amountCents", "orderId"],
        "partition_expiration_days": 90,
        "labels": {"team": "revenue", "tier": "gold"},
        "description": "Orders",
    }

    with caplog.at_level(logging.INFO, logger="kbqe_dagster.loading.coordinator"):
        cycle(store, bq, pipeline(changed), 3)

    [(mask, values)] = bq.table_updates[before:][:1]
    assert mask == ("labels", "description", "clustering_fields", "time_partitioning")
    assert values["labels"] == {**feed_labels, "team": "revenue", "tier": "gold"}
    assert values["description"] == "Orders"
    assert values["clustering_fields"] == ["amountCents", "orderId"]
    tp = values["time_partitioning"]
    assert (tp.type_, tp.field, tp.expiration_ms) == ("DAY", "_event_date", 90 * DAY_MS)
    assert (
        "acme_sales.orders: updated label team: 'sales' -> 'revenue'; label tier: None -> "
        "'gold'; description; clustering (orderId) -> (amountCents, orderId); partition "
        "expiration 400 days -> 90 days"
    ) in caplog.messages
    settled = len(bq.table_updates)
    cycle(store, bq, pipeline(changed), 6)
    assert bq.table_updates[settled:] == [], "in step after the update: nothing more"


def test_a_refused_update_is_logged_and_never_holds_the_rows_back(store, bq, caplog) -> None:
    cycle(store, bq, pipeline(FIRST), 0)

    def refuse(table, fields):
        raise BadRequest("Clustering fields can not be changed in this way")

    bq.update_table = refuse
    with caplog.at_level(logging.WARNING, logger="kbqe_dagster.loading.coordinator"):
        report = cycle(store, bq, pipeline({**FIRST, "clustering": ["amountCents"]}), 3)

    assert [c.job.table for c in report.completed] == ["orders"]
    assert len(bq.rows(*ORDERS)) == 6
    assert any(
        m.startswith("acme_sales.orders: could not update clustering (orderId) -> (amountCents)")
        for m in caplog.messages
    )


def test_a_clustering_column_the_files_lack_is_refused_naming_it_and_the_file(store, bq) -> None:
    # A registry schema is not known at config check: the first file's schema decides.
    report = cycle(store, bq, pipeline({"clustering": ["customerId"]}), 0)

    [quarantined] = report.quarantined
    assert quarantined.error.startswith(
        "acme_sales.orders: clustering column 'customerId' is not a column (columns: "
        "_event_date, _kafka_topic, _kafka_partition, _kafka_offset, _kafka_timestamp, "
        "orderId, amountCents) in the schema of "
    )
    assert "(tables.acme_sales.orders.clustering or its dataset.*)" in quarantined.error
    assert ORDERS not in bq.tables


def test_a_table_created_before_its_rows_gets_the_same_options() -> None:
    # Storage Write deliveries and the emulator's map loads create the table themselves.
    request = LoadRequest(
        job_id="",
        dataset="acme_sales",
        table="orders",
        source_uris=(),
        partition_field="_event_hour",
        partition_expiration_days=7,
        avro_schema=ORDERS_V1.file_schema,
        clustering_fields=("orderId",),
        partitioning=Partitioning.HOUR,
        table_labels={"team": "sales"},
        description="Orders as placed",
    )

    table = new_table(request, "p.acme_sales.orders")

    assert (table.clustering_fields, table.labels, table.description) == (
        ["orderId"],
        {"team": "sales"},
        "Orders as placed",
    )
    tp = table.time_partitioning
    assert (tp.type_, tp.field, tp.expiration_ms) == ("HOUR", "_event_hour", 7 * DAY_MS)


def test_require_partition_filter_is_set_by_the_creating_load_and_switched_at_a_later_one(
    store, bq, caplog
) -> None:
    """BigQuery's load API carries the flag in ``timePartitioning`` (the table's own field is
    what a later update sets); turned off in the configuration, the next load's update does."""
    report = cycle(store, bq, pipeline({"require_partition_filter": True}), 0)

    [job_id] = report.submitted
    assert bq.jobs[job_id].config.time_partitioning._properties["requirePartitionFilter"] is True
    assert bq.tables[ORDERS].require_partition_filter is True
    before = len(bq.table_updates)
    cycle(store, bq, pipeline({"require_partition_filter": True}), 3)
    assert bq.table_updates[before:] == [], "created with it: in step"

    with caplog.at_level(logging.INFO, logger="kbqe_dagster.loading.coordinator"):
        cycle(store, bq, pipeline({"require_partition_filter": False}), 6)

    assert bq.table_updates[before:] == [
        (("require_partition_filter",), {"require_partition_filter": False})
    ]
    assert "acme_sales.orders: updated require_partition_filter True -> False" in caplog.messages
    assert len(bq.rows(*ORDERS)) == 9


def test_a_table_created_before_its_rows_requires_the_filter_too() -> None:
    request = LoadRequest(
        job_id="",
        dataset="acme_sales",
        table="orders",
        source_uris=(),
        partition_field="_event_date",
        avro_schema=ORDERS_V1.file_schema,
        require_partition_filter=True,
    )

    assert new_table(request, "p.acme_sales.orders").require_partition_filter is True


def test_columns_are_described_by_the_creating_load_and_a_new_doc_reaches_the_next_one(
    store, bq
) -> None:
    """The creating load's schema carries the files' ``doc`` and kbqe's fixed descriptions of
    its Kafka columns; a newer schema documenting a field updates that column's description
    with the schema update its load makes (core/record/column_descriptions.py)."""
    report = cycle(store, bq, pipeline(), 0)
    [job_id] = report.submitted
    sent = {f.name: f.description for f in bq.jobs[job_id].config.schema}
    assert sent["_kafka_offset"].startswith("Kafka offset of the message within its partition")
    assert sent["_event_date"].startswith("Event date (UTC) of the Kafka message")
    assert sent["orderId"] is None  # no doc in the schema
    assert bq.tables[ORDERS].field("_kafka_topic")["description"] == (
        "Kafka topic the row was read from."
    )

    documented = Table(
        "acme_sales",
        "orders",
        12,
        {
            **ORDER_V1,
            "fields": [
                {"name": "orderId", "type": "string", "doc": "The shop's order id."},
                {"name": "amountCents", "type": "long"},
            ],
        },
    )
    stage_range(store, TOPIC, 0, 3, 5, [(documented, 3, DAY)])
    LoadCoordinator(store, GoogleBigQueryLoads(bq), pipeline()).run_cycle()

    assert bq.tables[ORDERS].field("orderId")["description"] == "The shop's order id."
    assert bq.tables[ORDERS].field("_kafka_topic")["description"] == (
        "Kafka topic the row was read from."
    )
    assert len(bq.rows(*ORDERS)) == 6
