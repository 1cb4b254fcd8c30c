"""The SQL of a keyed destination ``D.T``'s merge: the statements that keep its current state.
Pure text from a :class:`~kbqe_dagster.keyed.rows_sql.MergeSpec`; ``merge.py`` runs it. A key's
row is resolved by the rule of rows_sql.py.

**The MERGE is idempotent.** The keys it touches are those of the changelog rows of the offset
ranges to merge. A key's row in the table is its resolution from all its *merged* changelog
rows (every row outside the ranges that stay unmerged: other load jobs' pending or not merged
yet). A key whose new events all come after its row has them folded onto the row
(:func:`folded_rows_sql`: reads only the new rows and the table); any other key is
recomputed from its whole merged history (:func:`resolved_rows_sql`: reads the changelog's
columns whole, a key filter its clustering by partition and offset does not prune), and only
when :func:`recompute_count_sql` finds such keys. Each writes a row when it differs from the
table's; then the latest merged truncate is applied to every row older than it. Repeating a
merge, or merging rows that were already applied, therefore changes nothing, and the current
table is a function of the merged jobs alone, whatever order their events came in, which the
check (check_sql.py) recomputes independently.

**Hard deletes** leave no row; each key's greatest delete is also recorded in
``D.T_deleted_keys`` (key plus its event's order), for operators and for the fold: a key
without a row folds only when its new events come after its recorded delete (the
recomputation sees the deletes in the changelog itself). The statements run current table first and are each
idempotent, so a crash between them is repaired by the next merge of the same rows.
"""

from __future__ import annotations

from collections.abc import Sequence

from kbqe_dagster.core.keyed.contract import (
    DELETED_COLUMN,
    OP_COLUMN,
    TRUNCATE_OP,
    DeleteMode,
)
from kbqe_dagster.keyed.rows_sql import (
    MergeSpec,
    Ranges,
    candidates,
    changed_partitions,
    comes_after,
    every_changelog_partition,
    ident,
    imaged,
    key_match,
    not_truncate,
    ranges_filter,
    resolved_rows_sql,
    running_window,
)

DELETED_KEYS_SUFFIX = "_deleted_keys"


def winners_sql(spec: MergeSpec, ranges: Ranges) -> str:
    """Each key's greatest event among the changelog rows of ``ranges`` (truncates left out:
    they are no key's event)."""
    columns = ", ".join(ident(c) for c in spec.target_columns)
    keys = ", ".join(ident(k) for k in spec.key)
    order = ", ".join(f"{ident(c)} DESC" for c in spec.order_columns)
    return (
        f"SELECT {columns} FROM {ident(spec.changelog)} WHERE ({ranges_filter(spec, ranges)}) "
        f"AND {not_truncate()} AND {changed_partitions(spec)} "
        f"QUALIFY ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY {order}) = 1"
    )


PRESENT = "_kbqe_present"
"""TRUE on a row joined from the table (or the deleted-keys record): NULL when none joined."""


def _after(later: Sequence[str], earlier: Sequence[str]) -> str:
    """SQL: the order ``later`` (expressions, one per order column) comes after ``earlier``."""
    (head, *rest), (other, *others) = later, earlier
    if not rest:
        return f"{head} > {other}"
    return f"({head} > {other} OR ({head} = {other} AND {_after(rest, others)}))"


def _first(column: str) -> str:
    return f"_first{column}"


def batch_sql(spec: MergeSpec, ranges: Ranges) -> str:
    """Each key of the changelog rows of ``ranges`` (truncates left out): its greatest event's
    change and order columns, the order of its first event (``_first`` + order column), and
    for each row field besides the key the value its latest event offering one offers,
    wrapped in a STRUCT (as :func:`candidates`: a real NULL apart from "none offered"), NULL
    when none does. Reads only the rows of ``ranges``."""
    keys = ", ".join(ident(k) for k in spec.key)
    ascending = ", ".join(ident(c) for c in spec.order_columns)
    descending = ", ".join(f"{ident(c)} DESC" for c in spec.order_columns)
    running = running_window(spec)
    columns = [
        ident(c)
        if c in spec.key
        else f"LAST_VALUE({candidates(spec, c)[0]} IGNORE NULLS) {running} AS {ident(c)}"
        for c in spec.row_columns
    ]
    columns += [ident(c) for c in spec.target_columns[len(spec.row_columns) :]]
    columns += [
        f"FIRST_VALUE({ident(c)}) OVER (PARTITION BY {keys} ORDER BY {ascending} ROWS BETWEEN "
        f"UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING) AS {ident(_first(c))}"
        for c in spec.order_columns
    ]
    return (
        f"SELECT {', '.join(columns)} FROM "
        f"{imaged(spec, ranges_filter(spec, ranges), partitions=changed_partitions(spec, 'c'))} c "
        f"QUALIFY ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY {descending}) = 1"
    )


