"""Topics from patterns (core/config/discovery.py): given the pipeline file and the topic names Kafka
holds, the effective topics are the listed ones, then every name the first matching pattern
takes, with that pattern's settings, as if it had been listed."""

from __future__ import annotations

import pickle

import pytest

from kbqe_dagster.core.config.discovery import internal_topics, table_for
from kbqe_dagster.core.config.pipeline import BadInputPolicy, PipelineConfig, parse_pipeline_config
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.keyed.contract import DEBEZIUM_EVENT_TIME_FIELDS
from kbqe_dagster.core.record.routing import RoutingMode

ET = {"fields": ["ts"]}


def pipeline(*patterns: dict, topics: list[dict] | None = None, **top) -> PipelineConfig:
    raw = {"version": 1, "topic_patterns": list(patterns), **top}
    if topics is not None:
        raw["topics"] = topics
    return parse_pipeline_config(raw, source="p.yaml")


SHOP = {
    "match": r"shop\..*",
    "event_time": ET,
    "routing": {"mode": "static", "dataset": "shop", "table": "{topic}"},
}
ANY = {
    "match": ".*",
    "event_time": {"kafka_timestamp_fallback": True},
    "on_bad_input": "skip",
    "routing": {"mode": "fields"},
}


def names(config: PipelineConfig) -> list[str]:
    return [t.name for t in config.topics]


def test_a_file_with_patterns_alone_is_valid_and_lists_no_topic_until_kafka_is_known() -> None:
    config = pipeline(SHOP)
    assert config.topics == ()
    assert [p.match for p in config.topic_patterns] == [r"shop\..*"]


def test_matching_topics_get_the_patterns_settings_as_if_listed() -> None:
    config = pipeline(SHOP).discover(["shop.orders", "shop.items", "billing.invoices"])
    assert names(config) == ["shop.items", "shop.orders"]
    orders = config.topic("shop.orders")
    assert orders.routing.mode is RoutingMode.STATIC
    assert (orders.routing.dataset, orders.routing.table) == ("shop", "shop_orders")
    assert orders.event_time.fields == ("ts",)
    assert orders.pattern == r"shop\..*"


def test_the_match_covers_the_whole_name_not_a_substring() -> None:
    config = pipeline({**SHOP, "match": "orders"}).discover(["orders", "shop.orders", "orders2"])
    assert names(config) == ["orders"]


def test_a_listed_topic_wins_over_every_pattern_and_keeps_its_place() -> None:
    listed = {
        "name": "shop.orders",
        "event_time": ET,
        "on_bad_input": "fail",
        "routing": {"mode": "static", "dataset": "shop", "table": "orders_v2"},
    }
    config = pipeline(SHOP, topics=[listed]).discover(["shop.items", "shop.orders"])
    assert names(config) == ["shop.orders", "shop.items"]
    orders = config.topic("shop.orders")
    assert orders.pattern is None
    assert orders.routing.table == "orders_v2" and orders.on_bad_input is BadInputPolicy.FAIL


def test_the_first_matching_pattern_wins() -> None:
    config = pipeline(SHOP, ANY).discover(["shop.orders", "billing.invoices"])
    assert config.topic("shop.orders").pattern == r"shop\..*"
    assert config.topic("shop.orders").on_bad_input is BadInputPolicy.DEAD_LETTER
    assert config.topic("billing.invoices").pattern == ".*"
    assert config.topic("billing.invoices").on_bad_input is BadInputPolicy.SKIP


def test_an_excluded_name_is_left_to_the_next_pattern_or_to_none() -> None:
    shop = {**SHOP, "exclude": [r"shop\.tmp\..*", "shop.scratch"]}
    alone = pipeline(shop).discover(["shop.orders", "shop.tmp.x", "shop.scratch"])
    assert names(alone) == ["shop.orders"]
    with_fallback = pipeline(shop, ANY).discover(["shop.tmp.x"])
    assert with_fallback.topic("shop.tmp.x").pattern == ".*"


INTERNAL = [
    "__consumer_offsets",
    "__transaction_state",
    "_schemas",
    "_confluent-metrics",
    "connect-configs",
    "connect-offsets",
    "connect-status",
    "dwh-connect-configs",
    "dwh-connect-offsets",
    "dwh-connect-status",
]


def test_internal_topics_never_match_a_pattern_that_does_not_ask_for_them() -> None:
    config = pipeline(ANY).discover([*INTERNAL, "orders"])
    assert names(config) == ["orders"]


def test_a_pattern_with_include_internal_takes_them() -> None:
    config = pipeline({**ANY, "match": "_schemas", "include_internal": True}).discover(INTERNAL)
    assert names(config) == ["_schemas"]


def test_a_listed_internal_topic_is_staged_like_any_listed_topic() -> None:
    config = pipeline(ANY, topics=[{"name": "_schemas", "event_time": ET}]).discover(INTERNAL)
    assert names(config) == ["_schemas"]


