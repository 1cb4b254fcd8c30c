"""The closed set of reasons a Kafka message is bad input (DESIGN.md §2).

Each value is a stable string: it is written to the dead-letter table's ``reason`` column and
used as a metric label, so renaming one breaks dashboards and queries over historical dead
letters. Add new members; never rename or reuse one.
"""

from __future__ import annotations

from enum import StrEnum


class Reason(StrEnum):
    """Why a message could not be staged. A ``StrEnum``: members compare equal to their string
    value and format as it, so they can be written to columns and labels directly."""

    # --- framing (core/record/wire.py) ---
    TOMBSTONE = "tombstone"
    """The value is null (a compaction tombstone): there is no record to stage."""
    TOO_SHORT = "too_short"
    """Fewer than the 5 bytes of the Confluent header (magic byte + schema id)."""
    BAD_MAGIC = "bad_magic"
    """Byte 0 is not the Confluent magic byte 0x00."""

    # --- schema and body (the decoder) ---
    UNKNOWN_SCHEMA_ID = "unknown_schema_id"
    """The registry does not know the schema id (or the id can never exist: top bit set)."""
    NON_AVRO_SCHEMA = "non_avro_schema"
    """The registry holds the id but for a Protobuf or JSON schema."""
    BODY_DECODE_ERROR = "body_decode_error"
    """The body does not decode with its schema to exactly its own length."""
    UNSUPPORTED_SCHEMA = "unsupported_schema"
    """The writer schema cannot be staged: it does not parse, is not a record, or an enrichment
    column collides with one of its fields (core/record/enrichment.py). On a ``debezium``
    topic also a JSON value without an embedded Connect schema (``schemas.enable=false``), or
    a Connect schema with no Avro form (core/formats/connect_json_avro.py)."""

    # --- event time (core/record/event_time.py) ---
    MISSING_EVENT_TIME = "missing_event_time"
    """No candidate field is present and non-null, and no Kafka timestamp fallback applies."""
    INVALID_EVENT_TIME = "invalid_event_time"
    """A candidate value is present but unparseable or outside the accepted date range."""

    # --- routing (core/record/routing.py) ---
    UNROUTABLE = "unroutable"
    """No valid ``(dataset, table)`` could be derived for the message."""
    DESTINATION_NOT_ALLOWED = "destination_not_allowed"
    """The derived destination is not in the configured allow-list."""

    # --- keyed topics (kbqe_dagster/keyed/changes.py) ---
    NOT_A_CHANGE = "not_a_change"
    """A keyed topic's message is valid Avro but not a row change: a Debezium truncate or
    message event, a change without a version, a delete without a before image."""
    BAD_KEY = "bad_key"
    """A topic keyed by its Kafka key (``keyed.key_from: kafka_key``) whose message key is
    null, or is not what ``keyed.key_format`` says (Confluent-framed Avro of a record, UTF-8
    text, a JSON object holding the ``key`` fields of their ``key_types``); the message says
    which."""
    UNCONVERTIBLE_VALUE = "unconvertible_value"
    """A Kafka Connect semantic value (core/formats/connect_types.py) with no exact value of
    the BigQuery type its column maps to (the message names the column): a ``numeric`` with
    more than 9 decimal places, a timestamp outside BigQuery's range."""

    # --- schemaless JSON topics (kbqe_dagster/formats/json_stage.py) ---
    JSON_DECODE_ERROR = "json_decode_error"
    """A ``format: json`` value that is not UTF-8 JSON text of one object (``json_schema``:
    a body that is not UTF-8 JSON text; ``debezium``: a value starting with ``{`` that is
    not JSON)."""
    JSON_SCHEMA_MISMATCH = "json_schema_mismatch"
    """A JSON object that does not fit the topic's declared schema (the message names the
    field path): a wrong type, a missing required field. ``json_schema`` topics: the value
    fails its registry JSON Schema (the message names the JSON pointer). ``debezium`` topics:
    a JsonConverter payload that does not fit its embedded Connect schema."""

    # --- registry JSON Schema topics (kbqe_dagster/formats/json_schema_stage.py) ---
    NON_JSON_SCHEMA = "non_json_schema"
    """A ``format: json_schema`` message whose framed schema id is an Avro or Protobuf schema."""
    UNMAPPABLE_JSON_SCHEMA = "unmappable_json_schema"
    """The framed JSON Schema has no Avro form (core/formats/json_schema_avro.py names the construct
    and its JSON pointer): ``oneOf`` of objects, ``patternProperties``, a remote ``$ref``..."""

    # --- registry Protobuf topics (kbqe_dagster/formats/protobuf_stage.py) ---
    PROTOBUF_DECODE_ERROR = "protobuf_decode_error"
    """A ``format: protobuf`` body that is not its message: malformed message indexes
    (core/formats/protobuf_wire.py), indexes that name no message of the schema, a Protobuf binary
    that does not parse (a proto2 required field missing included), or a value with no Avro
    form (a uint64 above 2^63-1, an enum number the schema does not declare, a Timestamp
    outside years 1-9999); the message names the field."""
    NON_PROTOBUF_SCHEMA = "non_protobuf_schema"
    """A ``format: protobuf`` message whose framed schema id is an Avro or JSON schema."""
    UNMAPPABLE_PROTOBUF_SCHEMA = "unmappable_protobuf_schema"
    """The framed ``.proto`` does not compile (the message carries protoc's error), a
    reference cannot be fetched, or a message has no Avro form (core/formats/protobuf_avro.py names
    the construct and the field): a recursive message, a message without fields..."""

    # --- transforms (core/transforms/compiler.py) ---
    TRANSFORM_FAILED = "transform_failed"
    """A topic's transform cannot apply to the record or to its schema; the message names the
    transform (``transforms[INDEX] (KIND)``) and the field."""
    # --- user decoders (kbqe_dagster/formats/decoder_stage.py) ---
    DECODER_REJECTED = "decoder_rejected"
    """A ``format: decoder`` topic's decoder refused the message: it raised
    :class:`~kbqe_dagster.core.errors.DecodeError` (``kbqe_dagster.DecodeError``) with its
    reason, e.g. a FIX message whose CheckSum does not match."""
    DECODER_ERROR = "decoder_error"
    """The decoder raised any other exception (a bug, or input it did not expect), or returned
    something that is not ``(record, schema)``; the message names the exception type and where
    in the decoder it was raised."""
    DECODER_SCHEMA_MISMATCH = "decoder_schema_mismatch"
    """The record a decoder returned does not fit the Avro schema it returned with it (the
    message names the field path): a wrong type, a missing field, a field the schema lacks."""

    # --- size ---
    OVERSIZED = "oversized"
    """The message value exceeds the configured ``max_message_size``."""

    # --- Storage Write delivery (kbqe_dagster/delivery/) ---
    STORAGE_WRITE_REFUSED = "storage_write_refused"
    """A row of a ``delivery: storage_write`` table that the BigQuery Storage Write API
    refused, or that cannot be a row of its request; the error carries the API's reason. The
    raw value is the record as staged (enrichment columns first), the schema id its file's."""


