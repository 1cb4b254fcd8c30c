"""A destination table's layout, decided once (core/config/table_layout.py): the load
coordinator creates tables with it and the duplicate-offset check prunes on it."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.config.pipeline import PipelineConfig, parse_pipeline_config
from kbqe_dagster.core.config.table_layout import TableLayout
from kbqe_dagster.core.record.partitioning import Partitioning

OFFSETS = ("_kafka_topic", "_kafka_partition", "_kafka_offset")


@pytest.fixture(scope="module")
def config() -> PipelineConfig:
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
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
            "allowed_destinations": ["acme_web.*", "acme_sales.orders"],
            "tables": {"acme_web.*": {"partitioning": "hour"}},
        }
    )


@pytest.mark.parametrize(
    "table, layout",
    [
        ("acme_sales.orders", TableLayout(Partitioning.DAY, "_event_date", (), OFFSETS, False)),
        ("acme_web.views", TableLayout(Partitioning.HOUR, "_event_hour", (), OFFSETS, False)),
        (
            "inventory.customers_changelog",
            TableLayout(
                Partitioning.DAY,
                "_event_date",
                ("_kafka_partition", "_kafka_offset"),
                OFFSETS,
                False,
            ),
        ),
        (
            "kbqe_dead_letters.dead_letters",
            TableLayout(
                Partitioning.DAY, "staged_date", (), ("topic", "partition", "offset"), True
            ),
        ),
    ],
)
def test_each_table_has_one_layout(config: PipelineConfig, table: str, layout: TableLayout) -> None:
    assert config.table_layout(*table.split(".")) == layout


def test_the_dead_letter_table_is_named_in_one_place(config: PipelineConfig) -> None:
    assert config.is_dead_letter_table("kbqe_dead_letters", "dead_letters")
    assert not config.is_dead_letter_table("kbqe_dead_letters", "other")
    assert not config.is_dead_letter_table("acme_web", "dead_letters")
    assert config.dead_letter.is_table("kbqe_dead_letters", "dead_letters")