@pytest.mark.parametrize(
    ("listing", "internal"),
    [
        (["__consumer_offsets", "_schemas", "orders"], {"__consumer_offsets", "_schemas"}),
        (["connect-status", "orders"], {"connect-status"}),
        # A Connect cluster's three storage topics share a prefix: all three there, all internal.
        (
            ["x-configs", "x-offsets", "x-status", "y-status"],
            {"x-configs", "x-offsets", "x-status"},
        ),
        # One or two of them alone are business topics (order-status, price-offsets).
        (["order-status", "price-offsets", "x-configs", "x-status"], set()),
    ],
)
def test_what_counts_as_internal(listing: list[str], internal: set[str]) -> None:
    assert internal_topics(listing) == internal


def test_topic_resolves_a_name_through_the_patterns_without_a_listing() -> None:
    # A stage run launched for a topic created after the definitions were built.
    config = pipeline(SHOP, ANY)
    assert config.topic("shop.new").routing.table == "shop_new"
    assert config.topic("anything").pattern == ".*"
    with pytest.raises(
        ConfigError, match="'__consumer_offsets' is not configured and matches no topic_patterns"
    ):
        config.topic("__consumer_offsets")


def test_a_discovered_static_table_is_allowed_like_a_listed_static_route() -> None:
    config = pipeline(SHOP, allowed_destinations=["misc.*"])
    assert not config.allowed_destinations.allows("shop", "shop_orders")
    discovered = config.discover(["shop.orders"])
    assert discovered.allowed_destinations.allows("shop", "shop_orders")
    assert not discovered.allowed_destinations.allows("shop", "other")
    # Resolved without a listing, its router allows it too.
    assert config.router("shop.orders").allowed.allows("shop", "shop_orders")


def test_a_topic_deleted_from_kafka_drops_out_at_the_next_discovery() -> None:
    config = pipeline(SHOP)
    assert names(config.discover(["shop.a", "shop.b"])) == ["shop.a", "shop.b"]
    assert names(config.discover(["shop.b"])) == ["shop.b"]


@pytest.mark.parametrize(
    ("template", "topic", "table"),
    [
        ("{topic}", "shop.orders", "shop_orders"),
        ("raw_{topic}", "com.acme.click-events", "raw_com_acme_click-events"),
        ("{topic}_v1", "plain", "plain_v1"),
    ],
)
def test_the_topic_placeholder(template: str, topic: str, table: str) -> None:
    assert table_for(template, topic) == table


@pytest.mark.parametrize(
    ("pattern", "path", "message"),
    [
        (
            {**SHOP, "match": "shop.(orders"},
            "topic_patterns[0].match",
            "not a valid regular expression: missing ), unterminated subpattern",
        ),
        (
            {**SHOP, "exclude": ["ok", "[bad"]},
            "topic_patterns[0].exclude[1]",
            "not a valid regular expression: unterminated character set",
        ),
        ({**SHOP, "exclude": "shop.tmp"}, "topic_patterns[0].exclude", "expected a list"),
        ({k: v for k, v in SHOP.items() if k != "match"}, "topic_patterns[0].match", "required"),
        ({**SHOP, "name": "shop.orders"}, "topic_patterns[0].name", "unknown key"),
        (
            {
                **SHOP,
                "format": "debezium",
                "keyed": {"deletes": "soft"},
                "routing": {"mode": "fields"},
            },
            "topic_patterns[0].routing",
            "a keyed topic needs routing mode static",
        ),
        (
            {**SHOP, "format": "debezium"},
            "topic_patterns[0].format",
            "debezium needs a keyed: section",
        ),
        (
            {**SHOP, "routing": {"mode": "static", "dataset": "shop", "table": "{name}"}},
            "topic_patterns[0].routing.table",
            "unknown placeholder {name}; the only placeholder is {topic}",
        ),
        (
            {**SHOP, "routing": {"mode": "static", "dataset": "shop", "table": "{topic"}},
            "topic_patterns[0].routing.table",
            "not a valid table template",
        ),
        (
            {**SHOP, "routing": {"mode": "static", "dataset": "shop", "table": "{topic!r}"}},
            "topic_patterns[0].routing.table",
            "{topic} takes no format spec or conversion",
        ),
        (
            {**SHOP, "routing": {"mode": "static", "dataset": "{topic}", "table": "t"}},
            "topic_patterns[0].routing.dataset",
            "not a dataset name",
        ),
        (
            {
                **SHOP,
                "routing": {"mode": "static", "dataset": "kbqe_dead_letters", "table": "{topic}"},
            },
            "topic_patterns[0].routing.dataset",
            "the dead-letter dataset takes no routes",
        ),
        (
            {**SHOP, "event_time": {}},
            "topic_patterns[0].event_time",
            "needs at least one field or kafka_timestamp_fallback: true",
        ),
        (
            {**SHOP, "include_internal": "yes"},
            "topic_patterns[0].include_internal",
            "expected true or false",
        ),
    ],
)
def test_problems_are_reported_at_the_patterns_key_path(pattern, path, message) -> None:
    with pytest.raises(ConfigError) as error:
        pipeline(pattern)
    assert f"{path}: {message}" in str(error.value)


