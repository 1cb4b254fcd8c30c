"""The predicates on a table's partition column that kbqe's statements carry, so that each
still runs on a table created with ``require_partition_filter: true`` (``tables:``).

**BigQuery's rule.** A query over a table whose ``requirePartitionFilter`` is set must have a
filter on the partitioning column "that can be used for partition elimination" (the
``Table.requirePartitionFilter`` field of the API reference); otherwise it fails with
"Cannot query over table ... without a filter over column(s) ... that can be used for
partition elimination". Such a filter:

- names the partition column itself (of the table as read, with its alias), compared with
  constants or query parameters: ``col IN (DATE '2026-11-28')``, ``col >= DATE '...'``,
  ``col IN UNNEST(@partitions)``, ``col BETWEEN @low AND @high``;
- is a conjunct of the WHERE clause of the query that reads the table (a derived table reads
  it in its own WHERE; a MERGE's target in its ON clause), never one branch of an OR with
  other columns, and never a value computed by a subquery.

**Every partition.** A statement that conceptually covers all time (a whole-table check,
the recomputation of a key's history, an erasure pass with no window) carries
:func:`every_partition`: ``(col IS NOT NULL OR col IS NULL)``. It references only the
partition column, keeps every row (the ``__NULL__`` partition too), and is the predicate
dbt-bigquery's MERGE adds to a ``require_partition_filter`` table for the same reason
(dbt-labs/dbt-bigquery#986). It satisfies the requirement without pruning anything: the
statement is billed as before.

**Some partitions.** A statement that reads only rows of known event dates (the keyed MERGE's
new changelog rows: core/protocol/commit.py records each staged file's records per event
date) carries :func:`date_partitions`, which prunes to those dates.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import date


def quoted(column: str, alias: str = "") -> str:
    """``alias.`column``` (``alias`` without its dot), or ```column``` alone."""
    return f"{alias}.`{column}`" if alias else f"`{column}`"


def every_partition(column: str, alias: str = "") -> str:
    """SQL: every row of every partition of ``column`` (module docstring)."""
    name = quoted(column, alias)
    return f"({name} IS NOT NULL OR {name} IS NULL)"


def date_partitions(column: str, days: Iterable[str], alias: str = "") -> str:
    """SQL: the rows whose DATE ``column`` is one of ``days`` (ISO dates); FALSE for none.
    Each is checked to be a date: the text goes into the statement."""
    values = sorted({date.fromisoformat(d).isoformat() for d in days})
    if not values:
        return "FALSE"
    listed = ", ".join(f"DATE '{d}'" for d in values)
    return f"{quoted(column, alias)} IN ({listed})"
