"""Per-table options under ``tables:`` (core/record/table_options.py): clustering, partition
expiration, labels and description — what the configuration accepts, what it refuses naming the
key and the column, what a table kbqe creates gets, and the one update an existing table needs."""

from __future__ import annotations

from typing import Any

import pytest

from kbqe_dagster.core.config.pipeline import PipelineConfig, parse_pipeline_config
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.record.table_options import (
    DAY_MS,
    NEVER_EXPIRES,
    TableMetadata,
    TableOptions,
    table_update,
)

ORDER_SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "customer_id", "type": "long"},
        {"name": "amount", "type": "double"},
        {"name": "tags", "type": {"type": "array", "items": "string"}},
        {"name": "placed", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}


def pipeline(tables: dict[str, Any], **top: Any) -> PipelineConfig:
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": "orders",
                    "format": "json",
                    "schema": ORDER_SCHEMA,
                    "event_time": {"fields": ["placed"]},
                    "routing": {"mode": "static", "dataset": "acme_sales", "table": "orders"},
                },
                {
                    "name": "web",
                    "event_time": {"fields": ["ts"]},
                    "routing": {"mode": "static", "dataset": "acme_web", "table": "views"},
                },
                {
                    "name": "dbserver1.inventory.customers",
                    "format": "debezium",
                    "keyed": {},
                    "routing": {"mode": "static", "dataset": "inventory", "table": "customers"},
                },
            ],
            "allowed_destinations": ["acme_web.*"],
            "tables": tables,
            **top,
        }
    )


def problems_of(tables: dict[str, Any], **top: Any) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        pipeline(tables, **top)
    return [f"{path}: {message}" for path, message in caught.value.problems]


# --- what a table is created with ------------------------------------------------------------
def test_a_table_without_options_is_created_as_before_and_left_alone_later() -> None:
    layout = pipeline({}).table_layout("acme_web", "views")
    assert layout.clustering == ()
    assert layout.options == TableOptions()


def test_the_options_of_a_table_entry_reach_its_layout() -> None:
    config = pipeline(
        {
            "acme_sales.orders": {
                "clustering": ["customer_id", "order_id"],
                "partition_expiration_days": 400,
                "labels": {"team": "sales", "tier": 1},
                "description": "Orders as placed",
            }
        }
    )
    layout = config.table_layout("acme_sales", "orders")
    assert layout.clustering == ("customer_id", "order_id")
    assert layout.options == TableOptions(
        clustering=("customer_id", "order_id"),
        partition_expiration_days=400,
        labels={"team": "sales", "tier": "1"},
        description="Orders as placed",
    )
    assert layout.options.expiration_ms == 400 * DAY_MS


def test_the_exact_key_wins_over_its_dataset_wildcard_as_for_partitioning() -> None:
    config = pipeline(
        {
            "acme_web.*": {"labels": {"team": "web"}},
            "acme_web.views": {"labels": {"team": "growth"}, "clustering": ["_kafka_topic"]},
        }
    )
    assert config.table_layout("acme_web", "views").options.labels == {"team": "growth"}
    assert config.table_layout("acme_web", "clicks").options.labels == {"team": "web"}
    assert config.table_layout("acme_web", "clicks").clustering == ()


def test_the_global_expiration_is_the_default_and_a_table_may_say_never() -> None:
    config = pipeline(
        {"acme_web.views": {"partition_expiration_days": None}, "acme_web.*": {}},
        load={"partition_expiration_days": 30},
    )
    assert config.table_layout("acme_web", "clicks").options.partition_expiration_days == 30
    views = config.table_layout("acme_web", "views").options
    assert views.partition_expiration_days == NEVER_EXPIRES
    assert views.expiration_ms is None


def test_a_keyed_changelog_keeps_its_own_clustering_under_a_dataset_wildcard() -> None:
    config = pipeline({"inventory.*": {"clustering": ["email"]}}, allowed_destinations=[
        "acme_web.*", "inventory.*"])  # fmt: skip
    changelog = config.table_layout("inventory", "customers_changelog")
    assert changelog.clustering == ("_kafka_partition", "_kafka_offset")
    assert changelog.options.clustering is None  # never changed after it is created
    assert config.table_layout("inventory", "customers").options.clustering == ("email",)