def _batch_with_rows(spec: MergeSpec, ranges: Ranges, applied: str) -> str:
    """FROM clause: :func:`batch_sql` (``b``) joined to each key's row of the table (``t``)
    and, with hard deletes, to its recorded delete (``k``) and, when the changelog may hold
    truncates, the order of the latest among the rows that satisfy ``applied`` (``tr``)."""
    joined = (
        f"({batch_sql(spec, ranges)}) b LEFT JOIN (SELECT *, TRUE AS {PRESENT} FROM "
        f"{ident(spec.target)}) t ON {key_match(spec, 'b', 't')}"
    )
    if spec.deletes is DeleteMode.HARD:
        assert spec.deleted_keys, "hard deletes need the deleted-keys table"
        joined += (
            f" LEFT JOIN (SELECT *, TRUE AS {PRESENT} FROM {ident(spec.deleted_keys)}) k "
            f"ON {key_match(spec, 'b', 'k')}"
        )
        if spec.truncates:
            order = ", ".join(ident(c) for c in spec.order_columns)
            descending = ", ".join(f"{ident(c)} DESC" for c in spec.order_columns)
            joined += (
                f" LEFT JOIN (SELECT {order}, TRUE AS {PRESENT} FROM {ident(spec.changelog)} WHERE "
                f"({applied}) AND {ident(OP_COLUMN)} = '{TRUNCATE_OP}' AND "
                f"{every_changelog_partition(spec)} ORDER BY {descending} LIMIT 1) tr ON TRUE"
            )
    return joined


def folds_sql(spec: MergeSpec) -> str:
    """SQL over :func:`_batch_with_rows`: TRUE when the key's row is the table's row with the
    batch's events applied on top, so that its history outside the batch need not be read.

    That holds when every event of the batch comes after the table's row (the table's row is
    then the key's resolution up to them: see :func:`merge_sql`). A key without a row has no
    history with soft deletes (every event leaves a row); with hard deletes it may have been
    deleted, and folds only when the batch offers every field and comes after its recorded
    delete and after the latest truncate (which removed rows without a record: reading the
    changelog's order and ``_op`` columns whole for it is the price of hard deletes with
    truncates). Otherwise the key is recomputed from its whole history. Never NULL."""
    first = [f"b.{ident(_first(c))}" for c in spec.order_columns]
    after_row = _after(first, [f"t.{ident(c)}" for c in spec.order_columns])
    if spec.deletes is DeleteMode.SOFT:
        without_row = "TRUE"
    else:
        offered = [f"b.{ident(c)} IS NOT NULL" for c in spec.row_columns if c not in spec.key]
        after_delete = _after(first, [f"k.{ident(c)}" for c in spec.order_columns])
        without_row = (
            f"({' AND '.join(offered) or 'TRUE'}) AND (k.{PRESENT} IS NULL OR {after_delete})"
        )
        if spec.truncates:
            after_truncate = _after(first, [f"tr.{ident(c)}" for c in spec.order_columns])
            without_row += f" AND (tr.{PRESENT} IS NULL OR {after_truncate})"
    return f"IFNULL(IF(t.{PRESENT} IS NULL, {without_row}, {after_row}), FALSE)"