def test_neither_topics_nor_patterns_is_still_an_error() -> None:
    with pytest.raises(ConfigError, match="topics: expected a list of at least one topic"):
        parse_pipeline_config({"version": 1}, source="p.yaml")
    with pytest.raises(ConfigError, match="topic_patterns: expected a list of patterns"):
        parse_pipeline_config({"version": 1, "topic_patterns": []}, source="p.yaml")


def test_pattern_defaults_come_from_the_top_level_like_a_topics() -> None:
    config = pipeline(
        {"match": ".*"},
        event_time={"fields": ["at"]},
        on_bad_input="skip",
        staging={"allowed_latency": "30s"},
        allowed_destinations=["sales.*"],
    )
    topic = config.topic("x")
    assert topic.event_time.fields == ("at",)
    assert topic.on_bad_input is BadInputPolicy.SKIP
    assert topic.staging.allowed_latency.total_seconds() == 30


def test_a_discovered_configuration_travels_to_spark_tasks() -> None:
    config = pipeline(SHOP).discover(["shop.orders"])
    again = pickle.loads(pickle.dumps(config))
    assert again == config
    assert again.topic("shop.later").routing.table == "shop_later"


def test_the_example_pipeline_resolves_a_fleet_as_documented() -> None:
    from pathlib import Path

    from kbqe_dagster.core.config.pipeline import load_pipeline_config

    example = Path(__file__).resolve().parents[2] / "examples" / "topic_patterns.yaml"
    config = load_pipeline_config(example).discover(
        [
            "shop.orders",
            "shop.orders.legacy",
            "shop.tmp.x",
            "shop.orders.dlq",
            "com.acme.events",
            "__consumer_offsets",
            "connect-offsets",
            "unrelated",
        ]
    )
    assert [t.name for t in config.topics] == [
        "shop.orders.legacy",
        "com.acme.events",
        "shop.orders",
    ]
    assert config.topic("shop.orders").routing.table == "shop_orders"
    assert config.topic("shop.orders.legacy").routing.table == "orders_legacy"
    assert config.topic("com.acme.events").routing.mode is RoutingMode.FIELDS
    cdc = config.discover(["dbserver1.inventory.customers"]).topic("dbserver1.inventory.customers")
    assert cdc.keyed is not None and cdc.routing.table == "dbserver1_inventory_customers"


CDC = {
    "match": r"dbserver1\.inventory\..*",
    "format": "debezium",
    "keyed": {"deletes": "soft", "history": True},
    "routing": {"mode": "static", "dataset": "inventory", "table": "cdc_{topic}"},
}


def test_a_keyed_pattern_makes_every_matching_topic_a_keyed_destination() -> None:
    # Debezium writes one topic per source table: one pattern onboards a whole database.
    config = pipeline(CDC).discover(["dbserver1.inventory.customers", "dbserver1.inventory.orders"])
    customers = config.topic("dbserver1.inventory.customers")
    assert customers.keyed is not None and customers.keyed.history
    assert customers.event_time.fields == DEBEZIUM_EVENT_TIME_FIELDS  # debezium's own default
    assert config.changelog_tables == {
        ("inventory", "cdc_dbserver1_inventory_customers_changelog"),
        ("inventory", "cdc_dbserver1_inventory_orders_changelog"),
    }
    allowed = config.allowed_destinations
    assert allowed.allows("inventory", "cdc_dbserver1_inventory_orders")
    assert allowed.allows("inventory", "cdc_dbserver1_inventory_orders_changelog")


@pytest.mark.parametrize(
    ("table", "changelog"),
    [
        ("cdc_dbserver1_inventory_later_changelog", True),  # a topic no listing has seen yet
        ("cdc_dbserver1_inventory_later", False),  # its current table is merged, not loaded
        ("other_changelog", False),  # not what the template makes
    ],
)
def test_the_load_side_recognises_a_keyed_patterns_changelogs_before_discovery(
    table: str, changelog: bool
) -> None:
    assert pipeline(CDC).is_changelog_table("inventory", table) is changelog
    assert not pipeline(CDC).is_changelog_table("elsewhere", table)


def test_a_topics_key_path_names_its_entry_listed_or_pattern() -> None:
    config = parse_pipeline_config({
        "version": 1,
        "topics": [{"name": "shop.orders", "routing": {"mode": "static", "dataset": "shop", "table": "o"},
                    "event_time": {"kafka_timestamp_fallback": True}}],
        "topic_patterns": [
            {"match": "x[.].*", "routing": {"mode": "static", "dataset": "x", "table": "{topic}"},
             "event_time": {"kafka_timestamp_fallback": True}},
            {"match": "shop[.].*", "routing": {"mode": "static", "dataset": "shop", "table": "{topic}"},
             "event_time": {"kafka_timestamp_fallback": True}}],
    }, source="test")  # fmt: skip
    assert config.key_path("shop.orders") == "topics[0]"
    assert config.key_path("shop.refunds") == "topic_patterns[1]"
    assert config.discover(["shop.refunds"]).key_path("shop.refunds") == "topic_patterns[1]"
    with pytest.raises(ConfigError, match="'other' is not configured"):
        config.key_path("other")
