"""How a keyed destination's row is resolved from its changelog events, as SQL: the parts the
MERGE (merge_sql.py), the history view (history_sql.py) and the check (check_sql.py) share.
Pure text from a :class:`MergeSpec`.

**Order.** A key's events compare by ``(version, partition, offset)`` (core/keyed/contract.py), or
by ``(partition, offset)`` for a topic keyed by its Kafka key (:attr:`MergeSpec.kafka_order`); the
SQL spells the lexicographic comparison out (:func:`newer`), since BigQuery cannot compare
structs with ``>``.

**A key's row** (:func:`resolved_rows_sql`) is its greatest event's change and order columns
with, for each row field, the key's latest real value: of its latest event with a row image
(a row change, or a delete whose before image holds more than the key) whose field is not the
unavailable-value placeholder (an unchanged TOASTed column), else NULL. A key-only delete
(REPLICA IDENTITY DEFAULT) therefore keeps the last values, and the placeholder is never a
value. The latest truncate (``_op = 't'``, no key's event) deletes
every key whose greatest event comes before it: ``_op = 't'``, ``_deleted = true``, its
order, the values kept; no row with hard deletes. The values are wrapped in a STRUCT while
they are chosen, so that a real NULL stays apart from "no value here".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from kbqe_dagster.core.keyed.contract import (
    DELETED_COLUMN,
    OP_COLUMN,
    TRUNCATE_OP,
    VERSION_COLUMN,
    DeleteMode,
)
from kbqe_dagster.core.record.partition_filter import date_partitions, every_partition


class PlaceholderKind(str, Enum):
    """How a column holds the unavailable-value placeholder (Debezium's rules per type)."""

    STRING = "string"
    """A STRING column (text, varchar, json, jsonb, xml, ...): the placeholder itself."""
    BYTES = "bytes"
    """A BYTES column (bytea): its UTF-8 bytes."""
    STRINGS = "strings"
    """A repeated STRING column (text[]): an array holding only the placeholder."""


def placeholder_kind(field_type: str, mode: str | None) -> PlaceholderKind | None:
    """The kind of a changelog column of BigQuery type ``field_type`` and ``mode``, or None
    when it cannot hold the placeholder (numbers, dates, records, ...)."""
    if field_type == "STRING":
        return PlaceholderKind.STRINGS if mode == "REPEATED" else PlaceholderKind.STRING
    if field_type == "BYTES" and mode != "REPEATED":
        return PlaceholderKind.BYTES
    return None


@dataclass(frozen=True)
class MergeSpec:
    """One keyed destination, as the SQL needs it. Table names are fully qualified."""

    target: str
    changelog: str
    key: tuple[str, ...]
    row_columns: tuple[str, ...]
    """Row fields in changelog order (the key among them)."""
    deletes: DeleteMode
    partition_column: str = "_kafka_partition"
    offset_column: str = "_kafka_offset"
    deleted_keys: str | None = None
    """Hard deletes: the table that records each key's greatest delete."""
    unavailable_value: str | None = None
    """The placeholder of a value the change does not have (``keyed.unavailable_value``)."""
    placeholders: tuple[tuple[str, str], ...] = ()
    """(row field, :class:`PlaceholderKind`) of the fields whose type can hold it."""
    truncates: bool = False
    """The changelog may hold truncates (``format: debezium``)."""
    repeated: tuple[str, ...] = ()
    """Row fields that are arrays (BigQuery stores no NULL array: an empty one)."""
    kafka_order: bool = False
    """A key's events are ordered by Kafka alone, ``(partition, offset)`` (a topic keyed by its
    Kafka key: core/keyed/contract.py); ``_source_ts_ms`` is then their time, not their order."""
    date_column: str = "_event_date"
    """The changelog's time partition column: every read of the changelog filters on it
    (:func:`every_changelog_partition`, :func:`changed_partitions`), so that the statements
    run on a changelog with ``require_partition_filter`` and the new rows' reads prune."""
    changed_dates: tuple[str, ...] | None = None
    """The event dates (ISO) of the changelog rows of the ranges merged now, from their done
    files' manifests; None: not known (the reads of new rows then scan every partition)."""

    @property
    def order_columns(self) -> tuple[str, ...]:
        if self.kafka_order:
            return (self.partition_column, self.offset_column)
        return (VERSION_COLUMN, self.partition_column, self.offset_column)

    @property
    def target_columns(self) -> tuple[str, ...]:
        """The current table's columns: row fields, change columns, the winner's location."""
        return (
            *self.row_columns,
            OP_COLUMN,
            VERSION_COLUMN,
            DELETED_COLUMN,
            self.partition_column,
            self.offset_column,
        )


def ident(name: str) -> str:
    """A quoted identifier or table path."""
    return f"`{name}`"


def comes_after(left: str, right: str, order: Iterable[str]) -> str:
    """SQL: ``left``'s event comes after ``right``'s in the order of a key's events."""
    columns = list(order)
    head, *rest = columns
    if not rest:
        return f"{left}.{ident(head)} > {right}.{ident(head)}"
    return (
        f"({left}.{ident(head)} > {right}.{ident(head)} OR ({left}.{ident(head)} = {right}.{ident(head)} "
        f"AND {comes_after(left, right, rest)}))"
    )


Ranges = Mapping[int, Sequence[tuple[int, int]]]
"""``{partition: [(first offset, last offset), ...]}``, inclusive."""


def ranges_filter(spec: MergeSpec, ranges: Ranges) -> str:
    """SQL: the row lies in one of ``ranges``."""
    parts = []
    for partition, spans in sorted(ranges.items()):
        offsets = " OR ".join(f"{ident(spec.offset_column)} BETWEEN {a} AND {b}" for a, b in spans)
        parts.append(f"({ident(spec.partition_column)} = {partition} AND ({offsets}))")
    return " OR ".join(parts) if parts else "FALSE"


def every_changelog_partition(spec: MergeSpec, alias: str = "") -> str:
    """SQL: every partition of the changelog (a read of all its history, or of its rows
    outside some ranges, which may lie in any partition)."""
    return every_partition(spec.date_column, alias)


def changed_partitions(spec: MergeSpec, alias: str = "") -> str:
    """SQL: the partitions the rows of the ranges merged now lie in (:attr:`MergeSpec.
    changed_dates`), else every partition."""
    if spec.changed_dates is None:
        return every_changelog_partition(spec, alias)
    return date_partitions(spec.date_column, spec.changed_dates, alias)


def key_match(spec: MergeSpec, left: str, right: str) -> str:
    return " AND ".join(f"{left}.{ident(k)} = {right}.{ident(k)}" for k in spec.key)


# --- the values of a key's row ------------------------------------------------------------------
def not_truncate(alias: str = "") -> str:
    return f"{alias}{ident(OP_COLUMN)} != '{TRUNCATE_OP}'"


def _literal(text: str) -> str:
    """A GoogleSQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def placeholder_test(spec: MergeSpec, column: str) -> str | None:
    """SQL: ``column`` holds the placeholder (never NULL); None when it cannot hold it."""
    kind = dict(spec.placeholders).get(column)
    if spec.unavailable_value is None or kind is None:
        return None
    value, name = _literal(spec.unavailable_value), ident(column)
    test = {
        PlaceholderKind.STRING: f"{name} = {value}",
        PlaceholderKind.BYTES: f"{name} = CAST({value} AS BYTES)",
        PlaceholderKind.STRINGS: f"ARRAY_LENGTH({name}) = 1 AND {name}[SAFE_OFFSET(0)] = {value}",
    }[PlaceholderKind(kind)]
    return f"IFNULL({test}, FALSE)"


def has_image(spec: MergeSpec) -> str:
    """SQL per changelog row: a row field besides the key is set. A delete without one has a
    key-only before image (REPLICA IDENTITY DEFAULT) and offers no values; with one, its
    before image is the row (REPLICA IDENTITY FULL)."""
    tests = [
        f"ARRAY_LENGTH({ident(c)}) > 0" if c in spec.repeated else f"{ident(c)} IS NOT NULL"
        for c in spec.row_columns
        if c not in spec.key
    ]
    return "(" + " OR ".join(tests) + ")" if tests else "FALSE"


IMAGE_COLUMN = "_image"
"""Set per changelog row by :func:`imaged`: :func:`has_image` of the row."""


def imaged(spec: MergeSpec, where: str, alias: str = "c", partitions: str | None = None) -> str:
    """SQL, a derived table: the changelog rows (aliased ``alias``) that satisfy ``where``,
    in ``partitions`` (an SQL filter on the partition column; default every partition),
    truncates left out, each with :data:`IMAGE_COLUMN`. The image test names every row field;
    computed once per row here, not once per field in :func:`candidates`, the statements
    grow with the table's width, not its square (a table of 300 columns would otherwise
    exceed BigQuery's 1 MB query text, and a parser takes seconds on a table of 25)."""
    return (
        f"(SELECT {alias}.*, {has_image(spec)} AS {ident(IMAGE_COLUMN)} FROM {ident(spec.changelog)} "
        f"{alias} WHERE ({where}) AND {not_truncate(alias + '.')} AND "
        f"{partitions or every_changelog_partition(spec, alias)})"
    )


def candidates(spec: MergeSpec, column: str) -> tuple[str, str]:
    """SQL per changelog row: ``column``'s value wrapped in a STRUCT when this row offers it,
    else NULL (the wrapper keeps a real NULL apart from "no value"): first as a row change or
    a delete with a full before image offers it (not the placeholder), then as a key-only
    delete does (a key only ever deleted so: NULL)."""
    test = placeholder_test(spec, column)
    real = "TRUE" if test is None else f"NOT {test}"
    deleted, image = ident(DELETED_COLUMN), ident(IMAGE_COLUMN)
    value = f"STRUCT({ident(column)} AS x)"
    return (
        f"IF((NOT {deleted} OR {image}) AND {real}, {value}, NULL)",
        f"IF({deleted} AND NOT {image} AND {real}, {value}, NULL)",
    )


def resolved_rows_sql(spec: MergeSpec, where: str, applied: str, alias: str = "c") -> str:
    """Each key's current row from the changelog rows (aliased ``alias``) that satisfy
    ``where``, the latest truncate among those that satisfy ``applied`` applied to it (see
    :func:`truncated`); deleted keys included.

    The winner's change and order columns; each row field the key's latest real value: of its
    latest event with a row image (c, r, u, or a delete whose before image holds more than the
    key: REPLICA IDENTITY FULL) whose field does not hold the placeholder, else NULL. So a
    key-only delete (REPLICA IDENTITY DEFAULT) keeps the last values, and an update that did
    not change a TOASTed column keeps its value. Computed by running windows at the
    winner (the check computes it another way: check_sql.py)."""
    keys = ", ".join(ident(k) for k in spec.key)
    ascending = ", ".join(ident(c) for c in spec.order_columns)
    descending = ", ".join(f"{ident(c)} DESC" for c in spec.order_columns)
    values = running_values(spec, running_window(spec))
    rest = ", ".join(ident(c) for c in spec.target_columns[len(spec.row_columns) :])
    resolved = (
        f"SELECT {', '.join(values)}, {rest} FROM {imaged(spec, where, alias)} {alias} "
        f"QUALIFY ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY {descending}) = 1"
    )
    if not spec.truncates:
        return resolved
    latest = (
        f"(SELECT AS STRUCT {ascending} FROM {ident(spec.changelog)} WHERE ({applied}) AND "
        f"{ident(OP_COLUMN)} = '{TRUNCATE_OP}' AND {every_changelog_partition(spec)} "
        f"ORDER BY {descending} LIMIT 1)"
    )
    return truncated(spec, f"SELECT r.*, {latest} AS _t FROM ({resolved}) r")


def truncated(spec: MergeSpec, rows: str) -> str:
    """``rows`` (target columns plus ``_t``, the latest truncate's order or NULL) with every
    key whose greatest event comes before ``_t`` deleted by it: ``_op = 't'``,
    ``_deleted = true``, the truncate's order; the values are kept."""
    cut = f"IFNULL({comes_after('w._t', 'w', spec.order_columns)}, FALSE)"
    out = {c: f"w.{ident(c)}" for c in spec.target_columns}
    out[OP_COLUMN] = f"IF({cut}, '{TRUNCATE_OP}', w.{ident(OP_COLUMN)})"
    out[DELETED_COLUMN] = f"(w.{ident(DELETED_COLUMN)} OR {cut})"
    for c in spec.order_columns:
        out[c] = f"IF({cut}, w._t.{ident(c)}, w.{ident(c)})"
    return f"SELECT {', '.join(f'{e} AS {ident(c)}' for c, e in out.items())} FROM ({rows}) w"


def running_window(spec: MergeSpec) -> str:
    """SQL: the window of a key's events in order, up to the current one."""
    keys = ", ".join(ident(k) for k in spec.key)
    ascending = ", ".join(ident(c) for c in spec.order_columns)
    return (
        f"OVER (PARTITION BY {keys} ORDER BY {ascending} "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
    )


def running_values(spec: MergeSpec, running: str, pick: str = "LAST_VALUE") -> list[str]:
    """The row fields resolved at each changelog row by windows ``running`` over the key's
    events (see :func:`resolved_rows_sql`): each the value ``pick`` (an SQL navigation
    function: the MERGE takes the last in ascending order, the check the first in descending
    order) finds among those its events offer, else among a key-only delete's."""
    values = []
    for column in spec.row_columns:
        if column in spec.key:
            values.append(ident(column))
            continue
        change, delete = candidates(spec, column)
        values.append(
            f"COALESCE({pick}({change} IGNORE NULLS) {running}, "
            f"{pick}({delete} IGNORE NULLS) {running}).x AS {ident(column)}"
        )
    return values
