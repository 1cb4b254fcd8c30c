"""Raw archive topics (``format: raw``): every message staged as it came, never decoded.

A raw archive keeps the bytes of a topic whose format is not known yet, or whose every message
must be kept for audit (debezium-server-iceberg's ``icebergevents`` mode does this into one
table): any value (Avro of an unknown registry, Protobuf, JSON text, garbage, nothing) is one
row of one fixed schema, the enrichment columns followed by :data:`RAW_VALUE_SCHEMA`'s one
field:

- the enrichment columns, as every format's (core/record/enrichment.py), the event date being
  the Kafka timestamp's UTC date (and an HOUR table's event hour its UTC hour);
- among them, always on for raw topics: the timestamp (``["null", timestamp-millis]``,
  TIMESTAMP), the key (``["null", "bytes"]``, BYTES) and the headers (``array<{key: string,
  value: ["null", "bytes"]}>``, REPEATED RECORD);
- ``value`` (``["null", "bytes"]``, BYTES): the message value, null for a tombstone.

The timestamp, key and headers columns are the pipeline's ``enrichment:`` names when it turns
them on, else :data:`DEFAULT_KEY_COLUMN`, :data:`DEFAULT_HEADERS_COLUMN` and
:data:`DEFAULT_TIMESTAMP_COLUMN` (:func:`raw_enrichment`): a raw archive without the key and
headers would not be an archive.

Nothing is bad input for its content: a null value is a row with a null ``value``, bytes that
are not UTF-8 are bytes. What a raw topic can still dead-letter is what is not content: a
value over ``max_message_size`` (``oversized``), a message without a Kafka timestamp (Kafka's
-1: ``missing_event_time``, there is no date to partition it by) or one outside
``event_time``'s ``min_date``/``max_date`` (``invalid_event_time``), and a function route
that refuses it.

Files carry :data:`RAW_SCHEMA_ID`, the declared-schema id of :data:`RAW_VALUE_SCHEMA`
(core/formats/source_format.py), so a raw table's files sort with no registry id.
"""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from kbqe_dagster.core.formats.protobuf_wire import varint
from kbqe_dagster.core.formats.source_format import declared_schema_id

RAW_RECORD_NAME = "kbqe_dagster.raw.RawMessage"
"""The full name of the raw record: what ``function`` routing sees as the schema name."""

RAW_VALUE_COLUMN = "value"
"""The column of the message value."""

RAW_VALUE_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "RawMessage",
    "namespace": "kbqe_dagster.raw",
    "doc": "A Kafka message as it came: its value, undecoded (null for a tombstone).",
    "fields": [{"name": RAW_VALUE_COLUMN, "type": ["null", "bytes"], "default": None}],
}
"""The record body of every raw row (the enrichment columns go before it)."""

RAW_SCHEMA_ID = declared_schema_id(RAW_VALUE_SCHEMA)
"""The schema id in the names of raw topics' staging files."""

DEFAULT_TIMESTAMP_COLUMN = "_kafka_timestamp"
DEFAULT_KEY_COLUMN = "_kafka_key"
DEFAULT_HEADERS_COLUMN = "_kafka_headers"

_Enrichment = TypeVar("_Enrichment")


def raw_enrichment(config: _Enrichment) -> _Enrichment:
    """The enrichment columns of a raw topic's files: the pipeline's ``config`` (an
    ``EnrichmentConfig``) with the timestamp, key and headers columns turned on under their
    default names where it leaves them off. Raises the config's ``ConfigError`` when a default
    name collides with another column it names."""
    return dataclasses.replace(
        config,  # type: ignore[type-var]
        timestamp_column=config.timestamp_column or DEFAULT_TIMESTAMP_COLUMN,  # type: ignore[attr-defined]
        key_column=config.key_column or DEFAULT_KEY_COLUMN,  # type: ignore[attr-defined]
        headers_column=config.headers_column or DEFAULT_HEADERS_COLUMN,  # type: ignore[attr-defined]
    )


_NULL = b"\x00"
_BYTES_BRANCH = b"\x02"


def encode_raw_value(value: bytes | None) -> bytes:
    """The Avro body of one raw row: the ``["null", "bytes"]`` union of the value."""
    if value is None:
        return _NULL
    return _BYTES_BRANCH + varint(len(value) << 1) + value


RAW_TOPIC_KEYS_REFUSED: dict[str, str] = {
    "keyed": "a raw archive appends every message as it came; keyed tables need decoded keys "
    "and versions",
    "transforms": "raw values are never decoded, so there are no fields to transform",
    "destinations": "a raw archive writes one table per topic or per routing rule; list "
    "another raw topic or route with routing mode function",
}
"""Topic keys that make no sense with ``format: raw``, and why (the configuration error)."""


def raw_topic_problems(
    keys: set[str] | frozenset[str],
    routing_mode: str | None,
    function_fields: tuple[str, ...],
    event_time: Any,
) -> list[tuple[str, str]]:
    """``(key path suffix, message)`` for each rule a ``format: raw`` topic breaks: ``keys``
    are the topic entry's keys, ``routing_mode`` its routing mode (None: the entry has no
    ``routing:``, whose default mode reads record fields), ``event_time`` the entry's own
    ``event_time:`` mapping (None when absent)."""
    problems = [
        (key, f"not with format: raw ({why})")
        for key, why in RAW_TOPIC_KEYS_REFUSED.items()
        if key in keys
    ]
    if "destinations" not in keys:
        if routing_mode not in ("static", "function"):
            problems.append(
                (
                    "routing.mode",
                    "format: raw needs routing mode static or function (got "
                    f"{routing_mode or 'the default, fields'}): raw values are never decoded, so "
                    "there are no record fields or schema names to route by",
                )
            )
        elif function_fields:
            problems.append(
                (
                    "routing.function_fields",
                    "not with format: raw: raw values are never decoded (the function gets the "
                    "topic, partition, offset and key)",
                )
            )
    if isinstance(event_time, dict):
        if event_time.get("fields"):
            problems.append(
                (
                    "event_time.fields",
                    "not with format: raw: a raw row's date is its Kafka timestamp's (UTC)",
                )
            )
        if event_time.get("kafka_timestamp_fallback") is False:
            problems.append(
                (
                    "event_time.kafka_timestamp_fallback",
                    "format: raw always dates rows by their Kafka timestamp",
                )
            )
    return problems
