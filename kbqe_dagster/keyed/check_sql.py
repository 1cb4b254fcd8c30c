"""The SQL of a keyed destination's check ``matches_changelog``: the current table compared with
each key's row recomputed from the changelog by the rule of rows_sql.py, over other windows
than the MERGE's (each value the first offered in descending order over the whole key, the
latest truncate by a window of its own), and never by folding onto the table's row, so that a
fault in the merge's way shows as a difference. Pure text; ``merge.py`` runs it.
"""

from __future__ import annotations

from kbqe_dagster.core.keyed.contract import (
    DELETED_COLUMN,
    OP_COLUMN,
    TRUNCATE_OP,
    DeleteMode,
)
from kbqe_dagster.keyed.rows_sql import (
    MergeSpec,
    Ranges,
    every_changelog_partition,
    ident,
    imaged,
    ranges_filter,
    running_values,
    truncated,
)


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
    keys = ", ".join(ident(k) for k in spec.key)
    columns = ", ".join(ident(c) for c in spec.target_columns)
    order = ", ".join(f"{ident(c)} DESC" for c in spec.order_columns)
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
    values = running_values(spec, whole, pick="FIRST_VALUE")
    rest = ", ".join(ident(c) for c in spec.target_columns[len(spec.row_columns) :])
    # A hard-deleted key's winner is filtered in the QUALIFY itself (evaluated after the
    # window), not by an outer query: the emulator mis-binds ALTER-added columns there.
    alive = f" AND NOT {ident(DELETED_COLUMN)}" if spec.deletes is DeleteMode.HARD else ""
    expected = (
        f"SELECT {', '.join(values)}, {rest} FROM {imaged(spec, f'{merged} AND {sampled}')} c "
        f"QUALIFY ROW_NUMBER() OVER "
        f"(PARTITION BY {keys} ORDER BY {order}) = 1"
    )
    if spec.truncates:
        order_names = ", ".join(ident(c) for c in spec.order_columns)
        latest = (
            f"SELECT {order_names} FROM {ident(spec.changelog)} WHERE {merged} AND "
            f"{ident(OP_COLUMN)} = '{TRUNCATE_OP}' AND {every_changelog_partition(spec)} QUALIFY ROW_NUMBER() OVER (ORDER BY {order}) = 1"
        )
        wrapped = ", ".join(f"tr.{ident(c)} AS {ident(c)}" for c in spec.order_columns)
        expected = truncated(
            spec,
            f"SELECT r.*, IF(tr.{ident(spec.order_columns[0])} IS NULL, NULL, "
            f"STRUCT({wrapped})) AS _t FROM ({expected}) r LEFT JOIN ({latest}) tr ON TRUE",
        )
        alive = alive and f" WHERE NOT {ident(DELETED_COLUMN)}"
        expected = f"SELECT {columns} FROM ({expected}){alive}"
    else:
        expected = expected + alive
    actual = f"SELECT {columns} FROM {ident(spec.target)} WHERE {sampled}"
    # Named explicitly: the emulator names a struct's fields from a derived table's columns "".
    named = ", ".join(f"{ident(c)} AS {ident(c)}" for c in spec.target_columns)
    as_json = "SELECT TO_JSON_STRING(STRUCT({columns})) AS r FROM ({source})"
    return as_json.format(columns=named, source=actual), as_json.format(
        columns=named, source=expected
    )


def check_sql(spec: MergeSpec, unmerged: Ranges, sample: tuple[str, int] | None = None) -> str:
    """One row: ``rows``, ``duplicate_keys``, ``extra`` (rows of the table that the
    recomputation lacks), ``missing`` (the other way round), ``deleted_rows``; the
    recomputation is :func:`check_sides`'."""
    keys = ", ".join(ident(k) for k in spec.key)
    actual_json, expected_json = check_sides(spec, unmerged, sample)
    return (
        f"SELECT (SELECT COUNT(*) FROM {ident(spec.target)}) AS rows, "
        f"(SELECT COUNT(*) FROM (SELECT {keys} FROM {ident(spec.target)} GROUP BY {keys} "
        f"HAVING COUNT(*) > 1)) AS duplicate_keys, "
        f"(SELECT COUNT(*) FROM ({actual_json} EXCEPT DISTINCT {expected_json})) AS extra, "
        f"(SELECT COUNT(*) FROM ({expected_json} EXCEPT DISTINCT {actual_json})) AS missing, "
        # COUNT ... WHERE, not COUNTIF: next to the recomputation's IF()s, the emulator
        # miscounts EXCEPT DISTINCT when a COUNTIF is in the same SELECT.
        f"(SELECT COUNT(*) FROM {ident(spec.target)} WHERE {ident(DELETED_COLUMN)}) AS deleted_rows"
    )
