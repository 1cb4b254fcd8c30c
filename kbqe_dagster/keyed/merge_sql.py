"""The SQL of a keyed destination ``D.T``: the MERGE that keeps its current state, and the
SCD type II history view. Pure text from a :class:`MergeSpec`; ``merge.py`` runs it.

**Order.** A key's events compare by ``(version, partition, offset)`` (core/keyed/contract.py); the
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

**The MERGE is idempotent.** The keys it touches are those of the changelog rows of the offset
ranges to merge; each touched key's row is recomputed from all its *merged* changelog rows
(every row outside the ranges that stay unmerged: other load jobs' pending or not merged yet)
and written when it differs from the table's; then the latest merged truncate is applied to
every row older than it. Repeating a merge, or merging rows that were already applied,
therefore changes nothing, and the current table is a function of the merged jobs alone,
whatever order their events came in, which the check (:func:`check_sql`) recomputes
independently. The price: the recomputation reads the touched keys' whole history, a key
filter the changelog's clustering (partition, offset) does not prune.

**Hard deletes** leave no row; each key's greatest delete is also recorded in
``D.T_deleted_keys`` (key plus its event's order), for operators: the recomputation sees the
deletes in the changelog itself. The statements run current table first and are each
idempotent, so a crash between them is repaired by the next merge of the same rows.

**History** is a view over the changelog: each key's events collapse per version to the
winner, each version is valid from its ``_source_ts_ms`` until the next version of the key or
the first truncate after it (``9999-12-31 23:59:59.999999 UTC`` for the last), its values
resolved as the current table's up to the version. A view is always consistent with the
changelog, however late an out-of-order version arrives; it is replaced when the row's
columns change.
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

END_OF_TIME = "TIMESTAMP '9999-12-31 23:59:59.999999 UTC'"
DELETED_KEYS_SUFFIX = "_deleted_keys"


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

    @property
    def order_columns(self) -> tuple[str, str, str]:
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


def q(name: str) -> str:
    """A quoted identifier or table path."""
    return f"`{name}`"


def newer(left: str, right: str, order: Iterable[str]) -> str:
    """SQL: ``left``'s event comes after ``right``'s in the order of a key's events."""
    columns = list(order)
    head, *rest = columns
    if not rest:
        return f"{left}.{q(head)} > {right}.{q(head)}"
    return (
        f"({left}.{q(head)} > {right}.{q(head)} OR ({left}.{q(head)} = {right}.{q(head)} "
        f"AND {newer(left, right, rest)}))"
    )


Ranges = Mapping[int, Sequence[tuple[int, int]]]
"""``{partition: [(first offset, last offset), ...]}``, inclusive."""


def ranges_filter(spec: MergeSpec, ranges: Ranges) -> str:
    """SQL: the row lies in one of ``ranges``."""
    parts = []
    for partition, spans in sorted(ranges.items()):
        offsets = " OR ".join(f"{q(spec.offset_column)} BETWEEN {a} AND {b}" for a, b in spans)
        parts.append(f"({q(spec.partition_column)} = {partition} AND ({offsets}))")
    return " OR ".join(parts) if parts else "FALSE"


def _key_match(spec: MergeSpec, left: str, right: str) -> str:
    return " AND ".join(f"{left}.{q(k)} = {right}.{q(k)}" for k in spec.key)


def winners_sql(spec: MergeSpec, ranges: Ranges) -> str:
    """Each key's greatest event among the changelog rows of ``ranges`` (truncates left out:
    they are no key's event)."""
    columns = ", ".join(q(c) for c in spec.target_columns)
    keys = ", ".join(q(k) for k in spec.key)
    order = ", ".join(f"{q(c)} DESC" for c in spec.order_columns)
    return (
        f"SELECT {columns} FROM {q(spec.changelog)} WHERE ({ranges_filter(spec, ranges)}) "
        f"AND {_not_truncate()} "
        f"QUALIFY ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY {order}) = 1"
    )


