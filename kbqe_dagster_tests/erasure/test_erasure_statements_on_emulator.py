"""The statements of an erasure batch on the BigQuery emulator: a DELETE with ``IN
UNNEST(@subjects)`` of STRING, INT64 and nested-path columns, restricted by DATE partitions or
by the hours of an HOUR table, works as on BigQuery; its one gap (an ``ARRAY<BYTES>`` parameter, the Kafka key) is pinned,
and the client's workaround (resources/bigquery/erasure_tables.py) makes the same statement work.

``test_emulator_gap_*`` asserts the emulator's CURRENT behaviour where it differs from
BigQuery; when it fails, check whether the gap closed and drop the workaround."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from google.api_core.exceptions import BadRequest
from google.cloud import bigquery

from kbqe_dagster.core.erasure.statements import (
    MatchColumn,
    PartitionRestriction,
    count_statements,
    delete_statement,
)
from kbqe_dagster.resources.bigquery.erasure_tables import EmulatorErasureTables
from kbqe_dagster_tests.localstack.emulators import bq, emulators  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("emulators")]


@pytest.fixture
def table(bq: bigquery.Client) -> Iterator[str]:
    dataset = f"erasure_contract_{uuid.uuid4().hex[:8]}"
    bq.create_dataset(dataset)
    bq.query(
        f"CREATE TABLE `{dataset}.t` (id STRING, n INT64, k BYTES, s STRUCT<id STRING>, d DATE) "
        "PARTITION BY d"
    ).result()
    bq.query(
        f"INSERT INTO `{dataset}.t` VALUES "
        "('a', 1, b'a', STRUCT('a'), DATE '2026-01-01'), "
        "('b', 2, b'b', STRUCT('b'), DATE '2026-01-02'), "
        "('c', 3, b'c', STRUCT('c'), DATE '2026-01-03'), "
        "('a', 4, b'a', STRUCT('x'), DATE '2026-01-03')"
    ).result()
    yield f"{dataset}.t"
    bq.delete_dataset(dataset, delete_contents=True, not_found_ok=True)


def ids(bq: bigquery.Client, table: str) -> list[tuple]:
    return sorted(tuple(r.values()) for r in bq.query(f"SELECT id, n FROM `{table}`").result())


def test_one_delete_of_several_subjects_over_columns_and_a_nested_path(bq, table) -> None:
    tables = EmulatorErasureTables(bq)
    columns = [MatchColumn("id", "STRING"), MatchColumn("s.id", "STRING")]
    statement = delete_statement(table, columns, ["a", "b"])

    result = tables.run(statement)

    assert result.affected_rows == 3
    assert result.bytes_processed is None  # the emulator reports 0: unknown, never 0
    assert ids(bq, table) == [("c", 3)]


def test_a_delete_restricted_to_partitions_leaves_the_other_days(bq, table) -> None:
    tables = EmulatorErasureTables(bq)
    restriction = PartitionRestriction("d", "day", ("2026-01-03",))
    statement = delete_statement(table, [MatchColumn("id", "STRING")], ["a"], restriction)

    assert tables.run(statement).affected_rows == 1
    assert ids(bq, table) == [("a", 1), ("b", 2), ("c", 3)]


def test_an_int64_column_is_compared_with_the_subjects_that_are_integers(bq, table) -> None:
    tables = EmulatorErasureTables(bq)
    statement = delete_statement(table, [MatchColumn("n", "INT64")], ["2", "u-42"])

    assert tables.run(statement).affected_rows == 1
    assert ("b", 2) not in ids(bq, table)


def test_counts_per_subject_value(bq, table) -> None:
    tables = EmulatorErasureTables(bq)
    (count,) = count_statements(table, [MatchColumn("k", "BYTES")], ["a", "c", "zz"])

    assert sorted(tables.run(count).rows) == [(b"a", 2), (b"c", 1)]


def test_emulator_gap_bytes_array_parameter(bq, table) -> None:
    """BigQuery compares a BYTES column with an ``ARRAY<BYTES>`` parameter's values. The
    emulator passes the values as their base64 text, and DuckDB refuses the comparison
    (BLOB with VARCHAR): the statement fails as written, and EmulatorErasureTables compares
    ``TO_BASE64(column)`` with that text instead."""
    statement = delete_statement(table, [MatchColumn("k", "BYTES")], ["a"])
    config = bigquery.QueryJobConfig(
        query_parameters=[bigquery.ArrayQueryParameter("subjects_0", "BYTES", [b"a"])]
    )
    with pytest.raises(BadRequest, match="BLOB and VARCHAR"):
        bq.query(statement.sql, job_config=config).result()

    assert EmulatorErasureTables(bq).run(statement).affected_rows == 2
    assert ids(bq, table) == [("b", 2), ("c", 3)]


def test_a_delete_restricted_to_hours_of_an_hourly_table(bq) -> None:
    dataset = f"erasure_contract_{uuid.uuid4().hex[:8]}"
    bq.create_dataset(dataset)
    try:
        bq.query(
            f"CREATE TABLE `{dataset}.h` (id STRING, _event_hour TIMESTAMP) "
            "PARTITION BY TIMESTAMP_TRUNC(_event_hour, HOUR)"
        ).result()
        bq.query(
            f"INSERT INTO `{dataset}.h` VALUES ('a', TIMESTAMP '2026-01-02 07:00:00+00'), "
            "('a', TIMESTAMP '2026-01-02 08:00:00+00')"
        ).result()
        restriction = PartitionRestriction("_event_hour", "hour", ("2026-01-02T08",))
        statement = delete_statement(
            f"{dataset}.h", [MatchColumn("id", "STRING")], ["a"], restriction
        )

        assert EmulatorErasureTables(bq).run(statement).affected_rows == 1
        left = [r["_event_hour"].hour for r in bq.query(f"SELECT * FROM `{dataset}.h`").result()]
        assert left == [7]
    finally:
        bq.delete_dataset(dataset, delete_contents=True, not_found_ok=True)
