"""Keyed destinations: the contract between the stage side and the merge side.

A keyed topic (``keyed:`` in the pipeline file, usually with ``format: debezium``) lands in three
BigQuery objects for its destination ``D.T``:

* ``D.T_changelog`` — one row per change message, loaded with free batch load jobs exactly like an
  append table. Its layout is **flat and the same for every source format**: the usual
  enrichment columns (``_event_date``, ``_kafka_topic``, ``_kafka_partition``,
  ``_kafka_offset``, ...), then :data:`OP_COLUMN`, :data:`VERSION_COLUMN`,
  :data:`DELETED_COLUMN`, then the row fields (the Debezium ``after`` image, or ``before`` for a
  delete; the record itself for plain keyed topics), so that a field added to the source row
  later is appended at the end. All the format-specific work happens at stage time, so the MERGE
  and the history see one shape.
* ``D.T`` — the current state, one row per key, maintained by an idempotent MERGE from the
  changelog rows the finished load jobs added.
* ``D.T_history`` — SCD type II, one row per version, when ``history: true``.

**The order of one key's events** is ``(version, kafka partition, kafka offset)`` compared
lexicographically; the greatest wins (spelled out in SQL by ``keyed/rows_sql.newer``). Equal versions within a partition are
decided by the offset (Debezium keeps one key's changes in order in its partition); equal versions
across partitions by the partition number, deterministically. Events of a key with the same version
collapse into one version, the winner.

Kafka tombstones (null values) are neither bad input nor changes in keyed mode: they are counted,
never staged.

**A compacted topic** (``key_from: kafka_key``, a KTable: keyed by the entity id, the latest value
per key, a tombstone meaning deleted) is keyed by its **Kafka key** instead: the key columns come
from the key (an Avro key's fields, a string key as one column, a JSON key's named fields), the
value's fields follow them (NULLABLE, a value field named like a key column left out), and the
order of a key's events is Kafka's, ``(partition, offset)`` (:attr:`KeyedConfig.kafka_ordered`):
one key lives in one partition, and compaction keeps its greatest offset. ``_source_ts_ms`` is
then the ``version`` field when one is configured, else the Kafka timestamp: the version's time
(the history's ``_valid_from``), never its order. A tombstone is a change: ``_op = 'd'``,
``_deleted = true``, the key columns and no values (a key-only delete: soft deletes keep the last
values), written with the key columns alone, a prefix of every value's changelog record.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.formats.source_format import SourceFormat

__all__ = [
    "DeleteMode",
    "KeyFormat",
    "KeySource",
    "KeyedConfig",
    "SourceFormat",
    "changelog_table",
    "history_table",
]

OP_COLUMN = "_op"
"""``c`` (create), ``r`` (snapshot read), ``u`` (update), ``d`` (delete) or ``t`` (truncate), as
Debezium writes it."""
TRUNCATE_OP = "t"
"""A truncate of the whole source table: not a key's change. Its changelog row has
``_deleted = true`` and no row values (NULL where the row field is nullable, the type's zero
value where Avro allows no null); the MERGE and the history never read them. Every key whose
greatest event comes before it is deleted (keyed/merge_sql.py)."""
DEBEZIUM_UNAVAILABLE_VALUE = "__debezium_unavailable_value"
"""Debezium's default ``unavailable.value.placeholder``: the value an update carries for a
TOASTed column it did not change (Postgres, REPLICA IDENTITY DEFAULT)."""
VERSION_COLUMN = "_source_ts_ms"
"""INT64 epoch milliseconds: Debezium's ``source.ts_ms``, or a plain keyed topic's ``version``."""
DELETED_COLUMN = "_deleted"
"""BOOL: this event deletes its key."""
CHANGE_COLUMNS = (OP_COLUMN, VERSION_COLUMN, DELETED_COLUMN)

CHANGELOG_SUFFIX = "_changelog"
HISTORY_SUFFIX = "_history"
"""``D.T`` is fed by ``D.T_changelog``; its SCD type II history is ``D.T_history``."""


class DeleteMode(str, Enum):
    SOFT = "soft"
    """A deleted key keeps its last values with ``_deleted = true``: the delete's before
    image, or, when that holds only the key (REPLICA IDENTITY DEFAULT), the latest values."""
    HARD = "hard"
    """A deleted key has no row in the current table."""


class KeySource(str, Enum):
    VALUE = "value"
    """The key columns are fields of the value (``key:``)."""
    KAFKA_KEY = "kafka_key"
    """The key columns come from the Kafka key; the topic is a table (compacted: the latest value
    per key, a tombstone deleting it)."""


class KeyFormat(str, Enum):
    AVRO = "avro"
    """A Confluent-framed Avro record through the registry: its fields are the key columns."""
    STRING = "string"
    """UTF-8 text: one STRING column, named by ``key:``."""
    JSON = "json"
    """A JSON object: the fields named by ``key:``, typed by ``key_types``."""


KAFKA_KEYED_FORMATS = frozenset(
    {
        SourceFormat.AVRO,
        SourceFormat.JSON,
        SourceFormat.JSON_SCHEMA,
        SourceFormat.PROTOBUF,
        SourceFormat.DECODER,
    }
)
"""The formats a topic keyed by its Kafka key (``key_from: kafka_key``) may have."""

KEY_TYPES = ("string", "long", "double", "boolean")
"""The Avro types a JSON key's field may be staged as (``key_types``)."""