# --- the values of a key's row ------------------------------------------------------------------
def _not_truncate(alias: str = "") -> str:
    return f"{alias}{q(OP_COLUMN)} != '{TRUNCATE_OP}'"


def _literal(text: str) -> str:
    """A GoogleSQL string literal."""
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def placeholder_test(spec: MergeSpec, column: str) -> str | None:
    """SQL: ``column`` holds the placeholder (never NULL); None when it cannot hold it."""
    kind = dict(spec.placeholders).get(column)
    if spec.unavailable_value is None or kind is None:
        return None
    value, name = _literal(spec.unavailable_value), q(column)
    test = {
        PlaceholderKind.STRING: f"{name} = {value}",
        PlaceholderKind.BYTES: f"{name} = CAST({value} AS BYTES)",
        PlaceholderKind.STRINGS: f"ARRAY_LENGTH({name}) = 1 AND {name}[SAFE_OFFSET(0)] = {value}",
    }[PlaceholderKind(kind)]
    return f"IFNULL({test}, FALSE)"


def _has_image(spec: MergeSpec) -> str:
    """SQL per changelog row: a row field besides the key is set. A delete without one has a
    key-only before image (REPLICA IDENTITY DEFAULT) and offers no values; with one, its
    before image is the row (REPLICA IDENTITY FULL)."""
    tests = [
        f"ARRAY_LENGTH({q(c)}) > 0" if c in spec.repeated else f"{q(c)} IS NOT NULL"
        for c in spec.row_columns
        if c not in spec.key
    ]
    return "(" + " OR ".join(tests) + ")" if tests else "FALSE"


def _candidates(spec: MergeSpec, column: str) -> tuple[str, str]:
    """SQL per changelog row: ``column``'s value wrapped in a STRUCT when this row offers it,
    else NULL (the wrapper keeps a real NULL apart from "no value"): first as a row change or
    a delete with a full before image offers it (not the placeholder), then as a key-only
    delete does (a key only ever deleted so: NULL)."""
    test = placeholder_test(spec, column)
    real = "TRUE" if test is None else f"NOT {test}"
    deleted, image = q(DELETED_COLUMN), _has_image(spec)
    value = f"STRUCT({q(column)} AS x)"
    return (
        f"IF((NOT {deleted} OR {image}) AND {real}, {value}, NULL)",
        f"IF({deleted} AND NOT {image} AND {real}, {value}, NULL)",
    )


def resolved_rows_sql(spec: MergeSpec, where: str, applied: str, alias: str = "c") -> str:
    """Each key's current row from the changelog rows (aliased ``alias``) that satisfy
    ``where``, the latest truncate among those that satisfy ``applied`` applied to it (see
    :func:`_truncated`); deleted keys included.

    The winner's change and order columns; each row field the key's latest real value: of its
    latest event with a row image (c, r, u, or a delete whose before image holds more than the
    key: REPLICA IDENTITY FULL) whose field does not hold the placeholder, else NULL. So a
    key-only delete (REPLICA IDENTITY DEFAULT) keeps the last values, and an update that did
    not change a TOASTed column keeps its value. Computed by running windows at the
    winner (the check computes it another way, :func:`check_sql`)."""
    keys = ", ".join(q(k) for k in spec.key)
    ascending = ", ".join(q(c) for c in spec.order_columns)
    descending = ", ".join(f"{q(c)} DESC" for c in spec.order_columns)
    running = (
        f"OVER (PARTITION BY {keys} ORDER BY {ascending} "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
    )
    values = _running_values(spec, running)
    rest = ", ".join(q(c) for c in spec.target_columns[len(spec.row_columns) :])
    resolved = (
        f"SELECT {', '.join(values)}, {rest} FROM {q(spec.changelog)} {alias} "
        f"WHERE ({where}) AND {_not_truncate()} "
        f"QUALIFY ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY {descending}) = 1"
    )
    if not spec.truncates:
        return resolved
    latest = (
        f"(SELECT AS STRUCT {ascending} FROM {q(spec.changelog)} WHERE ({applied}) AND "
        f"{q(OP_COLUMN)} = '{TRUNCATE_OP}' ORDER BY {descending} LIMIT 1)"
    )
    return _truncated(spec, f"SELECT r.*, {latest} AS _t FROM ({resolved}) r")