# --- what the configuration refuses ----------------------------------------------------------
@pytest.mark.parametrize(
    "settings, problem",
    [
        (
            {"clustering": ["a", "b", "c", "d", "e"]},
            "tables.acme_web.views.clustering: BigQuery clusters on at most 4 columns, got 5",
        ),
        (
            {"clustering": ["user.id"]},
            "tables.acme_web.views.clustering: column 'user.id' is not a top-level column name",
        ),
        (
            {"clustering": ["user", "USER"]},
            "tables.acme_web.views.clustering: column 'USER' is named twice",
        ),
        (
            {"labels": {"Team": "web"}},
            "tables.acme_web.views.labels: label key 'Team': must start with a lowercase letter",
        ),
        (
            {"labels": {"team": "Web Apps"}},
            "tables.acme_web.views.labels: label 'team' value 'Web Apps': only lowercase letters",
        ),
        (
            {"labels": {"k" * 64: "v"}},
            f"tables.acme_web.views.labels: label key '{'k' * 64}': must start",
        ),
        (
            {"labels": {f"k{i}": "v" for i in range(65)}},
            "tables.acme_web.views.labels: BigQuery allows at most 64 labels per table, got 65",
        ),
        (
            {"labels": {"kbqe-feed-x": "v"}},
            "tables.acme_web.views.labels: label key 'kbqe-feed-x': kbqe-feed-* labels are kbqe's",
        ),
        (
            {"partition_expiration_days": 0},
            "tables.acme_web.views.partition_expiration_days: must be at least 1, got 0",
        ),
        (
            {"description": "x" * 16_385},
            "tables.acme_web.views.description: at most 16,384 characters, got 16,385",
        ),
        (
            {"clustering": ["_kafka_headers"]},
            "tables.acme_web.views.clustering: acme_web.views: clustering column "
            "'_kafka_headers' is repeated",
        ),
    ],
)
def test_a_wrong_option_is_refused_naming_its_key(settings: dict, problem: str) -> None:
    enrichment = {"headers_column": "_kafka_headers"}
    found = problems_of({"acme_web.views": settings}, enrichment=enrichment)
    assert any(p.startswith(problem) for p in found), found


@pytest.mark.parametrize(
    "column, problem",
    [
        ("customer", "clustering column 'customer' is not a column (columns: _event_date,"),
        ("amount", "clustering column 'amount' is FLOAT; BigQuery clusters only on BIGNUMERIC"),
        ("tags", "clustering column 'tags' is repeated (an array)"),
    ],
)
def test_a_declared_schema_refuses_a_clustering_column_naming_it(column: str, problem: str) -> None:
    [found] = problems_of({"acme_sales.orders": {"clustering": ["customer_id", column]}})
    assert found.startswith(f"tables.acme_sales.orders.clustering: acme_sales.orders: {problem}")


def test_a_declared_schema_accepts_its_clusterable_columns_and_the_kafka_ones() -> None:
    clustering = ["customer_id", "placed", "_kafka_partition", "_event_date"]
    config = pipeline({"acme_sales.orders": {"clustering": clustering}})
    assert config.table_layout("acme_sales", "orders").clustering == tuple(clustering)


def test_a_registry_schema_column_is_left_to_the_load_that_knows_it() -> None:
    config = pipeline({"acme_web.views": {"clustering": ["user_id"]}})
    assert config.table_layout("acme_web", "views").clustering == ("user_id",)


def test_the_changelog_of_a_keyed_topic_refuses_a_clustering_naming_the_current_table() -> None:
    [found] = problems_of({"inventory.customers_changelog": {"clustering": ["id"]}})
    assert found.startswith(
        "tables.inventory.customers_changelog.clustering: inventory.customers_changelog is the "
        "changelog of keyed topic 'dbserver1.inventory.customers'"
    )
    assert "cluster the current table inventory.customers instead" in found


def test_the_dead_letter_table_is_checked_against_its_own_schema() -> None:
    config = pipeline({"kbqe_dead_letters.dead_letters": {"clustering": ["topic", "reason"]}})
    assert config.table_layout("kbqe_dead_letters", "dead_letters").clustering == (
        "topic",
        "reason",
    )
    [found] = problems_of({"kbqe_dead_letters.dead_letters": {"clustering": ["raw_value"]}})
    assert "clustering column 'raw_value' is BYTES" in found