@dataclass(frozen=True)
class KeyedConfig:
    """A topic's ``keyed:`` section, defaults applied."""

    key: tuple[str, ...] = ()
    """Row fields that identify a row, as the source names them. Empty with ``format:
    debezium``: the fields of the Kafka key's schema (the registry's ``<topic>-key``, else the
    schema embedded in the topic's latest JsonConverter key). With ``key_from: kafka_key``: the
    one column of a string key, or the fields of a JSON key (not set for an Avro key: its
    schema's fields). A ``rename`` transform of a key field moves the key to its new column; a
    transform that would not keep a key's identity is refused (``rename``, hmac ``mask`` and
    ``cast`` to string are the ones a key takes)."""
    key_from: KeySource = KeySource.VALUE
    """``value``: the key columns are the value's ``key:`` fields, ordered by ``version``.
    ``kafka_key``: the topic is a table (a compacted topic, a KTable): the key columns come
    from the Kafka key, a key's versions are ordered by their Kafka offset, a tombstone (null
    value) deletes its key; every format but ``debezium`` and ``raw``."""
    key_format: KeyFormat = KeyFormat.AVRO
    """With ``key_from: kafka_key``, how the Kafka key is written: ``avro`` (Confluent-framed,
    its record's fields are the key columns), ``string`` (UTF-8, one column named by
    ``key:``) or ``json`` (an object, the fields named by ``key:``)."""
    key_types: tuple[tuple[str, str], ...] = ()
    """With ``key_format: json``: the Avro type of a key field, ``string`` (the default),
    ``long``, ``double`` or ``boolean``, as ``{field: type}``."""
    deletes: DeleteMode = DeleteMode.SOFT
    """``soft``: a deleted key keeps its last values with ``_deleted = true``; ``hard``: it has
    no row in the current table."""
    history: bool = False
    """Also maintain the SCD type II ``<table>_history``."""
    version: str | None = None
    """Plain keyed topics: the field path (timestamp or long) that orders a key's versions.
    With ``key_from: kafka_key`` (optional): the version's time (``_source_ts_ms``, the
    history's ``_valid_from``; the Kafka timestamp when unset), not its order."""
    delete_field: str | None = None
    """Plain keyed topics: an optional boolean field meaning "this key is deleted"."""
    merge_every: int = 1
    """Merge the current table at every N-th merge tick (``load.poll_interval``) that finds
    new changelog rows, loaded or delivered through the Storage Write API (1: at every such
    tick); ``kbqe run --until-idle`` merges what is new at once."""
    unavailable_value: str | None = None
    """The value a change carries for a column whose value it does not have: Debezium's
    connector option ``unavailable.value.placeholder``. Unset: ``__debezium_unavailable_value``
    with ``format: debezium``, none for plain keyed topics; ``""``: none. A string column
    holding it, a bytes column holding its UTF-8 bytes, or an array of strings holding only
    it, means "unchanged" (an update that did not touch a TOASTed column): the current table
    and the history keep the key's latest real value of that column (NULL when there is
    none), never the placeholder. The changelog keeps each change as received, placeholder
    included."""

    semantic_types: bool = True
    """Columns of Kafka Connect semantic types (a Debezium ``io.debezium.time.Date``) in the
    BigQuery type they map to (docs/configuration.md, "Semantic types"); ``false``: in the Avro
    type they are sent as (INT64 for a date), as kbqe staged them before this mapping: for a
    table created then, whose loads would otherwise be refused (INT64 → DATE)."""

    def placeholder(self, source_format: SourceFormat) -> str | None:
        """The placeholder in effect for a topic of ``source_format``, or None."""
        if self.unavailable_value is None:
            if source_format is SourceFormat.DEBEZIUM:
                return DEBEZIUM_UNAVAILABLE_VALUE
            return None
        return self.unavailable_value or None

    @property
    def kafka_ordered(self) -> bool:
        """Whether the key comes from the Kafka key and Kafka's order orders a key's events."""
        return self.key_from is KeySource.KAFKA_KEY

    def key_type(self, field: str) -> str:
        """A JSON key field's Avro type."""
        return dict(self.key_types).get(field, "string")

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", tuple(self.key))
        object.__setattr__(self, "deletes", DeleteMode(self.deletes))
        object.__setattr__(self, "key_from", KeySource(self.key_from))
        object.__setattr__(self, "key_format", KeyFormat(self.key_format))
        types = self.key_types.items() if isinstance(self.key_types, dict) else self.key_types
        object.__setattr__(self, "key_types", tuple(sorted(types)))
        if self.merge_every < 1:
            raise ValueError(f"merge_every must be at least 1, got {self.merge_every}")