def _truncated(spec: MergeSpec, rows: str) -> str:
    """``rows`` (target columns plus ``_t``, the latest truncate's order or NULL) with every
    key whose greatest event comes before ``_t`` deleted by it: ``_op = 't'``,
    ``_deleted = true``, the truncate's order; the values are kept."""
    cut = f"IFNULL({newer('w._t', 'w', spec.order_columns)}, FALSE)"
    out = {c: f"w.{q(c)}" for c in spec.target_columns}
    out[OP_COLUMN] = f"IF({cut}, '{TRUNCATE_OP}', w.{q(OP_COLUMN)})"
    out[DELETED_COLUMN] = f"(w.{q(DELETED_COLUMN)} OR {cut})"
    for c in spec.order_columns:
        out[c] = f"IF({cut}, w._t.{q(c)}, w.{q(c)})"
    return f"SELECT {', '.join(f'{e} AS {q(c)}' for c, e in out.items())} FROM ({rows}) w"


def merge_sql(spec: MergeSpec, ranges: Ranges, unmerged: Ranges | None = None) -> list[str]:
    """The statements that apply ``ranges`` to the current table, in order. ``unmerged``: the
    ranges of other load jobs whose rows may be in the changelog but are not merged (none by
    default); the rows of every other range are the merged ones.

    The keys of ``ranges`` get the row recomputed from all their merged rows and those of
    ``ranges`` (:func:`resolved_rows_sql`), written when it differs from the table's; then
    the latest merged truncate deletes every row older than it."""
    columns = spec.target_columns
    updates = ", ".join(f"{q(c)} = s.{q(c)}" for c in columns if c not in spec.key)
    names = ", ".join(q(c) for c in columns)
    values = ", ".join(f"s.{q(c)}" for c in columns)
    applied = f"NOT ({ranges_filter(spec, unmerged or {})})"
    touched = (
        f"EXISTS (SELECT 1 FROM {q(spec.changelog)} b WHERE ({ranges_filter(spec, ranges)}) "
        f"AND {_not_truncate('b.')} AND {_key_match(spec, 'b', 'c')})"
    )
    source = resolved_rows_sql(spec, f"{applied} AND {touched}", applied, alias="c")
    differs = (
        f"TO_JSON_STRING(STRUCT({', '.join(f't.{q(c)} AS {q(c)}' for c in columns)})) != "
        f"TO_JSON_STRING(STRUCT({', '.join(f's.{q(c)} AS {q(c)}' for c in columns)}))"
    )
    deleted = q(DELETED_COLUMN)
    on = _key_match(spec, "t", "s")
    if spec.deletes is DeleteMode.SOFT:
        statements = [
            f"MERGE {q(spec.target)} t USING ({source}) s ON {on} "
            f"WHEN MATCHED AND {differs} THEN UPDATE SET {updates} "
            f"WHEN NOT MATCHED THEN INSERT ({names}) VALUES ({values})"
        ]
    else:
        statements = [
            f"MERGE {q(spec.target)} t USING ({source}) s ON {on} "
            f"WHEN MATCHED AND s.{deleted} THEN DELETE "
            f"WHEN MATCHED AND {differs} THEN UPDATE SET {updates} "
            f"WHEN NOT MATCHED AND NOT s.{deleted} THEN INSERT ({names}) VALUES ({values})"
        ]
    if spec.truncates:
        statements.append(truncate_sql(spec, applied))
    if spec.deletes is DeleteMode.HARD:
        statements.append(_remember_deletes_sql(spec, ranges))
    return statements