KEYED_ONLY = frozenset({Reason.NOT_A_CHANGE, Reason.BAD_KEY, Reason.UNCONVERTIBLE_VALUE})
"""Reasons that only keyed topics produce (their tests live in kbqe_dagster_tests/keyed/)."""
JSON_ONLY = frozenset(
    {
        Reason.JSON_DECODE_ERROR,
        Reason.JSON_SCHEMA_MISMATCH,
        Reason.NON_JSON_SCHEMA,
        Reason.UNMAPPABLE_JSON_SCHEMA,
    }
)
"""Reasons that only ``format: json`` and ``format: json_schema`` topics produce
(kbqe_dagster_tests/formats/), and ``debezium`` topics' JsonConverter values
(kbqe_dagster_tests/keyed/test_connect_json_stage.py)."""
PROTOBUF_ONLY = frozenset(
    {
        Reason.PROTOBUF_DECODE_ERROR,
        Reason.NON_PROTOBUF_SCHEMA,
        Reason.UNMAPPABLE_PROTOBUF_SCHEMA,
    }
)
"""Reasons that only ``format: protobuf`` topics produce (kbqe_dagster_tests/formats/)."""
TRANSFORM_ONLY = frozenset({Reason.TRANSFORM_FAILED})
"""Reasons that only topics with ``transforms`` produce (kbqe_dagster_tests/formats/)."""
STORAGE_WRITE_ONLY = frozenset({Reason.STORAGE_WRITE_REFUSED})
"""Reasons only ``delivery: storage_write`` tables produce, at the range's commit
(kbqe_dagster_tests/delivery/)."""
DECODER_ONLY = frozenset(
    {Reason.DECODER_REJECTED, Reason.DECODER_ERROR, Reason.DECODER_SCHEMA_MISMATCH}
)
"""Reasons that only ``format: decoder`` topics produce (kbqe_dagster_tests/formats/)."""
