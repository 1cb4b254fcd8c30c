"""The SQL of a keyed destination ``D.T``: the MERGE that keeps its current state, and the
SCD type II history view. Pure text from a :class:`MergeSpec`; ``merge.py`` runs it.

**Order.** A key's events compare by ``(version, partition, offset)`` (core/keyed/contract.py); the
SQL spells the lexicographic comparison out (:func:`newer`), since BigQuery cannot compare
structs with ``>``.

**The MERGE is idempotent.** Its source is the changelog rows of the offset ranges to merge,
reduced to each key's greatest event; a target row changes only when that event is *newer*
than the row's own. Repeating a merge, or merging rows that were already applied, therefore
changes nothing. The source is exactly the offset ranges of the merged load jobs, never more,
so that the current table is a function of the merged jobs alone, which the check
(:func:`check_sql`) recomputes independently.

**Hard deletes remember.** With ``deletes: hard`` a deleted key has no row in ``D.T``, so the
greatest delete of each key is kept in ``D.T_deleted_keys`` (key plus its event's order): an
older event arriving later is not inserted. The two statements run in this order and are each
idempotent, so a crash between them is repaired by the next merge of the same rows: the
target's row is already gone (nothing to do), the delete is then remembered.

**Soft deletes** keep the key's row with the before image and ``_deleted = true``: the table
itself remembers.

**History** is a view over the changelog: each key's events collapse per version to the
winner (greatest partition, offset), each version is valid from its ``_source_ts_ms`` until
the next version of the key (``9999-12-31 23:59:59.999999 UTC`` for the last). A view is always
consistent with the changelog, however late an out-of-order version arrives; it is replaced
when the row's columns change.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from kbqe_dagster.core.keyed.contract import DELETED_COLUMN, OP_COLUMN, VERSION_COLUMN, DeleteMode

END_OF_TIME = "TIMESTAMP '9999-12-31 23:59:59.999999 UTC'"
DELETED_KEYS_SUFFIX = "_deleted_keys"


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
    """Hard deletes: the table that remembers each key's greatest delete."""

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
    """Each key's greatest event among the changelog rows of ``ranges``."""
    columns = ", ".join(q(c) for c in spec.target_columns)
    keys = ", ".join(q(k) for k in spec.key)
    order = ", ".join(f"{q(c)} DESC" for c in spec.order_columns)
    return (
        f"SELECT {columns} FROM {q(spec.changelog)} WHERE {ranges_filter(spec, ranges)} "
        f"QUALIFY ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY {order}) = 1"
    )


def merge_sql(spec: MergeSpec, ranges: Ranges) -> list[str]:
    """The statements that apply ``ranges`` to the current table, in order."""
    columns = spec.target_columns
    updates = ", ".join(f"{q(c)} = s.{q(c)}" for c in columns if c not in spec.key)
    names = ", ".join(q(c) for c in columns)
    values = ", ".join(f"s.{q(c)}" for c in columns)
    is_newer = newer("s", "t", spec.order_columns)
    source = winners_sql(spec, ranges)
    if spec.deletes is DeleteMode.SOFT:
        return [
            f"MERGE {q(spec.target)} t USING ({source}) s ON {_key_match(spec, 't', 's')} "
            f"WHEN MATCHED AND {is_newer} THEN UPDATE SET {updates} "
            f"WHEN NOT MATCHED THEN INSERT ({names}) VALUES ({values})"
        ]
    assert spec.deleted_keys, "hard deletes need the deleted-keys table"
    remembered = (
        ", ".join(f"s.{q(c)}" for c in columns)
        + ", "
        + ", ".join(f"m.{q(c)} AS {q('_m' + c)}" for c in spec.order_columns)
    )
    m_newer = _newer_than_memory(spec)
    with_memory = (
        f"SELECT {remembered} FROM ({source}) s LEFT JOIN {q(spec.deleted_keys)} m "
        f"ON {_key_match(spec, 's', 'm')}"
    )
    deleted = q(DELETED_COLUMN)
    key_columns = ", ".join(q(k) for k in spec.key)
    key_values = ", ".join(f"s.{q(k)}" for k in spec.key)
    order_names = ", ".join(q(c) for c in spec.order_columns)
    order_values = ", ".join(f"s.{q(c)}" for c in spec.order_columns)
    order_updates = ", ".join(f"{q(c)} = s.{q(c)}" for c in spec.order_columns)
    return [
        f"MERGE {q(spec.target)} t USING ({with_memory}) s ON {_key_match(spec, 't', 's')} "
        f"WHEN MATCHED AND s.{deleted} AND {is_newer} THEN DELETE "
        f"WHEN MATCHED AND {is_newer} THEN UPDATE SET {updates} "
        f"WHEN NOT MATCHED AND NOT s.{deleted} AND {m_newer} THEN INSERT ({names}) "
        f"VALUES ({values})",
        f"MERGE {q(spec.deleted_keys)} t USING (SELECT {names} FROM ({source}) WHERE {deleted}) s "
        f"ON {_key_match(spec, 't', 's')} "
        f"WHEN MATCHED AND {is_newer} THEN UPDATE SET {order_updates} "
        f"WHEN NOT MATCHED THEN INSERT ({key_columns}, {order_names}) "
        f"VALUES ({key_values}, {order_values})",
    ]


