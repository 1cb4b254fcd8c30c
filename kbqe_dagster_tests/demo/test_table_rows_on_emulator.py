"""The demo's closing readout: rows and distinct Kafka positions per table, on the BigQuery
emulator. Two topics feeding one table share offsets (both start at 0), so the readout counts
(topic, partition, offset) positions: rows equal positions exactly when no row arrived twice.
"""

from __future__ import annotations

import uuid

import pytest
from google.cloud import bigquery

from kbqe_dagster.demo.load import print_table_rows
from kbqe_dagster_tests.localstack.emulators import bq, emulators  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("emulators")]

DEAD_LETTER = ("dl_never_used", "dead_letters")


@pytest.fixture
def dataset(bq: bigquery.Client):
    name = f"demo_rows_{uuid.uuid4().hex[:8]}"
    bq.create_dataset(name)
    yield name
    bq.delete_dataset(name, delete_contents=True, not_found_ok=True)


def _table(bq: bigquery.Client, dataset: str, rows: list[tuple[str, int, int]]) -> None:
    schema = [
        bigquery.SchemaField("_kafka_topic", "STRING"),
        bigquery.SchemaField("_kafka_partition", "INTEGER"),
        bigquery.SchemaField("_kafka_offset", "INTEGER"),
    ]
    bq.create_table(bigquery.Table(f"{bq.project}.{dataset}.orders", schema=schema))
    values = ", ".join(f"('{t}', {p}, {o})" for t, p, o in rows)
    bq.query(
        f"INSERT INTO `{dataset}.orders` (_kafka_topic, _kafka_partition, _kafka_offset) "
        f"VALUES {values}"
    ).result()


def test_two_topics_with_the_same_offsets_are_distinct_positions(bq, dataset, capsys) -> None:
    _table(bq, dataset, [("shop.a", 0, 0), ("shop.a", 0, 1), ("shop.b", 0, 0), ("shop.b", 0, 1)])
    print_table_rows(bq, DEAD_LETTER, {dataset})
    assert f"{dataset}.orders: 4 row(s), 4 distinct Kafka position(s)" in capsys.readouterr().out


def test_a_row_that_arrived_twice_shows_as_fewer_positions_than_rows(bq, dataset, capsys) -> None:
    _table(bq, dataset, [("shop.a", 0, 0), ("shop.a", 0, 0), ("shop.b", 0, 0)])
    print_table_rows(bq, DEAD_LETTER, {dataset})
    assert f"{dataset}.orders: 3 row(s), 2 distinct Kafka position(s)" in capsys.readouterr().out
