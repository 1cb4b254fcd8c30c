"""The statements of an erasure batch: one DELETE per table for every subject (parameters,
never SQL text), typed per column, restricted to partitions when asked; counts per column."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.erasure.statements import (
    ErasureStatementError,
    MatchColumn,
    Param,
    PartitionRestriction,
    column_type,
    count_statements,
    delete_statement,
    subject_text,
)


def test_one_delete_covers_every_subject_and_every_column() -> None:
    statement = delete_statement(
        "shop.orders",
        [MatchColumn("customer_id", "STRING"), MatchColumn("_kafka_key", "BYTES")],
        ["u-1", "u-2"],
    )
    assert statement is not None
    assert statement.sql == (
        "DELETE FROM `shop.orders` WHERE (`customer_id` IN UNNEST(@subjects_0) "
        "OR `_kafka_key` IN UNNEST(@subjects_1))"
    )
    assert statement.params == (
        Param("subjects_0", "STRING", ("u-1", "u-2")),
        Param("subjects_1", "BYTES", (b"u-1", b"u-2")),
    )


def test_a_nested_path_is_quoted_part_by_part() -> None:
    statement = delete_statement("d.t", [MatchColumn("buyer.id", "STRING")], ["x"])
    assert statement is not None and "`buyer`.`id` IN UNNEST(@subjects_0)" in statement.sql


def test_an_int64_column_takes_the_integer_subjects_only() -> None:
    statement = delete_statement("d.t", [MatchColumn("id", "INT64")], ["7", "u-1", "12"])
    assert statement is not None and statement.params == (Param("subjects_0", "INT64", (7, 12)),)
    assert delete_statement("d.t", [MatchColumn("id", "INT64")], ["u-1"]) is None


@pytest.mark.parametrize(
    ("restriction", "sql", "params"),
    [
        (
            PartitionRestriction("_event_date", "day", ("2026-01-02", "2026-01-05")),
            " AND `_event_date` IN UNNEST(@partitions)",
            (Param("partitions", "DATE", ("2026-01-02", "2026-01-05")),),
        ),
        (
            PartitionRestriction("_event_hour", "hour", ("2026-01-02T07",)),
            " AND `_event_hour` IN UNNEST(@partitions)",
            (Param("partitions", "TIMESTAMP", ("2026-01-02 07:00:00+00",)),),
        ),
        (
            PartitionRestriction("staged_date", "between", ("2026-01-01", "2026-01-03")),
            " AND `staged_date` BETWEEN @partition_low AND @partition_high",
            (
                Param("partition_low", "DATE", ("2026-01-01",), array=False),
                Param("partition_high", "DATE", ("2026-01-03",), array=False),
            ),
        ),
    ],
)
def test_a_restriction_filters_the_partition_column(restriction, sql, params) -> None:
    statement = delete_statement("d.t", [MatchColumn("c", "STRING")], ["x"], restriction)
    assert statement is not None
    assert statement.sql.endswith(sql)
    assert statement.params[1:] == params


def test_counts_are_one_select_per_column_grouped_by_value() -> None:
    counts = count_statements(
        "d.t", [MatchColumn("a", "STRING"), MatchColumn("n", "INT64")], ["x", "5"]
    )
    assert [c.sql for c in counts] == [
        "SELECT `a` AS subject, COUNT(*) AS n FROM `d.t` WHERE `a` IN UNNEST(@subjects) GROUP BY 1",
        "SELECT `n` AS subject, COUNT(*) AS n FROM `d.t` WHERE `n` IN UNNEST(@subjects) GROUP BY 1",
    ]
    assert [c.params for c in counts] == [
        (Param("subjects", "STRING", ("x", "5")),),
        (Param("subjects", "INT64", (5,)),),
    ]
    assert [subject_text(v) for v in (b"x", 5, "y")] == ["x", "5", "y"]


def test_a_column_of_another_type_is_refused_naming_it() -> None:
    assert column_type("id", "INTEGER", "d.t") == "INT64"
    with pytest.raises(ErasureStatementError, match="d.t: subject column at is TIMESTAMP"):
        column_type("at", "TIMESTAMP", "d.t")
