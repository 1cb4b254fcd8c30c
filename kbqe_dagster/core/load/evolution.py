"""What a table's schema must become before rows of a staged schema reach it, and what can
never be done: the one decision behind schema evolution on both deliveries (loads and the
Storage Write API) and the changelogs of keyed tables. Pure: columns in BigQuery's REST form
(``{"name", "type", "mode", "fields"}`` dicts), as ``SchemaField.to_api_repr()`` gives them
for the table and ``resources/bigquery/schema.py`` derives them from a staged file's Avro
schema.

Under the registry's BACKWARD compatibility a newer schema may **add** a field (with a
default) and **delete** one, required or not. BigQuery can add a NULLABLE (or REPEATED)
column and relax a REQUIRED column to NULLABLE, and nothing else: it never drops a column.
So, comparing the table with the staged schema, column by column, nested RECORD fields
included:

==================================== =====================================================
the staged schema                    the table
==================================== =====================================================
has a field the table lacks          gains it as a column, NULLABLE (a REQUIRED field too:
                                     BigQuery adds no REQUIRED column to a table that has
                                     rows, and older rows have no value); REPEATED stays
lacks a REQUIRED column's field      the column is **relaxed** to NULLABLE: the rows of the
                                     staged schema hold NULL there
has a REQUIRED column's field as     the column is relaxed (the field became optional)
optional
lacks a NULLABLE or REPEATED column  nothing: NULL (an empty array) in the new rows
has a field of another type          **refused** (:class:`SchemaChangeRefusedError`): a
                                     column's type never changes (INT64 -> STRING)
REPEATED where the column is not, or refused: an array column stays an array
the reverse
==================================== =====================================================

A column's **description** (``description``, core/record/column_descriptions.py) is set
when the staged schema states one that differs from the table's: one more thing the same
update carries; one the staged schema does not state is left as the table has it.

A refusal names the table, the column and what to do: route the schema to a new table, or
keep the old field and add a new one under another name. ``all_columns_nullable`` (a
``tables:`` option, Kafka Connect's BigQuery sink calls it ``allBQFieldsNullable``) makes
every column a table is created with NULLABLE too (:func:`all_nullable`), for teams that
delete fields freely: nothing is ever relaxed then.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from kbqe_dagster.core.errors import SchemaChangeRefusedError

Column = Mapping[str, Any]
"""A column in BigQuery's REST form: ``name``, ``type``, ``mode`` (absent: NULLABLE),
``fields`` for a RECORD."""

REQUIRED, NULLABLE, REPEATED = "REQUIRED", "NULLABLE", "REPEATED"

_TYPE_ALIASES = {
    "INT64": "INTEGER",
    "FLOAT64": "FLOAT",
    "BOOL": "BOOLEAN",
    "STRUCT": "RECORD",
    "BIGDECIMAL": "BIGNUMERIC",
    "DECIMAL": "NUMERIC",
}
"""Standard SQL names of legacy type names: one type, two spellings, never a change."""


@dataclass(frozen=True)
class SchemaChange:
    """What must happen to ``table`` before rows of the staged schema arrive."""

    table: str
    """``dataset.table``."""
    relaxed: tuple[str, ...] = ()
    """Columns (dotted paths for nested fields) relaxed from REQUIRED to NULLABLE."""
    added: tuple[str, ...] = ()
    """Columns (dotted paths for nested fields) the table gains, NULLABLE or REPEATED."""
    described: tuple[str, ...] = ()
    """Existing columns (dotted paths) whose description changes."""
    schema: tuple[dict[str, Any], ...] = field(default=(), repr=False)
    """The table's columns after the change: relaxed, nested fields added, new columns
    appended: what the table is given before a load job and before an append alike."""

    @property
    def changes(self) -> bool:
        return bool(self.relaxed or self.added or self.described)

    @property
    def summary(self) -> str:
        """``relaxed a, b to NULLABLE; added c`` (empty: no change)."""
        parts = []
        if self.relaxed:
            parts.append(f"relaxed {', '.join(self.relaxed)} to NULLABLE")
        if self.added:
            parts.append(f"added {', '.join(self.added)}")
        if self.described:
            parts.append(f"described {', '.join(self.described)}")
        return "; ".join(parts)


def plan_schema_change(
    table: str,
    current: Sequence[Column],
    staged: Sequence[Column],
) -> SchemaChange:
    """The change ``table`` (columns ``current``) needs before rows of ``staged``.

    Raises :class:`SchemaChangeRefusedError` naming the table and the column when a field
    changed its type or its repetition (module docstring)."""
    planner = _Planner(table)
    schema = planner.record(current, staged, path="")
    return SchemaChange(
        table,
        tuple(planner.relaxed),
        tuple(planner.added),
        tuple(planner.described),
        tuple(schema),
    )


def all_nullable(columns: Sequence[Column]) -> list[dict[str, Any]]:
    """``columns`` with every REQUIRED mode NULLABLE, nested fields included (REPEATED
    stays: BigQuery has no NULL array)."""
    return [_nullable(c) for c in columns]


def normal_type(column: Column) -> str:
    """The column's type in one spelling (``INT64`` and ``INTEGER`` are one type)."""
    kind = str(column.get("type", "")).upper()
    return _TYPE_ALIASES.get(kind, kind)


