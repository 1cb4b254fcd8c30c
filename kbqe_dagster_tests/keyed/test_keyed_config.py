"""The ``format:`` and ``keyed:`` keys of a topic: defaults, and mistakes named by key path."""

from __future__ import annotations

from typing import Any

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.keyed.contract import (
    DeleteMode,
    KeyedConfig,
    KeyFormat,
    KeySource,
    SourceFormat,
)
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


# --- topics keyed by their Kafka key (compacted topics) ------------------------------------------
TABLE_TIME = {"fields": [], "kafka_timestamp_fallback": True}


def test_a_compacted_topic_needs_only_key_from_kafka_key() -> None:
    raw = _config(routing=STATIC, keyed={"key_from": "kafka_key"}, event_time=TABLE_TIME)
    keyed = parse_pipeline_config(raw).topics[0].keyed
    assert keyed == KeyedConfig(key_from=KeySource.KAFKA_KEY)
    assert keyed.kafka_ordered and keyed.key_format is KeyFormat.AVRO
    assert keyed.key == () and keyed.version is None  # the key's fields; Kafka's order


def test_a_string_key_names_its_column_and_a_json_key_its_fields_and_their_types() -> None:
    string = {"key_from": "kafka_key", "key_format": "string", "key": ["sku"]}
    json_key = {"key_from": "kafka_key", "key_format": "json", "key": ["region", "id"],
                "key_types": {"id": "long"}, "version": "updated_at"}  # fmt: skip
    topics = parse_pipeline_config({"version": 1, "topics": [
        {"name": "a", "routing": STATIC, "keyed": string, "event_time": TABLE_TIME},
        {"name": "b", "format": "json", "schema": {"type": "record", "name": "B", "fields": []},
         "routing": {**STATIC, "table": "b"}, "keyed": json_key, "event_time": TABLE_TIME},
    ]}).topics  # fmt: skip
    assert topics[0].keyed.key == ("sku",) and topics[0].keyed.key_type("sku") == "string"
    assert topics[1].keyed.key == ("region", "id") and topics[1].keyed.version == "updated_at"
    assert [topics[1].keyed.key_type(k) for k in ("region", "id")] == ["string", "long"]


@pytest.mark.parametrize(
    ("keyed", "expected"),
    [
        (
            {"key_from": "kafka_key", "key": ["id"]},
            "topics[0].keyed.key: not with key_format: avro: the key columns are the fields of "
            "the Kafka key's Avro record",
        ),
        (
            {"key_from": "kafka_key", "key_format": "string"},
            "topics[0].keyed.key: key_format: string needs key: [the name of its one column]",
        ),
        (
            {"key_from": "kafka_key", "key_format": "string", "key": ["a", "b"]},
            "key_format: string needs key: [the name of its one column], got ['a', 'b']",
        ),
        (
            {"key_from": "kafka_key", "key_format": "json"},
            "topics[0].keyed.key: key_format: json needs key: [the JSON key's fields, in order]",
        ),
        (
            {
                "key_from": "kafka_key",
                "key_format": "json",
                "key": ["id"],
                "key_types": {"id": "int"},
            },  # fmt: skip
            "topics[0].keyed.key_types: id: expected one of string, long, double, boolean, "
            "got 'int'",
        ),
        (
            {
                "key_from": "kafka_key",
                "key_format": "json",
                "key": ["id"],
                "key_types": {"sku": "long"},
            },  # fmt: skip
            "topics[0].keyed.key_types: ['sku'] not among key: ['id']",
        ),
        (
            {
                "key_from": "kafka_key",
                "key_format": "string",
                "key": ["id"],
                "key_types": {"id": "long"},
            },  # fmt: skip
            "topics[0].keyed.key_types: only with key_format: json",
        ),
        (
            {"key": ["id"], "version": "v", "key_format": "string"},
            "topics[0].keyed.key_format: only with key_from: kafka_key",
        ),
        (
            {"key_from": "kafka_table"},
            "topics[0].keyed.key_from: expected one of value, kafka_key, got 'kafka_table'",
        ),
    ],
)
def test_compacted_topic_mistakes_are_config_errors_at_their_key_path(keyed, expected) -> None:
    assert expected in _problems(_config(routing=STATIC, keyed=keyed, event_time=TABLE_TIME))


def test_debezium_topics_are_keyed_by_their_kafka_key_already() -> None:
    raw = _config(format="debezium", routing=STATIC, keyed={"key_from": "kafka_key"})
    assert "topics[0].keyed.key_from: not with format: debezium" in _problems(raw)


def test_a_json_topic_may_be_keyed_only_by_its_kafka_key() -> None:
    schema = {"type": "record", "name": "B", "fields": [{"name": "id", "type": "long"}]}
    by_value = {"key": ["id"], "version": "id"}
    raw = _config(format="json", schema=schema, routing=STATIC, keyed=by_value,
                  event_time=TABLE_TIME)  # fmt: skip
    assert (
        "topics[0].keyed: not with format: json (keyed topics are avro or debezium); a topic "
        "keyed by its Kafka key (key_from: kafka_key) may be"
    ) in _problems(raw)