def folded_rows_sql(spec: MergeSpec, ranges: Ranges, applied: str) -> str:
    """The new row of each key of ``ranges`` that folds (:func:`folds_sql`): the batch's
    winner, each field the batch's latest offered value, else the table's."""
    values = [
        f"b.{ident(c)}"
        if c in spec.key
        else f"IF(b.{ident(c)} IS NULL, t.{ident(c)}, b.{ident(c)}.x) AS {ident(c)}"
        for c in spec.row_columns
    ]
    values += [f"b.{ident(c)}" for c in spec.target_columns[len(spec.row_columns) :]]
    return (
        f"SELECT {', '.join(values)} FROM {_batch_with_rows(spec, ranges, applied)} "
        f"WHERE {folds_sql(spec)}"
    )


def recomputed_keys_sql(spec: MergeSpec, ranges: Ranges, applied: str) -> str:
    """The keys of ``ranges`` that do not fold: they are recomputed from their history."""
    keys = ", ".join(f"b.{ident(k)}" for k in spec.key)
    return (
        f"SELECT {keys} FROM {_batch_with_rows(spec, ranges, applied)} WHERE NOT {folds_sql(spec)}"
    )


def _applied(spec: MergeSpec, unmerged: Ranges | None) -> str:
    """SQL: the changelog row is merged, or is merged now (outside ``unmerged``)."""
    return f"NOT ({ranges_filter(spec, unmerged or {})})"


def recompute_count_sql(spec: MergeSpec, ranges: Ranges, unmerged: Ranges | None = None) -> str:
    """One row, ``keys``: how many keys of ``ranges`` must be recomputed (reads the rows of
    ``ranges`` and the table; 0 in a merge of new events in order)."""
    applied = _applied(spec, unmerged)
    return f"SELECT COUNT(*) AS keys FROM ({recomputed_keys_sql(spec, ranges, applied)})"


def merge_sql(
    spec: MergeSpec, ranges: Ranges, unmerged: Ranges | None = None, recompute: bool = True
) -> list[str]:
    """The statements that apply ``ranges`` to the current table, in order. ``unmerged``: the
    ranges of other load jobs whose rows may be in the changelog but are not merged (none by
    default); the rows of every other range are the merged ones.

    The current table holds each key's row resolved from its merged events
    (:func:`resolved_rows_sql`). A key of ``ranges`` whose events all come after its row
    (the common case: new events, merged in order) gets the row with them folded on top
    (:func:`folded_rows_sql`), which reads only the rows of ``ranges`` and the table. Any
    other key (events older than its row: a late event, or the same rows merged again after
    a crash) gets the row recomputed from all its merged events, which reads the changelog's
    columns whole (BigQuery cannot prune a key filter on a changelog clustered by partition
    and offset): that statement comes first, and only when ``recompute``
    (:func:`recompute_count_sql` says whether any key needs it). Each is written when it
    differs from the table's row. Then the latest merged truncate deletes every row older
    than it, and with hard deletes each key's greatest delete is recorded.

    Idempotent: once the first two have run, every key of ``ranges`` has a row at or after
    its events, so running them again recomputes (changing nothing) and folds none."""
    applied = _applied(spec, unmerged)
    statements = []
    if recompute:
        touched = (
            f"EXISTS (SELECT 1 FROM ({recomputed_keys_sql(spec, ranges, applied)}) r WHERE "
            f"{key_match(spec, 'r', 'c')})"
        )
        statements.append(
            _merge_current(spec, resolved_rows_sql(spec, f"{applied} AND {touched}", applied))
        )
    statements.append(_merge_current(spec, folded_rows_sql(spec, ranges, applied)))
    if spec.truncates:
        statements.append(truncate_sql(spec, applied))
    if spec.deletes is DeleteMode.HARD:
        statements.append(_remember_deletes_sql(spec, ranges))
    return statements


def current_merges(recompute: bool) -> int:
    """How many of :func:`merge_sql`'s statements, first, merge the current table."""
    return 2 if recompute else 1