def mode_of(column: Column) -> str:
    return str(column.get("mode") or NULLABLE).upper()


class _Planner:
    def __init__(self, table: str) -> None:
        self.table = table
        self.relaxed: list[str] = []
        self.added: list[str] = []
        self.described: list[str] = []

    def record(
        self, current: Sequence[Column], staged: Sequence[Column], path: str
    ) -> list[dict[str, Any]]:
        """The columns of one record level after the change."""
        by_name = {str(c["name"]).lower(): c for c in staged}
        out = [
            self.column(column, by_name.pop(str(column["name"]).lower(), None), path)
            for column in current
        ]
        for new in by_name.values():  # in the staged schema's order
            self.added.append(f"{path}{new['name']}")
            out.append(_nullable(new))
        return out

    def column(self, column: Column, staged: Column | None, path: str) -> dict[str, Any]:
        path = f"{path}{column['name']}"
        out = dict(column)
        if staged is None:
            if mode_of(column) == REQUIRED:
                self.relaxed.append(path)
                out["mode"] = NULLABLE
            return out
        self.refuse_incompatible(column, staged, path)
        description = staged.get("description")
        if description and description != column.get("description"):
            self.described.append(path)
            out["description"] = description
        if mode_of(column) == REQUIRED and mode_of(staged) == NULLABLE:
            self.relaxed.append(path)
            out["mode"] = NULLABLE
        if normal_type(column) == "RECORD":
            nested, new = column.get("fields") or (), staged.get("fields") or ()
            out["fields"] = self.record(nested, new, path + ".")
        return out

    def refuse_incompatible(self, column: Column, staged: Column, path: str) -> None:
        was, now = normal_type(column), normal_type(staged)
        if was != now:
            raise SchemaChangeRefusedError(
                f"table {self.table}: column {path} is {was} and a newer schema makes it "
                f"{now}; BigQuery never changes a column's type. Route that schema to a new "
                "table (routing, allowed_destinations), or keep the field's type and add a "
                "field under a new name"
            )
        was_repeated, now_repeated = mode_of(column) == REPEATED, mode_of(staged) == REPEATED
        if was_repeated != now_repeated:
            raise SchemaChangeRefusedError(
                f"table {self.table}: column {path} is {mode_of(column)} and a newer schema "
                f"makes it {mode_of(staged)}; BigQuery never turns an array column into a "
                "single value or back. Route that schema to a new table (routing, "
                "allowed_destinations), or add the field under a new name"
            )


def _nullable(column: Column) -> dict[str, Any]:
    out = dict(column)
    if mode_of(column) == REQUIRED:
        out["mode"] = NULLABLE
    if column.get("fields"):
        out["fields"] = [_nullable(f) for f in column["fields"]]
    return out
