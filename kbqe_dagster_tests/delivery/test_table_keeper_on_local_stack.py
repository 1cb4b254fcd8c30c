"""The table a Storage Write append goes to, made ready on the local BigQuery emulator
(delivery/tables.py): created with the columns a load would give it (all NULLABLE for a table
configured ``all_columns_nullable``), widened before rows that carry a new column are appended
(the emulator needs ALTER TABLE and tables.patch both, a gap pinned in
resources/test_storage_write_on_local_stack.py), a REQUIRED column relaxed before rows whose
schema deleted its field, a type change refused before any row, and left alone when ready."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import replace

import pytest
from google.cloud import bigquery

from kbqe_dagster.core.config.table_layout import TableLayout, table_layout
from kbqe_dagster.core.errors import SchemaChangeRefusedError
from kbqe_dagster.core.formats.avro_proto import proto_rows
from kbqe_dagster.core.record.enrichment import EnrichmentConfig
from kbqe_dagster.core.record.partitioning import Partitioning
from kbqe_dagster.core.record.table_options import TableOptions
from kbqe_dagster.delivery.tables import TableKeeperSettings
from kbqe_dagster.resources.environment import local_resources
from kbqe_dagster_tests.localstack.emulators import bq, emulators  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("emulators")]

V1 = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "_event_date", "type": {"type": "int", "logicalType": "date"}},
        {"name": "n", "type": "long"},
    ],
}
V2 = {**V1, "fields": [*V1["fields"], {"name": "ref", "type": ["null", "string"], "default": None}]}
LAYOUT = table_layout(EnrichmentConfig(), Partitioning.DAY, dead_letter=False, changelog=False)


@pytest.fixture
def dataset(bq: bigquery.Client) -> Iterator[str]:
    name = f"keeper_{uuid.uuid4().hex[:10]}"
    yield name
    bq.delete_dataset(name, delete_contents=True, not_found_ok=True)


def _keeper():
    return TableKeeperSettings.of(local_resources()["bigquery"]).keeper()


def test_a_missing_table_is_created_then_a_new_column_added_before_its_rows(bq, dataset):
    writer = local_resources()["bigquery"].storage_write_settings().writer()
    keeper = _keeper()
    keeper.ensure(dataset, "clicks", V1, LAYOUT)
    assert [f.name for f in bq.get_table(f"{dataset}.clicks").schema] == ["_event_date", "n"]
    stream = writer.create_stream(dataset, "clicks")
    assert (
        writer.append(stream, proto_rows(V1, [{"_event_date": 20000, "n": 1}]), 0).kind
        == "appended"
    )

    _keeper().ensure(dataset, "clicks", V2, LAYOUT)  # another task, the newer schema
    stream = writer.create_stream(dataset, "clicks")  # a new schema id: a new stream
    outcome = writer.append(stream, proto_rows(V2, [{"_event_date": 20000, "n": 2, "ref": "r"}]), 0)
    assert outcome.kind == "appended"
    rows = sorted(
        tuple(r.values()) for r in bq.query_and_wait(f"SELECT n, ref FROM `{dataset}.clicks`")
    )
    assert rows == [(1, None), (2, "r")]
    writer.close()


def test_a_ready_table_costs_one_metadata_read_per_keeper(bq, dataset, monkeypatch):
    keeper = _keeper()
    keeper.ensure(dataset, "clicks", V2, LAYOUT)
    reads = []
    monkeypatch.setattr(keeper, "_evolve", lambda *a: reads.append(a))
    keeper.ensure(dataset, "clicks", V1, LAYOUT)  # narrower: nothing to do, nothing asked
    assert reads == []


def _modes(bq, dataset: str) -> dict[str, str]:
    return {f.name: f.mode for f in bq.get_table(f"{dataset}.clicks").schema}


def test_a_required_column_is_relaxed_before_rows_without_its_field_are_appended(bq, dataset):
    writer = local_resources()["bigquery"].storage_write_settings().writer()
    keeper = _keeper()
    keeper.ensure(dataset, "clicks", V2, LAYOUT)
    assert _modes(bq, dataset)["n"] == "REQUIRED"
    without_n = {**V2, "fields": [V2["fields"][0], V2["fields"][2]]}

    keeper.ensure(dataset, "clicks", without_n, LAYOUT)

    assert _modes(bq, dataset) == {"_event_date": "REQUIRED", "n": "NULLABLE", "ref": "NULLABLE"}
    stream = writer.create_stream(dataset, "clicks")
    rows = proto_rows(without_n, [{"_event_date": 20000, "ref": "r"}])
    assert writer.append(stream, rows, 0).kind == "appended"
    writer.close()
    assert [
        tuple(r.values()) for r in bq.query_and_wait(f"SELECT n, ref FROM `{dataset}.clicks`")
    ] == [(None, "r")]
    keeper.ensure(dataset, "clicks", V2, LAYOUT)  # an older writer: nothing to change back
    assert _modes(bq, dataset)["n"] == "NULLABLE"


def test_a_changed_type_is_refused_before_any_row_naming_the_table_and_the_column(bq, dataset):
    _keeper().ensure(dataset, "clicks", V1, LAYOUT)
    as_text = {**V1, "fields": [V1["fields"][0], {"name": "n", "type": "string"}]}
    with pytest.raises(
        SchemaChangeRefusedError, match=rf"table {dataset}.clicks: column n is INTEGER"
    ):
        _keeper().ensure(dataset, "clicks", as_text, LAYOUT)
    assert _modes(bq, dataset)["n"] == "REQUIRED"


def test_a_table_configured_all_columns_nullable_is_created_nullable(bq, dataset):
    nullable = table_layout(
        EnrichmentConfig(), Partitioning.DAY, dead_letter=False, changelog=False,
        all_columns_nullable=True,
    )  # fmt: skip
    _keeper().ensure(dataset, "clicks", V2, nullable)
    assert set(_modes(bq, dataset).values()) == {"NULLABLE"}


def test_a_storage_write_table_gets_its_options_and_takes_changed_ones(bq, dataset):
    def with_options(**options) -> TableLayout:
        return replace(LAYOUT, clustering=options["clustering"], options=TableOptions(**options))

    first = with_options(clustering=("n",), labels={"team": "web"}, description="Clicks")
    _keeper().ensure(dataset, "clicks", V1, first)
    changed = with_options(clustering=("ref", "n"), labels={"team": "growth"}, description="C")
    _keeper().ensure(dataset, "clicks", V2, changed)  # another task, the next range

    table = bq.get_table(f"{dataset}.clicks")
    assert (table.clustering_fields, table.labels, table.description) == (
        ["ref", "n"],
        {"team": "growth"},
        "C",
    )


KAFKA = {
    "type": "record",
    "name": "Click",
    "fields": [
        {"name": "n", "type": "long"},
        {"name": "_kafka_topic", "type": "string"},
        {"name": "_kafka_partition", "type": "int"},
        {"name": "_kafka_offset", "type": "long"},
    ],
}
COLUMNS = ("_kafka_topic", "_kafka_partition", "_kafka_offset")


def test_the_kafka_offsets_a_table_holds_of_a_range_are_read_from_its_rows(bq, dataset):
    # What the delivery sink asks before a range's rows go to a new stream (a stream gone).
    writer = local_resources()["bigquery"].storage_write_settings().writer()
    keeper = _keeper()
    assert (
        keeper.offsets_present(dataset, "clicks", COLUMNS, "web.events", 0, 0, 99) == frozenset()
    ), "no table yet: nothing held"
    keeper.ensure(dataset, "clicks", KAFKA, LAYOUT)
    stream = writer.create_stream(dataset, "clicks")
    rows = [
        {"n": o, "_kafka_topic": t, "_kafka_partition": p, "_kafka_offset": o}
        for t, p, o in [
            ("web.events", 0, 10),
            ("web.events", 0, 12),
            ("web.events", 1, 11),
            ("web.other", 0, 11),
            ("web.events", 0, 40),
        ]
    ]
    assert writer.append(stream, proto_rows(KAFKA, rows), 0).kind == "appended"
    writer.close()
    assert keeper.offsets_present(dataset, "clicks", COLUMNS, "web.events", 0, 10, 39) == frozenset(
        {10, 12}
    )
    with pytest.raises(ValueError, match="not a Kafka topic name"):
        keeper.offsets_present(dataset, "clicks", COLUMNS, "x' OR '1'='1", 0, 0, 1)