def _newer_than_memory(spec: MergeSpec) -> str:
    """SQL on the joined source: no remembered delete, or this event is newer than it."""
    v, p, o = spec.order_columns
    sv, sp, so = (f"s.{q(c)}" for c in (v, p, o))
    mv, mp, mo = (f"s.{q('_m' + c)}" for c in (v, p, o))
    return (
        f"({mv} IS NULL OR {sv} > {mv} OR ({sv} = {mv} AND ({sp} > {mp} OR "
        f"({sp} = {mp} AND {so} > {mo}))))"
    )


def history_sql(spec: MergeSpec, view: str) -> str:
    """The SCD type II view ``view`` over the changelog."""
    keys = ", ".join(q(k) for k in spec.key)
    v, p, o = (q(c) for c in spec.order_columns)
    row = ", ".join(q(c) for c in spec.row_columns)
    valid_from = f"TIMESTAMP_MILLIS({v})"
    next_version = f"LEAD({v}) OVER (PARTITION BY {keys} ORDER BY {v})"
    # Collapse each (key, version) to its winner first: the window of the outer SELECT must
    # see one row per version, or a redelivered copy would become the "next version".
    versions = (
        f"SELECT * FROM {q(spec.changelog)} QUALIFY ROW_NUMBER() OVER "
        f"(PARTITION BY {keys}, {v} ORDER BY {p} DESC, {o} DESC) = 1"
    )
    return (
        f"CREATE OR REPLACE VIEW {q(view)} AS SELECT {row}, {q(OP_COLUMN)}, "
        f"{q(DELETED_COLUMN)}, {valid_from} AS `_valid_from`, "
        f"COALESCE(TIMESTAMP_MILLIS({next_version}), {END_OF_TIME}) AS `_valid_to`, "
        f"{next_version} IS NULL AS `_is_current`, {v}, {p}, {o} FROM ({versions})"
    )


def check_sql(spec: MergeSpec, unmerged: Ranges, sample: tuple[str, int] | None = None) -> str:
    """One row: ``rows``, ``duplicate_keys``, ``extra`` (rows of the table that the
    recomputation lacks), ``missing`` (the other way round), ``deleted_rows``.

    The recomputation is each key's greatest event among the changelog rows *outside*
    ``unmerged`` (the ranges of load jobs the merge has not applied yet), deleted keys left out
    with hard deletes; rows compare as JSON of every column, so nested and repeated fields
    compare too. ``sample = (seed, per_mille)`` compares only the keys whose fingerprint with
    the seed falls under ``per_mille`` (large tables; the seed changes per evaluation).
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
    unmerged_rows = ranges_filter(spec, unmerged)
    # A hard-deleted key's winner is filtered in the QUALIFY itself (evaluated after the
    # window), not by an outer query: the emulator mis-binds ALTER-added columns there.
    alive = f" AND NOT {q(DELETED_COLUMN)}" if spec.deletes is DeleteMode.HARD else ""
    expected = (
        f"SELECT {columns} FROM {q(spec.changelog)} WHERE NOT ({unmerged_rows}) "
        f"AND {sampled} QUALIFY ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY {order}) "
        f"= 1{alive}"
    )
    actual = f"SELECT {columns} FROM {q(spec.target)} WHERE {sampled}"
    as_json = "SELECT TO_JSON_STRING(STRUCT({columns})) AS r FROM ({source})"
    expected_json = as_json.format(columns=columns, source=expected)
    actual_json = as_json.format(columns=columns, source=actual)
    return (
        f"SELECT (SELECT COUNT(*) FROM {q(spec.target)}) AS rows, "
        f"(SELECT COUNT(*) FROM (SELECT {keys} FROM {q(spec.target)} GROUP BY {keys} "
        f"HAVING COUNT(*) > 1)) AS duplicate_keys, "
        f"(SELECT COUNT(*) FROM ({actual_json} EXCEPT DISTINCT {expected_json})) AS extra, "
        f"(SELECT COUNT(*) FROM ({expected_json} EXCEPT DISTINCT {actual_json})) AS missing, "
        f"(SELECT COUNTIF({q(DELETED_COLUMN)}) FROM {q(spec.target)}) AS deleted_rows"
    )
