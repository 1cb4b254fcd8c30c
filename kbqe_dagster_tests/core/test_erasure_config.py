"""The ``erasure:`` section: tables by column, nested path or Kafka key, the requests topic,
the audit table and the salt variable; every problem reported with its key path."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.config.erasure import AuditTable, ErasureTable
from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import ConfigError


def pipeline(erasure: object, **top: object) -> dict:
    return {
        "version": 1,
        "topics": [
            {
                "name": "shop.orders",
                "event_time": {"kafka_timestamp_fallback": True},
                "routing": {"mode": "static", "dataset": "shop", "table": "orders"},
            }
        ],
        "erasure": erasure,
        **top,
    }


def problems(raw: dict) -> list[str]:
    with pytest.raises(ConfigError) as error:
        parse_pipeline_config(raw)
    return [line.strip()[2:] for line in str(error.value).splitlines()[1:]]


def test_a_full_section_is_read_in_file_order() -> None:
    config = parse_pipeline_config(
        pipeline(
            {
                "requests_topic": "gdpr.requests",
                "audit": {"dataset": "audit", "table": "erasures"},
                "salt_env": "MY_SALT",
                "tables": {
                    "shop.orders": {"columns": ["customer_id", "buyer.id"]},
                    "shop.*": {"kafka_key": True},
                    "kbqe_dead_letters.dead_letters": {"kafka_key": True},
                },
            },
            enrichment={"key_column": "_kafka_key"},
        )
    )
    erasure = config.erasure
    assert erasure.enabled and erasure.requests_topic == "gdpr.requests"
    assert erasure.audit == AuditTable("audit", "erasures")
    assert erasure.salt_env == "MY_SALT"
    assert erasure.tables == (
        ("shop.orders", ErasureTable(columns=("customer_id", "buyer.id"))),
        ("shop.*", ErasureTable(kafka_key=True)),
        ("kbqe_dead_letters.dead_letters", ErasureTable(kafka_key=True)),
    )
    assert erasure.table_settings("shop", "orders") == ErasureTable(("customer_id", "buyer.id"))
    assert erasure.table_settings("shop", "refunds") == ErasureTable(kafka_key=True)
    assert erasure.table_settings("other", "orders") is None


def test_no_section_means_no_erasure() -> None:
    raw = pipeline(None)
    del raw["erasure"]
    assert not parse_pipeline_config(raw).erasure.enabled


def test_the_dead_letter_table_needs_no_key_column_it_has_raw_key() -> None:
    raw = pipeline({"tables": {"kbqe_dead_letters.dead_letters": {"kafka_key": True}}})
    assert parse_pipeline_config(raw).erasure.enabled


@pytest.mark.parametrize(
    ("erasure", "expected"),
    [
        ({}, "erasure.tables: required"),
        ({"tables": {}}, "erasure.tables: expected a mapping"),
        ({"tables": {"shop.orders": {}}}, "erasure.tables.shop.orders: name the subject's"),
        (
            {"tables": {"shop.orders": {"columns": ["1st"]}}},
            "erasure.tables.shop.orders.columns[0]: '1st' is not a column",
        ),
        ({"tables": {"shop": {"columns": ["a"]}}}, "erasure.tables.shop: table key 'shop'"),
        (
            {"tables": {"crm.users": {"columns": ["id"]}}},
            "erasure.tables.crm.users: dataset 'crm' is not written by this pipeline",
        ),
        (
            {"tables": {"shop.orders": {"kafka_key": True}}},
            "erasure.tables.shop.orders.kafka_key: needs enrichment.key_column",
        ),
        (
            {"tables": {"shop.orders": {"columns": ["a"]}}, "requests_topic": "shop.orders"},
            "erasure.requests_topic: 'shop.orders' is a topic this pipeline stages",
        ),
        (
            {"tables": {"shop.orders": {"columns": ["a"]}}, "salt_env": "no-dash"},
            "erasure.salt_env: not a variable",
        ),
        (
            {"tables": {"shop.orders": {"columns": ["a"]}}, "audit": {"dataset": "a-b"}},
            "erasure.audit.dataset: not a dataset",
        ),
        ({"tables": {"shop.orders": {"columns": ["a"]}}, "salt": "x"}, "erasure.salt: unknown"),
    ],
)
def test_problems_name_their_key(erasure: dict, expected: str) -> None:
    found = problems(pipeline(erasure))
    assert any(p.startswith(expected) for p in found), found