def truncate_sql(spec: MergeSpec, applied: str) -> str:
    """The latest truncate among the rows that satisfy ``applied`` deletes every row of the
    table whose event comes before it (soft: ``_op = 't'``, ``_deleted = true``, its order;
    hard: removed). Idempotent: a truncated row's order is the truncate's, not before it."""
    ascending = ", ".join(q(c) for c in spec.order_columns)
    descending = ", ".join(f"{q(c)} DESC" for c in spec.order_columns)
    latest = (
        f"SELECT {ascending} FROM {q(spec.changelog)} WHERE ({applied}) AND "
        f"{q(OP_COLUMN)} = '{TRUNCATE_OP}' ORDER BY {descending} LIMIT 1"
    )
    before = newer("tr", "t", spec.order_columns)
    if spec.deletes is DeleteMode.HARD:
        return (
            f"DELETE FROM {q(spec.target)} t WHERE EXISTS (SELECT 1 FROM ({latest}) tr "
            f"WHERE {before})"
        )
    order = ", ".join(f"{q(c)} = tr.{q(c)}" for c in spec.order_columns)
    return (
        f"UPDATE {q(spec.target)} t SET {q(OP_COLUMN)} = '{TRUNCATE_OP}', "
        f"{q(DELETED_COLUMN)} = TRUE, {order} FROM ({latest}) tr WHERE {before}"
    )


def _remember_deletes_sql(spec: MergeSpec, ranges: Ranges) -> str:
    """Hard deletes: each key's greatest delete in ``D.T_deleted_keys`` (an operator's record
    of what was deleted; the recomputation itself does not need it)."""
    assert spec.deleted_keys, "hard deletes need the deleted-keys table"
    names = ", ".join(q(c) for c in spec.target_columns)
    deleted = q(DELETED_COLUMN)
    key_columns = ", ".join(q(k) for k in spec.key)
    key_values = ", ".join(f"s.{q(k)}" for k in spec.key)
    order_names = ", ".join(q(c) for c in spec.order_columns)
    order_values = ", ".join(f"s.{q(c)}" for c in spec.order_columns)
    order_updates = ", ".join(f"{q(c)} = s.{q(c)}" for c in spec.order_columns)
    is_newer = newer("s", "t", spec.order_columns)
    return (
        f"MERGE {q(spec.deleted_keys)} t USING (SELECT {names} FROM "
        f"({winners_sql(spec, ranges)}) WHERE {deleted}) s "
        f"ON {_key_match(spec, 't', 's')} "
        f"WHEN MATCHED AND {is_newer} THEN UPDATE SET {order_updates} "
        f"WHEN NOT MATCHED THEN INSERT ({key_columns}, {order_names}) "
        f"VALUES ({key_values}, {order_values})"
    )


