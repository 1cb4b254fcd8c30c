"""Which tables an erasure reaches: exact keys and dataset wildcards over the tables that
exist, a keyed table's changelog with it, the dead letters by raw key, a request's scope, and
the topics feeding them."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.erasure.requests import ErasureRequest, ErasureRequestError
from kbqe_dagster.core.erasure.targets import configured_targets, feeding_topics, request_targets
from kbqe_dagster.core.errors import ConfigError

TIME = {"kafka_timestamp_fallback": True}
CONFIG = parse_pipeline_config(
    {
        "version": 1,
        "topics": [
            {"name": "orders", "event_time": TIME,
             "routing": {"mode": "static", "dataset": "shop", "table": "orders"}},
            {"name": "customers", "format": "debezium", "keyed": {}, "event_time": TIME,
             "routing": {"mode": "static", "dataset": "crm", "table": "customers"}},
            {"name": "clicks", "event_time": TIME,
             "routing": {"mode": "static", "dataset": "web", "table": "clicks"}},
        ],
        "allowed_destinations": ["shop.*"],
        "enrichment": {"key_column": "_kafka_key"},
        "erasure": {
            "tables": {
                "shop.*": {"columns": ["customer_id"]},
                "shop.orders": {"columns": ["buyer.id"], "kafka_key": True},
                "crm.customers": {"columns": ["id"]},
                "kbqe_dead_letters.dead_letters": {"kafka_key": True},
            }
        },
    }
)  # fmt: skip
EXISTING = {
    "shop": ["orders", "refunds", "_kbqe_load_x"],
    "crm": ["customers", "customers_changelog"],
    "kbqe_dead_letters": ["dead_letters"],
}


def test_targets_cover_exact_keys_wildcards_changelogs_and_dead_letters() -> None:
    targets = {t.name: t for t in configured_targets(CONFIG, EXISTING)}
    assert sorted(targets) == [
        "crm.customers",
        "crm.customers_changelog",
        "kbqe_dead_letters.dead_letters",
        "shop.orders",
        "shop.refunds",
    ]
    orders = targets["shop.orders"]
    assert (orders.columns, orders.key_column, orders.explicit) == (
        ("buyer.id",),
        "_kafka_key",
        True,
    )
    assert orders.partition_column == "_event_date"
    assert (targets["shop.refunds"].columns, targets["shop.refunds"].explicit) == (
        ("customer_id",),
        False,
    )
    dead = targets["kbqe_dead_letters.dead_letters"]
    assert (dead.columns, dead.key_column, dead.partition_column) == ((), "raw_key", "staged_date")
    # The current state is written by its MERGE: never restricted by partition.
    assert targets["crm.customers"].partition_column is None
    assert targets["crm.customers_changelog"].family == "crm.customers"


def test_a_table_that_does_not_exist_yet_is_no_target() -> None:
    assert [t.name for t in configured_targets(CONFIG, {"crm": ["customers"]})] == ["crm.customers"]


def test_a_request_scope_reaches_its_tables_and_their_changelogs() -> None:
    targets = configured_targets(CONFIG, EXISTING)
    request = ErasureRequest("r", "u-1", ("crm.customers",))
    assert [t.name for t in request_targets(request, targets, CONFIG)] == [
        "crm.customers",
        "crm.customers_changelog",
    ]
    with pytest.raises(ErasureRequestError, match="web.clicks is not covered by erasure.tables"):
        request_targets(ErasureRequest("r", "u-1", ("web.clicks",)), targets, CONFIG)


def test_the_feeding_topics_are_those_writing_the_tables() -> None:
    targets = configured_targets(CONFIG, EXISTING)
    by_name = {t.name: t for t in targets}
    assert feeding_topics(CONFIG, [by_name["shop.orders"]]) == ("orders",)
    assert feeding_topics(CONFIG, [by_name["crm.customers_changelog"]]) == ("customers",)
    # Every topic may dead-letter.
    assert feeding_topics(CONFIG, targets) == ("orders", "customers", "clicks")


def test_a_raw_archive_is_erased_by_its_own_key_column_with_no_enrichment() -> None:
    # A format: raw archive always carries the Kafka key (core/formats/raw_archive.py), so
    # kafka_key needs no enrichment.key_column there, and the target names the raw column.
    config = parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {"name": "audit", "format": "raw",
                 "routing": {"mode": "static", "dataset": "archive", "table": "audit"}},
            ],
            "erasure": {"tables": {"archive.audit": {"kafka_key": True}}},
        }
    )  # fmt: skip
    assert config.raw_archive_tables == frozenset({"archive.audit"})
    (target,) = configured_targets(config, {"archive": ["audit"]})
    assert (target.columns, target.key_column) == ((), "_kafka_key")


def test_kafka_key_elsewhere_still_needs_the_key_column() -> None:
    with pytest.raises(ConfigError, match=r"erasure\.tables\.shop\.orders\.kafka_key"):
        parse_pipeline_config(
            {
                "version": 1,
                "topics": [
                    {"name": "orders", "event_time": TIME,
                     "routing": {"mode": "static", "dataset": "shop", "table": "orders"}},
                ],
                "erasure": {"tables": {"shop.orders": {"kafka_key": True}}},
            }
        )  # fmt: skip


def test_a_table_that_requires_a_partition_filter_names_the_column_its_statements_filter() -> None:
    """A pass without a window then filters on every partition (core/erasure/statements.py);
    a keyed current table has no partitions: its changelog takes the option."""
    raw = {
        "version": 1,
        "topics": [
            {"name": "orders", "event_time": TIME,
             "routing": {"mode": "static", "dataset": "shop", "table": "orders"}},
            {"name": "customers", "format": "debezium", "keyed": {}, "event_time": TIME,
             "routing": {"mode": "static", "dataset": "crm", "table": "customers"}},
        ],
        "tables": {"shop.orders": {"require_partition_filter": True},
                   "crm.customers_changelog": {"require_partition_filter": True},
                   "crm.customers": {"require_partition_filter": True}},
        "erasure": {"tables": {"shop.orders": {"columns": ["customer_id"]},
                               "crm.customers": {"columns": ["id"]}}},
    }  # fmt: skip
    targets = {t.name: t for t in configured_targets(parse_pipeline_config(raw), EXISTING)}
    assert targets["shop.orders"].required_filter_column == "_event_date"
    assert targets["crm.customers_changelog"].required_filter_column == "_event_date"
    assert targets["crm.customers"].required_filter_column is None
    plain = {t.name: t for t in configured_targets(CONFIG, EXISTING)}
    assert plain["shop.orders"].required_filter_column is None
