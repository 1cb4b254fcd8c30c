"""Per table, how rows reach BigQuery (``delivery: load | storage_write``): the ``tables:``
entry, else the writing topic's ``delivery:``, else ``load``; and what this slice refuses."""

from __future__ import annotations

from typing import Any

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.record.partitioning import Delivery
from kbqe_dagster_tests.support.delivery_configs import config_problems, pipeline_with


def test_every_table_is_loaded_unless_the_file_says_otherwise() -> None:
    config = parse_pipeline_config(pipeline_with())
    assert config.delivery("acme_web", "views") is Delivery.LOAD
    assert config.delivery("acme_sales", "orders", "sales") is Delivery.LOAD
    assert config.table_layout("acme_web", "views").delivery is Delivery.LOAD
    assert not config.topic_may_deliver_by_storage_write("web")
    assert not config.topic_may_deliver_by_storage_write("sales")


def test_a_tables_entry_sets_a_table_s_delivery_and_an_exact_key_wins() -> None:
    config = parse_pipeline_config(
        pipeline_with(
            {
                "acme_sales.*": {"delivery": "storage_write"},
                "acme_sales.refunds": {"delivery": "load"},
            }
        )
    )
    assert config.delivery("acme_sales", "orders", "sales") is Delivery.STORAGE_WRITE
    assert config.delivery("acme_sales", "refunds", "sales") is Delivery.LOAD
    assert config.table_layout("acme_sales", "orders").delivery is Delivery.STORAGE_WRITE
    # A topic whose routing names tables per record may write it: one range per partition.
    assert config.topic_may_deliver_by_storage_write("sales")
    assert not config.topic_may_deliver_by_storage_write("web")  # static route to a load table


def test_a_topic_s_delivery_is_the_default_of_the_tables_it_writes() -> None:
    config = parse_pipeline_config(
        pipeline_with({"acme_web.clicks": {"delivery": "load"}}, topic_delivery="storage_write")
    )
    assert config.delivery("acme_web", "views", "web") is Delivery.STORAGE_WRITE
    assert config.delivery("acme_web", "views") is Delivery.STORAGE_WRITE  # its static table
    assert config.delivery("acme_web", "clicks", "web") is Delivery.LOAD  # tables: wins
    assert config.topic_may_deliver_by_storage_write("web")


def test_the_dead_letter_table_follows_its_own_entry_not_the_topic_s() -> None:
    config = parse_pipeline_config(pipeline_with(topic_delivery="storage_write"))
    assert config.delivery("kbqe_dead_letters", "dead_letters", "web") is Delivery.LOAD


@pytest.mark.parametrize(
    "tables, topic_delivery, expected",
    [
        (
            {"acme_web.views": {"delivery": "streaming"}},
            None,
            "tables.acme_web.views.delivery: expected one of load, storage_write, got 'streaming'",
        ),
        (None, "fast", "topics[0].delivery: expected one of load, storage_write, got 'fast'"),
        (
            {"kbqe_dead_letters.dead_letters": {"delivery": "storage_write"}},
            None,
            "tables.kbqe_dead_letters.dead_letters.delivery: storage_write is not supported for "
            "the dead-letter table kbqe_dead_letters.dead_letters: it stays loaded",
        ),
        (
            {"inventory.customers": {"delivery": "storage_write"}},
            None,
            "tables.inventory.customers.delivery: inventory.customers is the current state of keyed "
            "topic 'dbserver1.inventory.customers', written by its MERGE, never delivered: set the "
            "delivery of its changelog inventory.customers_changelog (or the topic's)",
        ),
    ],
)
def test_what_this_slice_cannot_do_is_refused_naming_the_table(
    tables: Any, topic_delivery: str | None, expected: str
) -> None:
    assert expected in config_problems(pipeline_with(tables, topic_delivery=topic_delivery))


def test_a_keyed_topic_delivers_its_changelog_by_its_own_delivery() -> None:
    raw = pipeline_with()
    raw["topics"][2]["delivery"] = "storage_write"
    config = parse_pipeline_config(raw)
    topic = "dbserver1.inventory.customers"
    assert config.delivery("inventory", "customers_changelog", topic) is Delivery.STORAGE_WRITE
    assert config.delivery("inventory", "customers_changelog") is Delivery.STORAGE_WRITE
    assert (
        config.table_layout("inventory", "customers_changelog").delivery is Delivery.STORAGE_WRITE
    )
    assert config.topic_may_deliver_by_storage_write(topic)  # one range per partition


@pytest.mark.parametrize("key", ["inventory.customers_changelog", "inventory.*"])
def test_a_tables_entry_delivers_a_keyed_changelog_by_storage_write(key: str) -> None:
    config = parse_pipeline_config(
        pipeline_with(
            {key: {"delivery": "storage_write"}},
            allowed_destinations=["acme_web.*", "acme_sales.*", "inventory.*"],
        )
    )
    topic = "dbserver1.inventory.customers"
    assert config.delivery("inventory", "customers_changelog", topic) is Delivery.STORAGE_WRITE
    assert config.topic_may_deliver_by_storage_write(topic)
    assert not config.topic_may_deliver_by_storage_write("web")
