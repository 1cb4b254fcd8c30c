"""The ``format:`` and ``keyed:`` keys of a topic: defaults, and mistakes named by key path."""

from __future__ import annotations

from typing import Any

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.keyed.contract import DeleteMode, KeyedConfig, SourceFormat
from kbqe_dagster.core.record.event_time import DateRule

STATIC = {"mode": "static", "dataset": "inventory", "table": "customers"}


def _config(**topic: Any) -> dict[str, Any]:
    return {"version": 1, "topics": [{"name": "dbserver1.inventory.customers", **topic}]}


def _problems(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as caught:
        parse_pipeline_config(raw)
    return str(caught.value)


def test_a_debezium_topic_needs_only_its_destination_and_an_empty_keyed_section() -> None:
    topic = parse_pipeline_config(_config(format="debezium", routing=STATIC, keyed={})).topics[0]
    assert topic.format is SourceFormat.DEBEZIUM
    assert topic.keyed == KeyedConfig()
    assert topic.keyed.key == ()  # resolved from the Kafka key's schema
    assert topic.keyed.deletes is DeleteMode.SOFT and topic.keyed.history is False
    assert topic.keyed.merge_every == 1
    assert topic.event_time.fields == ("source.ts_ms", "__source_ts_ms")


def test_the_issue_example_parses_as_written() -> None:
    keyed = {"key": ["id"], "deletes": "hard", "history": True}
    topic = parse_pipeline_config(_config(format="debezium", routing=STATIC, keyed=keyed)).topics[0]
    assert topic.keyed == KeyedConfig(key=("id",), deletes=DeleteMode.HARD, history=True)


def test_a_debezium_topic_keeps_its_own_event_time_fields_over_the_default() -> None:
    raw = _config(
        format="debezium",
        routing=STATIC,
        keyed={},
        event_time={"fields": ["after.updated_at"], "date_rule": "utc"},
    )
    raw["event_time"] = {"fields": ["eventTime"]}  # the append topics' default is not Debezium's
    topic = parse_pipeline_config(raw).topics[0]
    assert topic.event_time.fields == ("after.updated_at",)
    assert topic.event_time.date_rule is DateRule.UTC


def test_a_top_level_event_time_default_does_not_replace_the_debezium_fields() -> None:
    raw = _config(format="debezium", routing=STATIC, keyed={})
    raw["event_time"] = {"fields": ["eventTime"], "kafka_timestamp_fallback": True}
    topic = parse_pipeline_config(raw).topics[0]
    assert topic.event_time.fields == ("source.ts_ms", "__source_ts_ms")
    assert topic.event_time.kafka_timestamp_fallback is True  # other keys still inherit


def test_a_plain_keyed_topic_names_its_key_and_version() -> None:
    keyed = {"key": ["sku"], "version": "updated_at", "delete_field": "discontinued"}
    raw = _config(routing=STATIC, keyed=keyed, event_time={"fields": ["updated_at"]})
    topic = parse_pipeline_config(raw).topics[0]
    assert topic.format is SourceFormat.AVRO
    assert topic.keyed == KeyedConfig(
        key=("sku",), version="updated_at", delete_field="discontinued"
    )


def test_the_changelog_table_is_allowed_with_its_static_destination() -> None:
    config = parse_pipeline_config(_config(format="debezium", routing=STATIC, keyed={}))
    assert config.allowed_destinations.allows("inventory", "customers_changelog")
    assert config.allowed_destinations.allows("inventory", "customers")


def test_append_topics_are_unchanged() -> None:
    raw = _config(routing=STATIC, event_time={"fields": ["ts"]})
    topic = parse_pipeline_config(raw).topics[0]
    assert topic.format is SourceFormat.AVRO and topic.keyed is None


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        (
            {"format": "debezium", "routing": STATIC},
            "topics[0].format: debezium needs a keyed: section",
        ),
        (
            {"format": "thrift", "routing": STATIC, "keyed": {}},
            "topics[0].format: expected one of avro, debezium, json, decoder, json_schema, protobuf, "
            "raw, got 'thrift'",
        ),
        (
            {"format": "protobuf", "routing": STATIC, "keyed": {}},
            "topics[0].keyed: not with format: protobuf (keyed topics are avro or debezium)",
        ),
        (
            {"routing": STATIC, "keyed": {"version": "v"}, "event_time": {"fields": ["v"]}},
            "topics[0].keyed.key: required unless format: debezium",
        ),
        (
            {
                "routing": STATIC,
                "keyed": {"key": ["id"], "history": True},
                "event_time": {"fields": ["v"]},
            },
            "topics[0].keyed.version: required unless format: debezium",
        ),
        (
            {"format": "debezium", "routing": STATIC, "keyed": {"version": "ts"}},
            "topics[0].keyed.version: not used with format: debezium",
        ),
        (
            {"format": "debezium", "routing": STATIC, "keyed": {"deletes": "purge"}},
            "topics[0].keyed.deletes: expected one of soft, hard, got 'purge'",
        ),
        (
            {"format": "debezium", "routing": STATIC, "keyed": {"merge_every": 0}},
            "topics[0].keyed.merge_every: must be at least 1, got 0",
        ),
        (
            {"format": "debezium", "routing": STATIC, "keyed": {"key": []}},
            "topics[0].keyed.key: expected at least one entry",
        ),
        (
            {"format": "debezium", "routing": STATIC, "keyed": {"histroy": True}},
            "topics[0].keyed.histroy: unknown key; did you mean 'history'?",
        ),
        (
            {"format": "debezium", "keyed": {}},
            "topics[0].routing: a keyed topic needs routing mode static",
        ),
        (
            {
                "format": "debezium",
                "keyed": {},
                "routing": {
                    "mode": "static",
                    "dataset": "kbqe_dead_letters",
                    "table": "dead_letters",
                },
            },
            "topics[0].keyed: not allowed on the dead-letter table",
        ),
    ],
)
def test_keyed_mistakes_are_config_errors_at_their_key_path(topic: dict, expected: str) -> None:
    assert expected in _problems(_config(**topic))