def history_sql(spec: MergeSpec, view: str) -> str:
    """The SCD type II view ``view`` over the changelog: one row per version, its values
    resolved as the current table's (:func:`resolved_rows_sql`: a delete version keeps the
    last values, a placeholder the latest real value), valid until the key's next version or
    the first truncate after it, whichever comes first (a truncated key has no current
    version until it is written again)."""
    keys = ", ".join(q(k) for k in spec.key)
    v, p, o = (q(c) for c in spec.order_columns)
    row = ", ".join(q(c) for c in spec.row_columns)
    running = (
        f"OVER (PARTITION BY {keys} ORDER BY {v}, {p}, {o} "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW)"
    )
    rest = ", ".join(q(c) for c in spec.target_columns[len(spec.row_columns) :])
    # Values are resolved over every event before each version is collapsed to its winner:
    # an insert and an update of one transaction share a version, and the update's
    # placeholder takes the insert's value. The window of the outer SELECT must then see
    # one row per version, or a redelivered copy would become the "next version".
    versions = (
        f"SELECT {', '.join(_running_values(spec, running))}, {rest} FROM {q(spec.changelog)} "
        f"WHERE {_not_truncate()} QUALIFY ROW_NUMBER() OVER "
        f"(PARTITION BY {keys}, {v} ORDER BY {p} DESC, {o} DESC) = 1"
    )
    cut = "CAST(NULL AS INT64)"
    if spec.truncates:
        after = newer("tr", "r", spec.order_columns)
        cut = (
            f"(SELECT MIN(tr.{v}) FROM {q(spec.changelog)} tr WHERE "
            f"tr.{q(OP_COLUMN)} = '{TRUNCATE_OP}' AND {after})"
        )
    closed = (
        f"SELECT r.*, {cut} AS _cut, LEAD(r.{v}) OVER (PARTITION BY "
        f"{', '.join(f'r.{q(k)}' for k in spec.key)} ORDER BY r.{v}) AS _next FROM ({versions}) r"
    )
    ends = (
        "CASE WHEN _cut IS NULL THEN _next WHEN _next IS NULL THEN _cut ELSE LEAST(_next, _cut) END"
    )
    return (
        f"CREATE OR REPLACE VIEW {q(view)} AS SELECT {row}, {q(OP_COLUMN)}, "
        f"{q(DELETED_COLUMN)}, TIMESTAMP_MILLIS({v}) AS `_valid_from`, "
        f"COALESCE(TIMESTAMP_MILLIS({ends}), {END_OF_TIME}) AS `_valid_to`, "
        f"(_next IS NULL AND _cut IS NULL) AS `_is_current`, {v}, {p}, {o} FROM ({closed})"
    )


def _running_values(spec: MergeSpec, running: str) -> list[str]:
    """The row fields resolved at each changelog row by windows ``running`` over the key's
    events up to it (see :func:`resolved_rows_sql`)."""
    values = []
    for column in spec.row_columns:
        if column in spec.key:
            values.append(q(column))
            continue
        change, delete = _candidates(spec, column)
        values.append(
            f"COALESCE(LAST_VALUE({change} IGNORE NULLS) {running}, "
            f"LAST_VALUE({delete} IGNORE NULLS) {running}).x AS {q(column)}"
        )
    return values


