"""The one error hierarchy of kbqe_dagster.

Every subsystem raises a subclass of :class:`KbqeError` whose message names what an operator
needs to act: the topic, partition and offset, the file, or the configuration key.
"""

from __future__ import annotations

from kbqe_dagster.core.reasons import Reason


class KbqeError(Exception):
    """Base class of every error raised on purpose by kbqe_dagster."""


# --- configuration -------------------------------------------------------------------------
class ConfigError(KbqeError):
    """The pipeline configuration is invalid; the message names the offending key path.
    ``problems``: each problem as ``(key path, message)`` when the file was read whole
    (``kbqe config check --json`` lists them); empty for an error raised alone."""

    def __init__(self, message: str, problems: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(message)
        self.problems = problems


# --- messages (DESIGN.md §2) ---------------------------------------------------------------
class BadInputError(KbqeError):
    """A Kafka message that cannot be staged. ``reason`` is a stable, machine-readable kind
    (the dead-letter table's ``reason`` column); the message names topic/partition/offset
    when they are known."""

    reason: str = "bad_input"


class WireFormatError(BadInputError):
    """The value is not a Confluent-framed Avro message."""


class BodyDecodeError(BadInputError):
    """The Avro body does not decode under its writer schema to exactly its own length:
    truncated, trailing bytes, or invalid data (bad union/enum index, negative length, invalid
    UTF-8, out-of-range logical value). Raised by ``staging/probe/record_probe.py``."""

    reason = "body_decode_error"


class UnsupportedSchemaError(BadInputError):
    """The writer schema cannot be staged: it does not parse, is not a record, or an
    enrichment column collides with one of its fields. Raised by ``core/record/enrichment.py`` and
    ``staging/probe/record_probe.py``."""

    reason = "unsupported_schema"


class TombstoneError(WireFormatError):
    """The value is null: a compaction tombstone carries no record."""

    reason = Reason.TOMBSTONE


class FrameTooShortError(WireFormatError):
    """The value is shorter than the 5-byte Confluent header."""

    reason = Reason.TOO_SHORT


class BadMagicError(WireFormatError):
    """Byte 0 is not the Confluent magic byte 0x00."""

    reason = Reason.BAD_MAGIC


class InvalidSchemaIdError(WireFormatError):
    """The header's schema id has its top bit set: read as Java's signed int it is negative,
    so no registry can hold it. Same reason as an id the registry does not know."""

    reason = Reason.UNKNOWN_SCHEMA_ID


class EventTimeError(BadInputError):
    """The event date of a record cannot be determined (core/record/event_time.py)."""

    reason = Reason.INVALID_EVENT_TIME


class MissingEventTimeError(EventTimeError):
    """No candidate event-time field is present and non-null, and no fallback applies."""

    reason = Reason.MISSING_EVENT_TIME


class InvalidEventTimeError(EventTimeError):
    """An event-time value is present but unparseable or outside the accepted date range."""

    reason = Reason.INVALID_EVENT_TIME


class RoutingError(BadInputError):
    """No allowed destination table can be derived for a message (core/record/routing.py)."""

    reason = Reason.UNROUTABLE


class UnroutableError(RoutingError):
    """The routing rule yields no valid ``(dataset, table)``: missing, empty or bad names."""

    reason = Reason.UNROUTABLE


class DestinationNotAllowedError(RoutingError):
    """The derived ``(dataset, table)`` is not in the configured allow-list."""

    reason = Reason.DESTINATION_NOT_ALLOWED


class UnknownSchemaIdError(BadInputError):
    """The schema registry does not know the message's schema id."""

    reason = Reason.UNKNOWN_SCHEMA_ID


class NonAvroSchemaError(BadInputError):
    """The schema id belongs to a Protobuf or JSON schema, not Avro."""

    reason = Reason.NON_AVRO_SCHEMA


class OversizedMessageError(BadInputError):
    """The message value is larger than the configured ``max_message_size``."""

    reason = Reason.OVERSIZED


class NotAChangeError(BadInputError):
    """A keyed topic's message that is not a row change (see core/reasons.py)."""

    reason = Reason.NOT_A_CHANGE


class BadKeyError(BadInputError):
    """The Kafka key of a topic keyed by it is null or not of its ``key_format``."""

    reason = Reason.BAD_KEY


class UnconvertibleValueError(BadInputError):
    """A semantic value with no exact value of its column's BigQuery type (core/reasons.py)."""

    reason = Reason.UNCONVERTIBLE_VALUE


class JsonDecodeError(BadInputError):
    """A ``format: json`` value that is not a JSON object (``json_schema``: not UTF-8 JSON)."""

    reason = Reason.JSON_DECODE_ERROR


class JsonSchemaMismatchError(BadInputError):
    """A JSON object that does not fit the declared schema (``json_schema``: that does not
    validate against its registry JSON Schema, or whose value has no Avro form)."""

    reason = Reason.JSON_SCHEMA_MISMATCH


class TransformError(BadInputError):
    """A topic's transforms (core/transforms/compiler.py) cannot apply; the message names the transform
    as ``transforms[INDEX] (KIND)`` and the field."""

    reason = Reason.TRANSFORM_FAILED
    index: int | None = None
    """The failing transform's position in ``transforms`` (for config key paths)."""


class TransformFailedError(TransformError):
    """One record's value cannot be transformed: a text that is not a number, a timestamp out
    of range, a user function that raises."""


class TransformSchemaError(TransformError):
    """The transforms cannot apply to a record schema: a missing field, a field that exists
    already, a type the transform does not read. Raised on the first message of the schema;
    every message of it follows the bad-input policy."""

    where: str | None = None
    """The key path under a destination (``transforms[INDEX]``, ``when``, ``fields[INDEX]``),
    set by core/transforms/destinations.py."""


class DecodeError(BadInputError):
    """Raised by a user decoder (``format: decoder``) to refuse a message, with the reason in
    its message; the message goes to the dead letters as ``decoder_rejected``. Public as
    ``kbqe_dagster.DecodeError``."""

    reason = Reason.DECODER_REJECTED


class DecoderFailedError(BadInputError):
    """A user decoder raised something other than a bad-input error, or returned something
    other than ``(record, schema)``."""

    reason = Reason.DECODER_ERROR


class DecoderSchemaMismatchError(BadInputError):
    """The record a user decoder returned does not fit the schema it returned."""

    reason = Reason.DECODER_SCHEMA_MISMATCH


class NonJsonSchemaError(BadInputError):
    """A ``format: json_schema`` message framed with the id of an Avro or Protobuf schema."""

    reason = Reason.NON_JSON_SCHEMA


class UnmappableJsonSchemaError(BadInputError):
    """A registry JSON Schema with no Avro form (core/formats/json_schema_avro.py names the construct
    and its JSON pointer): every message framed with its id is bad input."""

    reason = Reason.UNMAPPABLE_JSON_SCHEMA


class ProtobufDecodeError(BadInputError):
    """A ``format: protobuf`` body that is not its message (see core/reasons.py)."""

    reason = Reason.PROTOBUF_DECODE_ERROR


class NonProtobufSchemaError(BadInputError):
    """A ``format: protobuf`` message framed with the id of an Avro or JSON schema."""

    reason = Reason.NON_PROTOBUF_SCHEMA


class UnmappableProtobufSchemaError(BadInputError):
    """A registry ``.proto`` that does not compile or has no Avro form (core/formats/protobuf_avro.py
    names the construct): every message framed with its id is bad input."""

    reason = Reason.UNMAPPABLE_PROTOBUF_SCHEMA


class StageRangeFailed(KbqeError):
    """A topic whose bad-input policy is ``fail`` met bad input; names topic/partition/offset."""


# --- staging (DESIGN.md §3) ----------------------------------------------------------------
class StagingError(KbqeError):
    """The staging area is in a state the stage or load step cannot proceed from."""


class CommitConflictError(StagingError):
    """A create-only done file already exists: another writer committed this range first."""


# --- loading (DESIGN.md §4) ----------------------------------------------------------------
class LoadError(KbqeError):
    """A BigQuery load job could not be planned, submitted or followed."""


class StateFileError(LoadError):
    """The load state file is missing, unreadable or corrupt."""


class StagingAreaConflictError(LoadError):
    """A load job of a topic into a table that another staging area feeds with that topic
    (core/load/feeds.py): loading it would put the topic's records in twice. The message
    names the table, the topic and both staging areas."""


class SchemaChangeRefusedError(LoadError):
    """A staged schema that no table schema change can take (core/load/evolution.py): a
    field whose type changed, an array that became a single value or the reverse. The
    message names the table, the column and what to do. Raised before any row of that
    schema reaches the table, by the load step and by Storage Write delivery alike."""


# --- Storage Write API delivery (issue 25) -------------------------------------------------
class RowEncodeError(KbqeError):
    """A staged record that cannot be a Storage Write API row (core/formats/avro_proto.py): a
    null item in an array (BigQuery's REPEATED has no NULL), a value of the wrong type. The
    message names the file, the record's index (``index``) and the field."""

    index: int | None = None


class StorageWriteError(KbqeError):
    """The BigQuery Storage Write API answered something the delivery protocol does not
    expect (resources/bigquery/storage_write.py): a missing table or stream, a refused
    schema, a transport error that outlived its retries. The message names dataset.table,
    the stream and the API's status. Offsets already written (``ALREADY_EXISTS``), a gap
    (``OUT_OF_RANGE``) and refused rows are answers, not errors (``AppendOutcome``)."""


class WriteStreamNotFoundError(StorageWriteError):
    """The stream an append or a finalize names does not exist (any more): BigQuery garbage
    collects idle streams, and the local emulator forgets every stream when it restarts.
    The delivery protocol then creates a new stream."""


# --- operator commands -----------------------------------------------------------------------
class OperatorCommandError(KbqeError):
    """An operator command (``kbqe ...``) got an argument it cannot use, or was asked for
    something it refuses to do safely; the message names the option or the topic/partition
    and what to do instead. Raised by ``kbqe_dagster/operations/`` and the CLI."""


# --- local stack -----------------------------------------------------------------------------
class StackError(KbqeError):
    """The local development stack could not be installed, started or reached; the message
    says what is wrong and how to fix it."""