def _merge_current(spec: MergeSpec, source: str) -> str:
    """MERGE the rows of ``source`` (target columns) into the current table: each written
    when it differs from the table's row; with hard deletes a deleted one removes it."""
    columns = spec.target_columns
    updates = ", ".join(f"{ident(c)} = s.{ident(c)}" for c in columns if c not in spec.key)
    names = ", ".join(ident(c) for c in columns)
    values = ", ".join(f"s.{ident(c)}" for c in columns)
    differs = (
        f"TO_JSON_STRING(STRUCT({', '.join(f't.{ident(c)} AS {ident(c)}' for c in columns)})) != "
        f"TO_JSON_STRING(STRUCT({', '.join(f's.{ident(c)} AS {ident(c)}' for c in columns)}))"
    )
    deleted = ident(DELETED_COLUMN)
    on = key_match(spec, "t", "s")
    if spec.deletes is DeleteMode.SOFT:
        return (
            f"MERGE {ident(spec.target)} t USING ({source}) s ON {on} "
            f"WHEN MATCHED AND {differs} THEN UPDATE SET {updates} "
            f"WHEN NOT MATCHED THEN INSERT ({names}) VALUES ({values})"
        )
    return (
        f"MERGE {ident(spec.target)} t USING ({source}) s ON {on} "
        f"WHEN MATCHED AND s.{deleted} THEN DELETE "
        f"WHEN MATCHED AND {differs} THEN UPDATE SET {updates} "
        f"WHEN NOT MATCHED AND NOT s.{deleted} THEN INSERT ({names}) VALUES ({values})"
    )


def truncate_sql(spec: MergeSpec, applied: str) -> str:
    """The latest truncate among the rows that satisfy ``applied`` deletes every row of the
    table whose event comes before it (soft: ``_op = 't'``, ``_deleted = true``, its order;
    hard: removed). Idempotent: a truncated row's order is the truncate's, not before it."""
    ascending = ", ".join(ident(c) for c in spec.order_columns)
    descending = ", ".join(f"{ident(c)} DESC" for c in spec.order_columns)
    latest = (
        f"SELECT {ascending} FROM {ident(spec.changelog)} WHERE ({applied}) AND "
        f"{ident(OP_COLUMN)} = '{TRUNCATE_OP}' AND {every_changelog_partition(spec)} "
        f"ORDER BY {descending} LIMIT 1"
    )
    before = comes_after("tr", "t", spec.order_columns)
    if spec.deletes is DeleteMode.HARD:
        return (
            f"DELETE FROM {ident(spec.target)} t WHERE EXISTS (SELECT 1 FROM ({latest}) tr "
            f"WHERE {before})"
        )
    order = ", ".join(f"{ident(c)} = tr.{ident(c)}" for c in spec.order_columns)
    return (
        f"UPDATE {ident(spec.target)} t SET {ident(OP_COLUMN)} = '{TRUNCATE_OP}', "
        f"{ident(DELETED_COLUMN)} = TRUE, {order} FROM ({latest}) tr WHERE {before}"
    )


def _remember_deletes_sql(spec: MergeSpec, ranges: Ranges) -> str:
    """Hard deletes: each key's greatest delete in ``D.T_deleted_keys`` (an operator's record
    of what was deleted; the recomputation itself does not need it)."""
    assert spec.deleted_keys, "hard deletes need the deleted-keys table"
    names = ", ".join(ident(c) for c in spec.target_columns)
    deleted = ident(DELETED_COLUMN)
    key_columns = ", ".join(ident(k) for k in spec.key)
    key_values = ", ".join(f"s.{ident(k)}" for k in spec.key)
    order_names = ", ".join(ident(c) for c in spec.order_columns)
    order_values = ", ".join(f"s.{ident(c)}" for c in spec.order_columns)
    order_updates = ", ".join(f"{ident(c)} = s.{ident(c)}" for c in spec.order_columns)
    is_newer = comes_after("s", "t", spec.order_columns)
    return (
        f"MERGE {ident(spec.deleted_keys)} t USING (SELECT {names} FROM "
        f"({winners_sql(spec, ranges)}) WHERE {deleted}) s "
        f"ON {key_match(spec, 't', 's')} "
        f"WHEN MATCHED AND {is_newer} THEN UPDATE SET {order_updates} "
        f"WHEN NOT MATCHED THEN INSERT ({key_columns}, {order_names}) "
        f"VALUES ({key_values}, {order_values})"
    )
