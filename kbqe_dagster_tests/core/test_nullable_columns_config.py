"""``tables.<dataset.table | dataset.*>.all_columns_nullable``: every column kbqe creates in
the table is NULLABLE (Kafka Connect's ``allBQFieldsNullable``); off by default; refused, naming
the key, where kbqe does not take the columns from a schema."""

from __future__ import annotations

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster_tests.support.delivery_configs import config_problems, pipeline_with


def test_columns_follow_their_fields_unless_a_table_or_its_dataset_says_all_nullable() -> None:
    config = parse_pipeline_config(
        pipeline_with(
            {
                "acme_sales.*": {"all_columns_nullable": True},
                "acme_sales.refunds": {"partitioning": "hour"},  # an exact key wins whole
                "inventory.customers_changelog": {"all_columns_nullable": True},
            }
        )
    )
    layout = config.table_layout
    assert layout("acme_sales", "orders").all_columns_nullable
    assert not layout("acme_sales", "refunds").all_columns_nullable
    assert not layout("acme_web", "views").all_columns_nullable
    assert layout("inventory", "customers_changelog").all_columns_nullable


def test_a_value_that_is_not_a_boolean_is_refused() -> None:
    problems = config_problems(
        pipeline_with({"acme_web.views": {"all_columns_nullable": "sometimes"}})
    )
    assert "tables.acme_web.views.all_columns_nullable" in problems


def test_the_current_table_of_a_keyed_topic_is_refused_naming_its_changelog() -> None:
    problems = config_problems(
        pipeline_with({"inventory.customers": {"all_columns_nullable": True}})
    )
    assert (
        "tables.inventory.customers.all_columns_nullable: inventory.customers is the current "
        "state of keyed topic 'dbserver1.inventory.customers', whose columns are all NULLABLE "
        "already: set it on its changelog inventory.customers_changelog"
    ) in problems


def test_the_dead_letter_table_is_refused() -> None:
    dead = {"dead_letter": {"dataset": "acme_dead", "table": "letters"}}
    problems = config_problems(
        pipeline_with({"acme_dead.letters": {"all_columns_nullable": True}}, **dead)
    )
    assert "acme_dead.letters is the dead-letter table: its columns are kbqe's own" in problems
