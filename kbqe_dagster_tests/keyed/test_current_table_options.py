"""A keyed topic's current table ``D.T`` and its ``tables:`` options (keyed/merge.py): created
clustered by the key unless the entry's ``clustering`` says otherwise, with its labels and
description; a clustering column the table lacks refused naming it; an existing table brought
in step by one update. Against a fake client at the boundary (the MERGE's own statements run on
the emulator in test_merge_on_emulator.py)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from google.api_core.exceptions import NotFound
from google.cloud import bigquery

from kbqe_dagster.core.record.table_options import TableMetadata, TableOptions, TableUpdate
from kbqe_dagster.keyed.merge import KeyedMerger
from kbqe_dagster.keyed.merge_state import MergeError

SOURCE = {
    "id": bigquery.SchemaField("id", "INTEGER", mode="REQUIRED"),
    "email": bigquery.SchemaField("email", "STRING"),
    "score": bigquery.SchemaField("score", "FLOAT"),
}


class FakeLoads:
    """The merger's view of the BigQuery resource: a table exists or not; creations and
    option updates are recorded."""

    project = "p"

    def __init__(self, existing: TableMetadata | None = None) -> None:
        self.existing = existing
        self.created: list[Any] = []
        self.updates: list[TableUpdate] = []
        self.client = self

    def table_schema(self, dataset: str, table: str):
        if self.existing is None:
            return None
        return [SOURCE["id"], SOURCE["email"], SOURCE["score"]], None

    def table_metadata(self, dataset: str, table: str) -> TableMetadata | None:
        return self.existing

    def update_table_options(self, dataset: str, table: str, update: TableUpdate) -> None:
        self.updates.append(update)

    def create_table(self, table: Any, exists_ok: bool = False) -> Any:
        self.created.append(table)
        return table

    def get_table(self, ref: str) -> Any:
        raise NotFound(ref)


def ensure(loads: FakeLoads, options: TableOptions | None) -> None:
    KeyedMerger(loads)._ensure_table("inventory", "customers", SOURCE, SOURCE, ("id",), options)


def test_without_options_the_current_table_is_clustered_by_its_key() -> None:
    loads = FakeLoads()
    ensure(loads, None)
    [created] = loads.created
    assert (created.clustering_fields, created.labels, created.description) == (["id"], {}, None)


def test_the_entry_clustering_replaces_the_key_and_its_labels_and_description_apply() -> None:
    loads = FakeLoads()
    ensure(loads, TableOptions(("email",), None, {"team": "crm"}, "Customers, current state"))
    [created] = loads.created
    assert created.clustering_fields == ["email"]
    assert created.labels == {"team": "crm"}
    assert created.description == "Customers, current state"


@pytest.mark.parametrize(
    "column, problem",
    [
        ("phone", "clustering column 'phone' is not a column (columns: id, email, score)"),
        ("score", "clustering column 'score' is FLOAT"),
    ],
)
def test_a_clustering_column_the_current_table_cannot_take_is_refused(column, problem) -> None:
    with pytest.raises(MergeError, match=re.escape(f"inventory.customers: {problem}")):
        ensure(FakeLoads(), TableOptions(clustering=(column,)))


def test_an_existing_current_table_gets_the_changed_options_and_never_an_expiration() -> None:
    loads = FakeLoads(TableMetadata({"team": "crm"}, None, ("id",), partitioned=False))
    ensure(loads, TableOptions(("email", "id"), 30, {"team": "crm"}, "Customers"))
    [update] = loads.updates
    assert update.fields == ("description", "clustering_fields")
    assert update.clustering == ("email", "id")
    assert loads.created == []


def test_an_existing_current_table_without_options_costs_no_metadata_read() -> None:
    loads = FakeLoads(TableMetadata())
    loads.table_metadata = None  # type: ignore[assignment]  # would fail if called
    ensure(loads, TableOptions())
    assert loads.updates == []
