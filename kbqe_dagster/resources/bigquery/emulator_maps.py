"""Avro maps on the emulator's load path: the SQL that turns the DuckDB ``MAP`` a file's map
is read as into the REPEATED RECORD of ``key``/``value`` BigQuery makes of it, at any depth.

BigQuery loads an Avro ``map<T>`` as ``ARRAY<STRUCT<key STRING, value T>>``
(``schema.py``). The emulator's DuckDB reads the same field as ``MAP(VARCHAR, T)`` and has no
cast from a map to a list of structs, so a load into a table with the BigQuery column fails
("Unimplemented type for cast (MAP(...) -> STRUCT(...)[])"), and so does a temporary table
created from the BigQuery schema. A load whose files hold a map therefore goes through a
temporary table whose map columns *are* maps (:func:`staging_columns_ddl`, DDL in BigQuery's
dialect: the emulator translates ``MAP<STRING, T>`` to DuckDB's ``MAP(VARCHAR, T)``), and the
by-name INSERT converts each column that holds a map somewhere (:func:`bigquery_value`):

=================================  =========================================================
column (BigQuery shape)            expression over the staged value ``v``
=================================  =========================================================
no map inside                      ``v``
map, values without a map          ``MAP_ENTRIES(v)``
map, values holding a map          ``LIST_TRANSFORM(MAP_ENTRIES(v), e -> STRUCT(e.key AS key,
                                   <value of e.value> AS value))``
record holding a map               ``STRUCT(<value of v.f> AS f, ...)``; NULL stays NULL
repeated record holding a map      ``LIST_TRANSFORM(v, e -> <record of e>)``
=================================  =========================================================

Pure: it reads the column dicts of ``bigquery_schema_from_avro(..., keep_maps=True)`` and
returns SQL text; ``emulator.py`` runs it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

Column = Mapping[str, Any]
"""A column dict of ``bigquery_schema_from_avro(..., keep_maps=True)``: ``name``, ``type``
(``MAP`` for a map), ``mode``, ``fields``."""

_SQL_TYPES = {"INTEGER": "INT64", "FLOAT": "FLOAT64", "BOOLEAN": "BOOL"}
"""REST type names whose standard-SQL spelling differs; the others are spelled alike."""


def holds_map(column: Column) -> bool:
    """Whether ``column`` is a map or has one at any depth."""
    return column["type"] == "MAP" or any(holds_map(f) for f in column.get("fields") or ())


def staging_columns_ddl(columns: Sequence[Column]) -> str:
    """The column list of a ``CREATE TABLE`` for a temporary table the files load into as they
    are: maps as ``MAP<STRING, T>``, everything else as BigQuery types it."""
    return ", ".join(f"{_quote(c['name'])} {sql_type(c)}" for c in columns)


def sql_type(column: Column) -> str:
    """``column``'s type in BigQuery's SQL (``ARRAY<STRUCT<...>>`` for a repeated record), and
    a ``MAP`` column's as ``MAP<STRING, T>``: the type a file's field is held as in the
    temporary table, or a new column is added as."""
    if column["type"] == "MAP":
        return f"MAP<STRING, {sql_type(column['fields'][1])}>"
    if column["type"] == "RECORD":
        fields = ", ".join(f"{_quote(f['name'])} {sql_type(f)}" for f in column["fields"])
        element = f"STRUCT<{fields}>"
    else:
        element = _SQL_TYPES.get(column["type"], column["type"])
    return f"ARRAY<{element}>" if column.get("mode") == "REPEATED" else element


def bigquery_value(column: Column, ref: str, depth: int = 0) -> str:
    """The expression turning the staged value at ``ref`` (a column, a field of one, a lambda
    variable) into ``column``'s BigQuery shape (module docstring). ``depth`` numbers the
    lambda variables, so that nested lambdas never shadow one another."""
    if not holds_map(column):
        return ref
    if column["type"] == "MAP":
        entries = f"MAP_ENTRIES({ref})"
        value = column["fields"][1]
        if not holds_map(value):
            return entries
        entry = f"_e{depth}"
        converted = bigquery_value(value, f"{entry}.`value`", depth + 1)
        return (
            f"LIST_TRANSFORM({entries}, {entry} -> "
            f"STRUCT({entry}.`key` AS `key`, {converted} AS `value`))"
        )
    if column.get("mode") == "REPEATED":
        element = f"_e{depth}"
        return f"LIST_TRANSFORM({ref}, {element} -> {_record(column, element, depth + 1)})"
    record = _record(column, ref, depth)
    if column.get("mode") == "REQUIRED":
        return record
    # STRUCT(...) of a NULL record would be a record of NULLs; BigQuery keeps the NULL.
    return f"IF({ref} IS NULL, NULL, {record})"


def _record(column: Column, ref: str, depth: int) -> str:
    fields = []
    for field in column["fields"]:
        name = _quote(field["name"])
        fields.append(f"{bigquery_value(field, f'{ref}.{name}', depth)} AS {name}")
    return f"STRUCT({', '.join(fields)})"


def select_list(columns: Sequence[Column]) -> str:
    """The SELECT list of the by-name INSERT: every column by its name, maps converted."""
    return ", ".join(
        f"{bigquery_value(c, _quote(c['name']))} AS {_quote(c['name'])}"
        if holds_map(c)
        else _quote(c["name"])
        for c in columns
    )


def _quote(name: str) -> str:
    # Avro names are [A-Za-z_][A-Za-z0-9_]*: no backtick to escape.
    return f"`{name}`"