KEYED_SPEC: dict[str, r.Converter] = {
    "key": r.list_of(r.string, non_empty=True),
    "key_from": r.choice(KeySource),
    "key_format": r.choice(KeyFormat),
    "key_types": r.checked(
        r.string_map,
        lambda types: next(
            (
                f"{name}: expected one of {', '.join(KEY_TYPES)}, got {kind!r}"
                for name, kind in types.items()
                if kind not in KEY_TYPES
            ),
            None,
        ),
    ),
    "deletes": r.choice(DeleteMode),
    "history": r.boolean,
    "version": r.string,
    "delete_field": r.string,
    "merge_every": r.integer(minimum=1),
    "semantic_types": r.boolean,
    "unavailable_value": lambda value: _placeholder(value),
}
"""How each key of a topic's ``keyed:`` section is read (core/config/pipeline.py adds the rules that
involve the topic: its format, routing and the dead-letter table)."""


def _placeholder(value: object) -> str:
    """A string, or ``""`` for none (a column may not hold the empty string as "unchanged")."""
    if not isinstance(value, str):
        raise r.Invalid(f'expected a string ("" for none), got {r.describe(value)}')
    return value


DEBEZIUM_EVENT_TIME_FIELDS = ("source.ts_ms", "__source_ts_ms")
"""A Debezium topic's event date, unless its ``event_time.fields`` say otherwise: the change's
``source.ts_ms`` (the envelope) or ``__source_ts_ms`` (ExtractNewRecordState), in UTC."""


def changelog_table(table: str) -> str:
    """The table a keyed destination's changes are loaded into."""
    return table + CHANGELOG_SUFFIX


def history_table(table: str) -> str:
    return table + HISTORY_SUFFIX