def test_the_pipeline_names_its_changelog_tables() -> None:
    raw = _config(format="debezium", routing=STATIC, keyed={})
    raw["topics"].append(
        {
            "name": "orders",
            "event_time": {"fields": ["ts"]},
            "routing": {"mode": "static", "dataset": "sales", "table": "orders"},
        }
    )
    assert parse_pipeline_config(raw).changelog_tables == {("inventory", "customers_changelog")}


def test_the_debezium_example_pipeline_is_valid() -> None:
    from pathlib import Path

    from kbqe_dagster.core.config.pipeline import load_pipeline_config

    example = Path(__file__).resolve().parents[2] / "examples" / "debezium.yaml"
    config = load_pipeline_config(example)
    assert [t.format for t in config.topics] == [
        SourceFormat.DEBEZIUM,
        SourceFormat.DEBEZIUM,
        SourceFormat.AVRO,
    ]
    assert config.topics[1].keyed == KeyedConfig(deletes=DeleteMode.HARD, merge_every=4)


@pytest.mark.parametrize(
    ("fmt", "given", "placeholder"),
    [
        ("debezium", None, "__debezium_unavailable_value"),
        ("debezium", "<toasted>", "<toasted>"),
        ("debezium", "", None),
        ("avro", None, None),
        ("avro", "<toasted>", "<toasted>"),
    ],
)
def test_the_unavailable_value_placeholder_defaults_to_debezium_s_for_debezium_topics(
    fmt, given, placeholder
) -> None:
    keyed = {} if fmt == "debezium" else {"key": ["id"], "version": "ts"}
    extra = {} if fmt == "debezium" else {"event_time": {"fields": ["ts"]}}
    if given is not None:
        keyed["unavailable_value"] = given
    config = _config(format=fmt, routing=STATIC, keyed=keyed, **extra)
    topic = parse_pipeline_config(config).topics[0]
    assert topic.keyed.placeholder(topic.format) == placeholder


def test_the_unavailable_value_placeholder_is_a_string() -> None:
    with pytest.raises(ConfigError, match="unavailable_value"):
        parse_pipeline_config(
            _config(format="debezium", routing=STATIC, keyed={"unavailable_value": 3})
        )
