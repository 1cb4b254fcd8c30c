"""The SQL of a keyed destination's SCD type II history view ``D.T_history``. Pure text from a
:class:`~kbqe_dagster.keyed.rows_sql.MergeSpec`; ``merge.py`` replaces the view after a merge.

**History** is a view over the changelog: each key's events collapse per version to the
winner (ordered by Kafka, each event is a version), each version is valid from its
``_source_ts_ms`` until the next version of the key or
the first truncate after it (``9999-12-31 23:59:59.999999 UTC`` for the last), its values
resolved as the current table's up to the version. A view is always consistent with the
changelog, however late an out-of-order version arrives; it is replaced when the row's
columns change.

"""

from __future__ import annotations

from kbqe_dagster.core.keyed.contract import (
    DELETED_COLUMN,
    OP_COLUMN,
    TRUNCATE_OP,
    VERSION_COLUMN,
)
from kbqe_dagster.keyed.rows_sql import (
    MergeSpec,
    comes_after,
    every_changelog_partition,
    ident,
    imaged,
    running_values,
    running_window,
)

END_OF_TIME = "TIMESTAMP '9999-12-31 23:59:59.999999 UTC'"


def history_sql(spec: MergeSpec, view: str) -> str:
    """The SCD type II view ``view`` over the changelog: one row per version, its values
    resolved as the current table's (rows_sql.resolved_rows_sql: a delete version keeps the
    last values, a placeholder the latest real value), valid until the key's next version or
    the first truncate after it, whichever comes first (a truncated key has no current
    version until it is written again)."""
    keys = ", ".join(ident(k) for k in spec.key)
    v, p, o = ident(VERSION_COLUMN), ident(spec.partition_column), ident(spec.offset_column)
    # A version is the events of one _source_ts_ms (an insert and an update of one
    # transaction), or, ordered by Kafka, each event: its time need not grow with the offset.
    version = f"{p}, {o}" if spec.kafka_order else v
    order = ", ".join(f"r.{ident(c)}" for c in spec.order_columns)
    row = ", ".join(ident(c) for c in spec.row_columns)
    rest = ", ".join(ident(c) for c in spec.target_columns[len(spec.row_columns) :])
    # Values are resolved over every event before each version is collapsed to its winner:
    # an insert and an update of one transaction share a version, and the update's
    # placeholder takes the insert's value. The window of the outer SELECT must then see
    # one row per version, or a redelivered copy would become the "next version".
    versions = (
        f"SELECT {', '.join(running_values(spec, running_window(spec)))}, {rest} FROM "
        f"{imaged(spec, 'TRUE')} c QUALIFY ROW_NUMBER() OVER "
        f"(PARTITION BY {keys}, {version} ORDER BY {p} DESC, {o} DESC) = 1"
    )
    cut = "CAST(NULL AS INT64)"
    if spec.truncates:
        after = comes_after("tr", "r", spec.order_columns)
        cut = (
            f"(SELECT MIN(tr.{v}) FROM {ident(spec.changelog)} tr WHERE "
            f"tr.{ident(OP_COLUMN)} = '{TRUNCATE_OP}' AND {after} AND "
            f"{every_changelog_partition(spec, 'tr')})"
        )
    closed = (
        f"SELECT r.*, {cut} AS _cut, LEAD(r.{v}) OVER (PARTITION BY "
        f"{', '.join(f'r.{ident(k)}' for k in spec.key)} ORDER BY {order}) AS _next FROM ({versions}) r"
    )
    ends = (
        "CASE WHEN _cut IS NULL THEN _next WHEN _next IS NULL THEN _cut ELSE LEAST(_next, _cut) END"
    )
    return (
        f"CREATE OR REPLACE VIEW {ident(view)} AS SELECT {row}, {ident(OP_COLUMN)}, "
        f"{ident(DELETED_COLUMN)}, TIMESTAMP_MILLIS({v}) AS `_valid_from`, "
        f"COALESCE(TIMESTAMP_MILLIS({ends}), {END_OF_TIME}) AS `_valid_to`, "
        f"(_next IS NULL AND _cut IS NULL) AS `_is_current`, {v}, {p}, {o} FROM ({closed})"
    )
