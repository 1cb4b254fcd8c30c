"""A table's BigQuery time partitioning as kbqe wants it (type and column), what a
``partition_column`` must be, and the refusal when an existing table is partitioned otherwise.

**What may be a partition column.** BigQuery time-partitions on a top-level DATE, TIMESTAMP
or DATETIME column; by HOUR only on TIMESTAMP or DATETIME. A ``partition_column`` is checked
against the table's columns where they are known (``kbqe config check`` for the columns of a
``format: json`` topic's declared schema, the load coordinator against the staged file's
schema before the table is created) and refused with a message naming the table and column.

**What cannot change.** BigQuery cannot change the partitioning of an existing table: not its
unit (DAY, HOUR, MONTH, YEAR), not its column, not partitioned to unpartitioned or back. A
load job asking for another partitioning than the table's fails; kbqe refuses the table's
loads before submitting any (:func:`partitioning_refusal`), naming the table, what it has,
what the configuration asks and what to do. The files stay staged (the job is retried, then
quarantined: released with ``kbqe load release`` once the configuration or the table is
fixed), so nothing is lost. Expiration, clustering, labels and description do change
(core/record/table_options.py).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

PARTITION_COLUMN_TYPES = frozenset({"DATE", "TIMESTAMP", "DATETIME"})
"""Types BigQuery time-partitions on (after kbqe's Avro → BigQuery mapping)."""
HOUR_COLUMN_TYPES = frozenset({"TIMESTAMP", "DATETIME"})
"""Types BigQuery partitions by HOUR on (not DATE)."""

_COLUMN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def partition_column_name_problem(name: str) -> str | None:
    """What is wrong with a ``partition_column:`` by itself; None when nothing."""
    if not _COLUMN_NAME.match(name):
        return f"column {name!r} is not a top-level column name (letters, digits, _)"
    return None


def partition_column_problem(
    column: str, columns: Mapping[str, tuple[str, str]], hourly: bool, where: str
) -> str | None:
    """Why ``column`` cannot partition a table of ``columns`` (name → (BigQuery type, mode),
    top-level); None when it can. ``where`` names the table (or its configuration key)."""
    known = {name.lower(): (name, kind, mode) for name, (kind, mode) in columns.items()}
    found = known.get(column.lower())
    if found is None:
        listed = ", ".join(columns) or "none"
        return f"{where}: partition column {column!r} is not a column (columns: {listed})"
    _, kind, mode = found
    if mode == "REPEATED":
        return f"{where}: partition column {column!r} is repeated (an array)"
    allowed = HOUR_COLUMN_TYPES if hourly else PARTITION_COLUMN_TYPES
    if kind.upper() not in allowed:
        unit = "by HOUR " if hourly else ""
        return (
            f"{where}: partition column {column!r} is {kind}; BigQuery partitions {unit}only on "
            f"{', '.join(sorted(allowed))}"
        )
    return None


@dataclass(frozen=True)
class PartitionSpec:
    """A table's time partitioning: BigQuery's ``timePartitioning.type`` and ``field``."""

    type: str | None
    """``DAY``, ``HOUR``, ``MONTH``, ``YEAR``; None: not partitioned."""
    field: str | None = None
    """The partitioning column; None: by ingestion time (kbqe never creates those)."""

    def describe(self) -> str:
        if self.type is None:
            return "not partitioned"
        column = f"column {self.field}" if self.field else "ingestion time"
        return f"{self.type} partitions on {column}"


def partitioning_refusal(table: str, current: PartitionSpec, wanted: PartitionSpec) -> str | None:
    """The message refusing loads into ``table`` partitioned as ``current`` when the
    configuration asks ``wanted``; None when they agree (column names ignore case)."""
    same_field = (current.field or "").lower() == (wanted.field or "").lower()
    if current.type == wanted.type and (current.type is None or same_field):
        return None
    return (
        f"{table} is {current.describe()}, the configuration asks {wanted.describe()}: "
        "BigQuery cannot change an existing table's partitioning. Either restore the "
        f"table's partitioning under tables.{table} (or its dataset.*), or, schedules paused, "
        f"copy the rows into a table partitioned as asked (CREATE TABLE ... PARTITION BY ... "
        f"AS SELECT * FROM {table}), drop {table} and rename the copy to it. The files stay "
        f"staged and load once the two agree (kbqe load release --table {table} --yes if "
        "they were quarantined)"
    )
