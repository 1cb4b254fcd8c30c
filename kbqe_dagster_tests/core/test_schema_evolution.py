"""Schema evolution, decided before rows of a staged schema reach a table
(core/load/evolution.py): a field a newer schema deletes relaxes its REQUIRED column to
NULLABLE, a field it adds becomes a NULLABLE column, and a type or repetition change is
refused naming the table, the column and what to do."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.errors import SchemaChangeRefusedError
from kbqe_dagster.core.load.evolution import all_nullable, plan_schema_change


def col(name: str, kind: str = "STRING", mode: str = "REQUIRED", fields=None) -> dict:
    out = {"name": name, "type": kind, "mode": mode}
    if fields is not None:
        out["fields"] = fields
    return out


TABLE = [col("_event_date", "DATE"), col("id", "INTEGER"), col("req"), col("opt", mode="NULLABLE")]


def test_the_same_schema_changes_nothing() -> None:
    change = plan_schema_change("d.t", TABLE, TABLE)
    assert not change.changes
    assert list(change.schema) == TABLE


def test_a_deleted_required_field_relaxes_its_column_and_keeps_its_place() -> None:
    change = plan_schema_change("d.t", TABLE, [TABLE[0], TABLE[1], TABLE[3]])
    assert change.relaxed == ("req",) and change.added == ()
    assert [(c["name"], c["mode"]) for c in change.schema] == [
        ("_event_date", "REQUIRED"),
        ("id", "REQUIRED"),
        ("req", "NULLABLE"),
        ("opt", "NULLABLE"),
    ]


def test_a_deleted_optional_field_changes_nothing() -> None:
    assert not plan_schema_change("d.t", TABLE, TABLE[:3]).changes


def test_a_required_field_that_became_optional_relaxes_its_column() -> None:
    staged = [*TABLE[:2], col("req", mode="NULLABLE"), TABLE[3]]
    assert plan_schema_change("d.t", TABLE, staged).relaxed == ("req",)


def test_an_optional_column_stays_optional_when_a_schema_requires_its_field_again() -> None:
    staged = [*TABLE[:3], col("opt")]  # an older writer after a newer one
    assert not plan_schema_change("d.t", TABLE, staged).changes


def test_an_added_field_is_a_nullable_column_at_the_end_even_when_the_field_is_required() -> None:
    staged = [*TABLE, col("coupon"), col("tags", mode="REPEATED")]
    change = plan_schema_change("d.t", TABLE, staged)
    assert change.added == ("coupon", "tags") and change.relaxed == ()
    assert list(change.schema[:4]) == TABLE
    assert [(c["name"], c["mode"]) for c in change.schema[-2:]] == [
        ("coupon", "NULLABLE"),
        ("tags", "REPEATED"),
    ]


def test_names_match_whatever_their_case_and_types_whatever_their_spelling() -> None:
    staged = [
        col("_EVENT_DATE", "DATE"),
        col("ID", "INT64"),
        col("Req"),
        col("opt", mode="NULLABLE"),
    ]
    assert not plan_schema_change("d.t", TABLE, staged).changes


def test_nested_fields_are_relaxed_and_added_inside_their_record() -> None:
    table = [col("address", "RECORD", fields=[col("city"), col("zip")])]
    staged = [col("address", "RECORD", fields=[col("city"), col("country", mode="NULLABLE")])]
    change = plan_schema_change("d.t", table, staged)
    assert change.relaxed == ("address.zip",) and change.added == ("address.country",)
    [address] = change.schema
    assert [(f["name"], f["mode"]) for f in address["fields"]] == [
        ("city", "REQUIRED"),
        ("zip", "NULLABLE"),
        ("country", "NULLABLE"),
    ]


def test_a_deleted_record_column_is_relaxed_not_its_fields() -> None:
    table = [col("id", "INTEGER"), col("address", "RECORD", fields=[col("city")])]
    change = plan_schema_change("d.t", table, table[:1])
    assert change.relaxed == ("address",)
    assert change.schema[1]["fields"] == [col("city")]


@pytest.mark.parametrize(
    ("was", "now", "says"),
    [
        (col("n", "INTEGER"), col("n", "STRING"), "column n is INTEGER and a newer schema makes it STRING"),
        (col("n", "INT64"), col("n", "FLOAT"), "column n is INTEGER and a newer schema makes it FLOAT"),
        (col("n", mode="NULLABLE"), col("n", mode="REPEATED"), "column n is NULLABLE and a newer schema makes it REPEATED"),
        (col("n", mode="REPEATED"), col("n", mode="NULLABLE"), "column n is REPEATED and a newer schema makes it NULLABLE"),
        (col("n", mode="REPEATED"), col("n"), "column n is REPEATED and a newer schema makes it REQUIRED"),
        (
            col("a", "RECORD", fields=[col("n", "INTEGER")]),
            col("a", "RECORD", fields=[col("n", "STRING")]),
            "column a.n is INTEGER",
        ),
        (col("a", "RECORD", fields=[col("n")]), col("a", "STRING"), "column a is RECORD"),
    ],
)  # fmt: skip
def test_a_type_or_repetition_change_is_refused_naming_table_column_and_what_to_do(
    was, now, says
) -> None:
    with pytest.raises(SchemaChangeRefusedError) as refused:
        plan_schema_change("shop.orders", [was], [now])
    message = str(refused.value)
    assert message.startswith("table shop.orders: ") and says in message
    assert "Route that schema to a new table" in message


def test_all_nullable_relaxes_every_required_column_and_nested_field_but_no_array() -> None:
    columns = [
        col("id", "INTEGER"),
        col("tags", mode="REPEATED"),
        col("a", "RECORD", fields=[col("n", "INTEGER"), col("m", mode="REPEATED")]),
    ]
    assert all_nullable(columns) == [
        col("id", "INTEGER", "NULLABLE"),
        col("tags", mode="REPEATED"),
        col(
            "a", "RECORD", "NULLABLE", [col("n", "INTEGER", "NULLABLE"), col("m", mode="REPEATED")]
        ),
    ]
    assert not plan_schema_change("d.t", all_nullable(TABLE), TABLE[:2]).changes, (
        "a table created all nullable never needs a relaxation"
    )
