"""The statements of one erasure batch: for each table, **one** ``DELETE`` of every subject
of the batch (``WHERE col IN UNNEST(@subjects)``, never a statement per request), and the
counts that attribute the deleted rows to each request (a ``SELECT`` per subject column,
reading only that column and the partition column: a fraction of the DELETE's bytes).

Subjects are query parameters, never SQL text. A column is compared in its own type: a
STRING column with the ids as given, an INT64 column with those that are integers (the others
cannot match it), the Kafka key (BYTES) with their UTF-8 bytes. A nested field path
(``customer.id``) goes through records; a path through a repeated field is not supported
(``REPEATED`` is refused by :func:`match_columns`' caller, naming the column).

A restriction (:class:`PartitionRestriction`) adds a filter on the partition column so
BigQuery prunes the partitions no row of the subject can be in (pending.py decides it).
Without one, a table that requires a partition filter (``tables.<key>.require_partition_filter``)
gets the filter that keeps every partition (core/record/partition_filter.py): the whole table
is still read, and the statement runs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kbqe_dagster.core.errors import KbqeError
from kbqe_dagster.core.record.partition_filter import every_partition

SUPPORTED_TYPES = {"STRING": "STRING", "INT64": "INT64", "INTEGER": "INT64", "BYTES": "BYTES"}
"""BigQuery column types a subject id is compared with (legacy names mapped)."""


class ErasureStatementError(KbqeError):
    """A table whose subject columns cannot be compared with a subject id."""


@dataclass(frozen=True)
class MatchColumn:
    """A subject column of one table and its BigQuery type."""

    path: str
    type: str


@dataclass(frozen=True)
class PartitionRestriction:
    """Only these partitions of a table can hold rows the pass must erase."""

    column: str
    kind: str
    """``day`` (DATE values), ``hour`` (TIMESTAMP values, ``YYYY-MM-DDTHH``) or ``between``
    (two DATE values, inclusive: the dead-letter table's staging dates)."""
    values: tuple[str, ...]

    def __post_init__(self) -> None:
        if self.kind not in ("day", "hour", "between"):
            raise ValueError(f"unknown restriction kind {self.kind!r}")
        if self.kind == "between" and len(self.values) != 2:
            raise ValueError("a 'between' restriction has two dates")


@dataclass(frozen=True)
class Param:
    name: str
    type: str
    """The element type of an array parameter, or a scalar's type when ``array`` is false."""
    values: tuple[Any, ...]
    array: bool = True


@dataclass(frozen=True)
class Statement:
    table: str
    sql: str
    params: tuple[Param, ...]
    column: str | None = None
    """For a count: the subject column it counts."""


def column_type(path: str, declared: str, table: str) -> str:
    """The parameter type for a subject column declared ``declared`` in ``table``."""
    kind = SUPPORTED_TYPES.get(declared.upper())
    if kind is None:
        raise ErasureStatementError(
            f"{table}: subject column {path} is {declared}; a subject id is compared "
            "with STRING, INT64 or BYTES columns"
        )
    return kind


def typed_subjects(subjects: Sequence[str], kind: str) -> tuple[Any, ...]:
    """The subject ids a column of type ``kind`` can hold, as its values."""
    if kind == "BYTES":
        return tuple(s.encode() for s in subjects)
    if kind == "INT64":
        out = []
        for s in subjects:
            try:
                out.append(int(s))
            except ValueError:
                continue  # "u-42" is in no INT64 column
        return tuple(out)
    return tuple(subjects)


def subject_text(value: Any) -> str:
    """The subject id a counted column value is (the inverse of :func:`typed_subjects`)."""
    if isinstance(value, bytes):
        return value.decode("utf-8", errors="replace")
    return str(value)


def quoted_path(path: str) -> str:
    return ".".join(f"`{part}`" for part in path.split("."))


def _restriction(
    restriction: PartitionRestriction | None, required_column: str | None = None
) -> tuple[str, tuple[Param, ...]]:
    """The partition filter of a statement: the restriction's, else every partition of
    ``required_column`` (a table that requires a filter), else none."""
    if restriction is None:
        return (f" AND {every_partition(required_column)}" if required_column else ""), ()
    column = f"`{restriction.column}`"
    if restriction.kind == "between":
        low, high = restriction.values
        return f" AND {column} BETWEEN @partition_low AND @partition_high", (
            Param("partition_low", "DATE", (low,), array=False),
            Param("partition_high", "DATE", (high,), array=False),
        )
    kind = "DATE" if restriction.kind == "day" else "TIMESTAMP"
    values = restriction.values
    if kind == "TIMESTAMP":
        values = tuple(f"{v.replace('T', ' ')}:00:00+00" for v in values)
    return f" AND {column} IN UNNEST(@partitions)", (Param("partitions", kind, values),)


def delete_statement(
    table: str,
    columns: Sequence[MatchColumn],
    subjects: Sequence[str],
    restriction: PartitionRestriction | None = None,
    required_column: str | None = None,
) -> Statement | None:
    """The one DELETE of ``subjects`` from ``table`` (``dataset.table``), or None when no
    subject can be in any of its columns (no integer subject for an INT64 column).
    ``required_column``: the table requires a filter on that partition column."""
    conditions: list[str] = []
    params: list[Param] = []
    for index, column in enumerate(columns):
        values = typed_subjects(subjects, column.type)
        if not values:
            continue
        name = f"subjects_{index}"
        conditions.append(f"{quoted_path(column.path)} IN UNNEST(@{name})")
        params.append(Param(name, column.type, values))
    if not conditions:
        return None
    partitions, partition_params = _restriction(restriction, required_column)
    where = " OR ".join(conditions)
    sql = f"DELETE FROM `{table}` WHERE ({where}){partitions}"
    return Statement(table, sql, (*params, *partition_params))


def count_statements(
    table: str,
    columns: Sequence[MatchColumn],
    subjects: Sequence[str],
    restriction: PartitionRestriction | None = None,
    required_column: str | None = None,
) -> tuple[Statement, ...]:
    """Rows per subject value, one ``SELECT`` per subject column (a row matching the subject
    in two columns counts twice: docs/operations.md says so)."""
    out = []
    partitions, partition_params = _restriction(restriction, required_column)
    for column in columns:
        values = typed_subjects(subjects, column.type)
        if not values:
            continue
        path = quoted_path(column.path)
        sql = (
            f"SELECT {path} AS subject, COUNT(*) AS n FROM `{table}` "
            f"WHERE {path} IN UNNEST(@subjects){partitions} GROUP BY 1"
        )
        out.append(
            Statement(
                table, sql, (Param("subjects", column.type, values), *partition_params), column.path
            )
        )
    return tuple(out)