# --- the update an existing table needs ------------------------------------------------------
EXISTING = TableMetadata(
    labels={"team": "web", "kbqe-feed-abc": "area-1", "owner": "ops"},
    description="Page views",
    clustering=("_kafka_topic",),
    partitioned=True,
    expiration_ms=30 * DAY_MS,
)


def test_a_table_in_step_needs_no_update() -> None:
    wanted = TableOptions(("_kafka_topic",), 30, {"team": "web"}, "Page views")
    assert not table_update(EXISTING, wanted)


def test_options_the_configuration_does_not_state_are_left_as_the_table_has_them() -> None:
    assert not table_update(EXISTING, TableOptions())


def test_each_changed_option_is_in_the_field_mask_with_its_new_value() -> None:
    wanted = TableOptions(("user_id", "_kafka_topic"), 90, {"team": "growth"}, "Views")
    update = table_update(EXISTING, wanted)
    assert update.fields == ("labels", "description", "clustering_fields", "time_partitioning")
    assert update.labels == {"team": "growth"}  # only the changed one: a patch merges labels
    assert update.description == "Views"
    assert update.clustering == ("user_id", "_kafka_topic")
    assert update.expiration_ms == 90 * DAY_MS
    assert update.changes == (
        "label team: 'web' -> 'growth'",
        "description",
        "clustering (_kafka_topic) -> (user_id, _kafka_topic)",
        "partition expiration 30 days -> 90 days",
    )


def test_a_label_new_to_the_table_is_added_and_none_is_removed() -> None:
    update = table_update(EXISTING, TableOptions(labels={"team": "web", "tier": "gold"}))
    assert update.fields == ("labels",)
    assert update.labels == {"tier": "gold"}


def test_an_empty_clustering_declusters_and_null_expiration_removes_it() -> None:
    update = table_update(EXISTING, TableOptions(clustering=(), partition_expiration_days=0))
    assert update.fields == ("clustering_fields", "time_partitioning")
    assert update.clustering is None
    assert update.expiration_ms is None


def test_an_unpartitioned_table_gets_no_expiration() -> None:
    current = TableMetadata(clustering=("id",), partitioned=False)
    assert not table_update(current, TableOptions(("id",), 30))


def test_an_empty_description_clears_the_tables_one() -> None:
    update = table_update(EXISTING, TableOptions(description=""))
    assert (update.fields, update.description) == (("description",), "")
    assert (
        pipeline({"acme_web.views": {"description": ""}})
        .table_layout("acme_web", "views")
        .options.description
        == ""
    )


# --- require_partition_filter ------------------------------------------------------------------
def test_require_partition_filter_is_unmanaged_unless_stated_and_a_load_creates_without() -> None:
    assert pipeline({}).table_layout("acme_web", "views").options.require_partition_filter is None
    config = pipeline({"acme_web.*": {"require_partition_filter": True}})
    assert config.table_layout("acme_web", "views").options.require_partition_filter is True


def test_require_partition_filter_must_be_a_boolean() -> None:
    [found] = problems_of({"acme_web.views": {"require_partition_filter": "yes"}})
    assert found.startswith("tables.acme_web.views.require_partition_filter:")


def test_require_partition_filter_is_switched_on_and_off_on_an_existing_table() -> None:
    on = table_update(EXISTING, TableOptions(require_partition_filter=True))
    assert (on.fields, on.require_partition_filter) == (("require_partition_filter",), True)
    assert on.changes == ("require_partition_filter False -> True",)
    required = TableMetadata(require_partition_filter=True)
    off = table_update(required, TableOptions(require_partition_filter=False))
    assert (off.fields, off.require_partition_filter) == (("require_partition_filter",), False)
    assert not table_update(required, TableOptions(require_partition_filter=True))
    assert not table_update(required, TableOptions())  # not stated: left as it is


def test_an_unpartitioned_table_never_requires_a_partition_filter() -> None:
    """A keyed current table has no partitions; its changelog takes the option."""
    current = TableMetadata(partitioned=False)
    assert not table_update(current, TableOptions(require_partition_filter=True))
