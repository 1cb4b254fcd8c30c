"""What the staging area holds, as the metrics and the health check read it: committed avro
files per table and state, file counts by kind, and the oldest file still to load."""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path

import pytest

from kbqe_dagster.observability.staging_view import PendingState, read_staging_view
from kbqe_dagster.resources.staging_store import LocalStagingStore
from kbqe_dagster_tests.cli.staging_area import AGE_SECONDS, ORDER_SCHEMA, avro_bytes, build

ORDERS_BYTES = len(avro_bytes(ORDER_SCHEMA, [{"orderId": "o-1"}, {"orderId": "o-2"}]))


@pytest.fixture
def view(tmp_path: Path):
    area = build(tmp_path / "staging")
    return read_staging_view(LocalStagingStore(area.root), datetime.now(UTC))


def _files(view) -> dict[tuple[str, str, str], int]:
    return {(p.dataset, p.table, p.state.value): p.files for p in view.pending}


def test_committed_avro_files_are_grouped_per_table_and_load_state(view) -> None:
    assert _files(view) == {
        # orders: schema 3 of partitions 0 and 1, schema 4 of partition 1, the prefix topic's
        ("acme_sales", "orders", "loadable"): 4,
        ("acme_sales", "orders", "quarantined"): 1,
        ("acme_web", "page_views", "in_load_job"): 1,
        ("kbqe_dead_letters", "dead_letters", "loadable"): 1,
    }


def test_bytes_and_ages_are_those_of_the_files(view) -> None:
    loadable = next(
        p for p in view.pending if p.state is PendingState.LOADABLE and p.table == "orders"
    )
    assert loadable.bytes == 4 * ORDERS_BYTES
    assert loadable.oldest_age_s == pytest.approx(AGE_SECONDS, abs=30)


def test_files_are_counted_by_kind(view) -> None:
    # 8 avro names (one in flight), 13 done files (10 Scala-era, 3 of one kbqe range), and
    # README.txt plus a name that only looks like an avro file
    assert (view.avro_files, view.uncommitted_files, view.done_files, view.unrecognized_files) == (
        8,
        1,
        13,
        2,
    )


def test_quarantined_files_name_their_table_and_are_left_out_of_the_freshness_age(
    tmp_path: Path,
) -> None:
    area = build(tmp_path / "staging")
    quarantined = area.root / "com.acme.events.0.acme_sales.orders.4.0.avro"
    old = quarantined.stat().st_mtime - 86_400
    os.utime(quarantined, (old, old))  # the quarantined file is a day older than the rest
    view = read_staging_view(LocalStagingStore(area.root), datetime.now(UTC))

    assert view.quarantined_tables == {("acme_sales", "orders")}
    assert view.oldest_pending_age_s == pytest.approx(AGE_SECONDS, abs=30)
    assert view.oldest_pending().state is not PendingState.QUARANTINED


def test_an_empty_staging_area_has_nothing_pending(tmp_path: Path) -> None:
    view = read_staging_view(LocalStagingStore(tmp_path), datetime.now(UTC))

    assert view.pending == ()
    assert view.oldest_pending_age_s is None
    assert (view.avro_files, view.done_files) == (0, 0)
