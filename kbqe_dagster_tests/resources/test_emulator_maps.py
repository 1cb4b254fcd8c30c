"""The SQL the emulator's load path converts Avro maps with (resources/bigquery/emulator_maps.py):
a map is held as ``MAP<STRING, T>`` in the temporary table and becomes BigQuery's repeated
``key``/``value`` record in the INSERT, at any depth, while every column without a map is
selected as it is. Pure: the expressions are checked as text here; their effect on the
emulator's DuckDB by test_emulator_map_loads.py."""

from __future__ import annotations

from typing import Any

import pytest

from kbqe_dagster.resources.bigquery.emulator_maps import (
    bigquery_value,
    holds_map,
    select_list,
    sql_type,
    staging_columns_ddl,
)
from kbqe_dagster.resources.bigquery.schema import bigquery_schema_from_avro

MICROS = {"type": "long", "logicalType": "timestamp-micros"}


def _map(values: Any) -> dict:
    return {"type": "map", "values": values}


def _record(name: str, *fields: tuple[str, Any]) -> dict:
    return {"type": "record", "name": name, "fields": [{"name": n, "type": t} for n, t in fields]}


def columns(*fields: tuple[str, Any]) -> list[dict]:
    return bigquery_schema_from_avro(_record("Row", *fields), keep_maps=True)


def column(avro_type: Any) -> dict:
    (only,) = columns(("c", avro_type))
    return only


TAGGED = _record("Tagged", ("sku", "string"), ("tags", _map("string")))


@pytest.mark.parametrize(
    ("avro_type", "staged", "expression"),
    [
        pytest.param("long", "INT64", "`c`", id="scalar"),
        pytest.param(_record("R", ("a", "string")), "STRUCT<`a` STRING>", "`c`", id="record"),
        pytest.param({"type": "array", "items": "double"}, "ARRAY<FLOAT64>", "`c`", id="array"),
        pytest.param(_map("long"), "MAP<STRING, INT64>", "MAP_ENTRIES(`c`)", id="map"),
        pytest.param(
            ["null", _map(["null", "string"])],
            "MAP<STRING, STRING>",
            "MAP_ENTRIES(`c`)",
            id="nullable-map-of-nullable-values",
        ),
        pytest.param(
            _map({"type": "array", "items": "bytes"}),
            "MAP<STRING, ARRAY<BYTES>>",
            "MAP_ENTRIES(`c`)",
            id="map-of-arrays",
        ),
        pytest.param(
            _map(_record("V", ("n", "long"), ("at", MICROS))),
            "MAP<STRING, STRUCT<`n` INT64, `at` TIMESTAMP>>",
            "MAP_ENTRIES(`c`)",
            id="map-of-records",
        ),
        pytest.param(
            _record("R", ("a", "string"), ("m", _map("double"))),
            "STRUCT<`a` STRING, `m` MAP<STRING, FLOAT64>>",
            "STRUCT(`c`.`a` AS `a`, MAP_ENTRIES(`c`.`m`) AS `m`)",
            id="map-in-record",
        ),
        pytest.param(
            ["null", _record("R", ("m", _map("boolean")))],
            "STRUCT<`m` MAP<STRING, BOOL>>",
            "IF(`c` IS NULL, NULL, STRUCT(MAP_ENTRIES(`c`.`m`) AS `m`))",
            id="map-in-nullable-record",
        ),
        pytest.param(
            {"type": "array", "items": TAGGED},
            "ARRAY<STRUCT<`sku` STRING, `tags` MAP<STRING, STRING>>>",
            "LIST_TRANSFORM(`c`, _e0 -> STRUCT(_e0.`sku` AS `sku`, MAP_ENTRIES(_e0.`tags`) AS `tags`))",
            id="map-in-array-of-records",
        ),
        pytest.param(
            _map(_map("int")),
            "MAP<STRING, MAP<STRING, INT64>>",
            "LIST_TRANSFORM(MAP_ENTRIES(`c`), _e0 -> "
            "STRUCT(_e0.`key` AS `key`, MAP_ENTRIES(_e0.`value`) AS `value`))",
            id="map-of-maps",
        ),
        pytest.param(
            _map(_record("V", ("n", "long"), ("flags", _map("boolean")))),
            "MAP<STRING, STRUCT<`n` INT64, `flags` MAP<STRING, BOOL>>>",
            "LIST_TRANSFORM(MAP_ENTRIES(`c`), _e0 -> STRUCT(_e0.`key` AS `key`, "
            "STRUCT(_e0.`value`.`n` AS `n`, MAP_ENTRIES(_e0.`value`.`flags`) AS `flags`) AS `value`))",
            id="map-of-records-holding-a-map",
        ),
        pytest.param(
            _map({"type": "array", "items": TAGGED}),
            "MAP<STRING, ARRAY<STRUCT<`sku` STRING, `tags` MAP<STRING, STRING>>>>",
            "LIST_TRANSFORM(MAP_ENTRIES(`c`), _e0 -> STRUCT(_e0.`key` AS `key`, "
            "LIST_TRANSFORM(_e0.`value`, _e1 -> STRUCT(_e1.`sku` AS `sku`, "
            "MAP_ENTRIES(_e1.`tags`) AS `tags`)) AS `value`))",
            id="map-of-arrays-of-records-holding-a-map",
        ),
    ],
)
def test_a_field_is_staged_as_duckdb_reads_it_and_selected_in_bigquerys_shape(
    avro_type,
    staged,
    expression,
) -> None:
    c = column(avro_type)

    assert sql_type(c) == staged
    assert bigquery_value(c, "`c`") == expression


def test_nested_lambdas_get_a_variable_each_so_none_shadows_another() -> None:
    deep = column(
        {
            "type": "array",
            "items": _record(
                "Outer",
                ("inner", {"type": "array", "items": _record("Inner", ("m", _map("long")))}),
            ),
        }
    )

    assert bigquery_value(deep, "`c`") == (
        "LIST_TRANSFORM(`c`, _e0 -> STRUCT(LIST_TRANSFORM(_e0.`inner`, _e1 -> "
        "STRUCT(MAP_ENTRIES(_e1.`m`) AS `m`)) AS `inner`))"
    )


def test_holds_map_looks_at_every_depth() -> None:
    assert holds_map(
        column({"type": "array", "items": _record("A", ("b", _record("B", ("m", _map("long")))))})
    )
    assert not holds_map(column({"type": "array", "items": _record("A", ("b", "long"))}))


def test_without_keep_maps_a_map_is_the_repeated_record_bigquery_creates() -> None:
    (plain,) = bigquery_schema_from_avro(_record("Row", ("c", _map("long"))))

    assert plain == {
        "name": "c",
        "type": "RECORD",
        "mode": "REPEATED",
        "fields": [
            {"name": "key", "type": "STRING", "mode": "REQUIRED"},
            {"name": "value", "type": "INTEGER", "mode": "REQUIRED"},
        ],
    }
    assert sql_type(plain) == "ARRAY<STRUCT<`key` STRING, `value` INT64>>"
    assert bigquery_value(plain, "`c`") == "`c`"


def test_the_temporary_table_and_the_insert_name_every_column() -> None:
    cols = columns(
        ("id", "string"), ("attrs", _map("long")), ("day", {"type": "int", "logicalType": "date"})
    )

    assert staging_columns_ddl(cols) == ("`id` STRING, `attrs` MAP<STRING, INT64>, `day` DATE")
    assert select_list(cols) == "`id`, MAP_ENTRIES(`attrs`) AS `attrs`, `day`"