def check_sides(
    spec: MergeSpec, unmerged: Ranges, sample: tuple[str, int] | None = None
) -> tuple[str, str]:
    """The two sides :func:`check_sql` compares, each one JSON string per row: the table's
    rows, and their recomputation.

    The recomputation is each key's row from the changelog rows *outside* ``unmerged`` (the
    ranges of load jobs the merge has not applied yet), deleted keys left out with hard
    deletes. It follows the rule of :func:`resolved_rows_sql` but not its SQL: each field's
    value is the first offered in the key's events in descending order over the whole key
    (the MERGE takes the last in ascending order at the winner), and the latest truncate is
    found by its own window. Rows compare as JSON of every column, so nested and repeated
    fields compare too. ``sample = (seed, per_mille)`` compares only the keys whose
    fingerprint with the seed falls under ``per_mille`` (large tables; the seed changes per
    evaluation).
    """
    keys = ", ".join(q(k) for k in spec.key)
    columns = ", ".join(q(c) for c in spec.target_columns)
    order = ", ".join(f"{q(c)} DESC" for c in spec.order_columns)
    sampled = "TRUE"
    if sample is not None:
        seed, per_mille = sample
        sampled = (
            f"MOD(ABS(FARM_FINGERPRINT(CONCAT('{seed}', TO_JSON_STRING(STRUCT({keys}))))), "
            f"1000) < {int(per_mille)}"
        )
    merged = f"NOT ({ranges_filter(spec, unmerged)})"
    whole = (
        f"OVER (PARTITION BY {keys} ORDER BY {order} "
        "ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)"
    )
    values = []
    for column in spec.row_columns:
        if column in spec.key:
            values.append(q(column))
            continue
        change, delete = _candidates(spec, column)
        values.append(
            f"COALESCE(FIRST_VALUE({change} IGNORE NULLS) {whole}, "
            f"FIRST_VALUE({delete} IGNORE NULLS) {whole}).x AS {q(column)}"
        )
    rest = ", ".join(q(c) for c in spec.target_columns[len(spec.row_columns) :])
    # A hard-deleted key's winner is filtered in the QUALIFY itself (evaluated after the
    # window), not by an outer query: the emulator mis-binds ALTER-added columns there.
    alive = f" AND NOT {q(DELETED_COLUMN)}" if spec.deletes is DeleteMode.HARD else ""
    expected = (
        f"SELECT {', '.join(values)}, {rest} FROM {q(spec.changelog)} WHERE {merged} "
        f"AND {_not_truncate()} AND {sampled} QUALIFY ROW_NUMBER() OVER "
        f"(PARTITION BY {keys} ORDER BY {order}) = 1"
    )
    if spec.truncates:
        order_names = ", ".join(q(c) for c in spec.order_columns)
        latest = (
            f"SELECT {order_names} FROM {q(spec.changelog)} WHERE {merged} AND "
            f"{q(OP_COLUMN)} = '{TRUNCATE_OP}' QUALIFY ROW_NUMBER() OVER (ORDER BY {order}) = 1"
        )
        wrapped = ", ".join(f"tr.{q(c)} AS {q(c)}" for c in spec.order_columns)
        expected = _truncated(
            spec,
            f"SELECT r.*, IF(tr.{q(spec.order_columns[0])} IS NULL, NULL, "
            f"STRUCT({wrapped})) AS _t FROM ({expected}) r LEFT JOIN ({latest}) tr ON TRUE",
        )
        alive = alive and f" WHERE NOT {q(DELETED_COLUMN)}"
        expected = f"SELECT {columns} FROM ({expected}){alive}"
    else:
        expected = expected + alive
    actual = f"SELECT {columns} FROM {q(spec.target)} WHERE {sampled}"
    # Named explicitly: the emulator names a struct's fields from a derived table's columns "".
    named = ", ".join(f"{q(c)} AS {q(c)}" for c in spec.target_columns)
    as_json = "SELECT TO_JSON_STRING(STRUCT({columns})) AS r FROM ({source})"
    return as_json.format(columns=named, source=actual), as_json.format(
        columns=named, source=expected
    )


def check_sql(spec: MergeSpec, unmerged: Ranges, sample: tuple[str, int] | None = None) -> str:
    """One row: ``rows``, ``duplicate_keys``, ``extra`` (rows of the table that the
    recomputation lacks), ``missing`` (the other way round), ``deleted_rows``; the
    recomputation is :func:`check_sides`'."""
    keys = ", ".join(q(k) for k in spec.key)
    actual_json, expected_json = check_sides(spec, unmerged, sample)
    return (
        f"SELECT (SELECT COUNT(*) FROM {q(spec.target)}) AS rows, "
        f"(SELECT COUNT(*) FROM (SELECT {keys} FROM {q(spec.target)} GROUP BY {keys} "
        f"HAVING COUNT(*) > 1)) AS duplicate_keys, "
        f"(SELECT COUNT(*) FROM ({actual_json} EXCEPT DISTINCT {expected_json})) AS extra, "
        f"(SELECT COUNT(*) FROM ({expected_json} EXCEPT DISTINCT {actual_json})) AS missing, "
        # COUNT ... WHERE, not COUNTIF: next to the recomputation's IF()s, the emulator
        # miscounts EXCEPT DISTINCT when a COUNTIF is in the same SELECT.
        f"(SELECT COUNT(*) FROM {q(spec.target)} WHERE {q(DELETED_COLUMN)}) AS deleted_rows"
    )
