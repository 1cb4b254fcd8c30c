"""One erasure batch (operations/erasure_batch.py) over a fake BigQuery and a local staging area:
one DELETE per table for every request of the batch, the pending rule and its later passes
restricted to the watched ranges' days, a dry run that records nothing, the state a
concurrent ``kbqe erase`` wrote kept, and no run without the salt."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.erasure.requests import ErasureRequest
from kbqe_dagster.core.erasure.statements import Statement
from kbqe_dagster.core.protocol.commit import Manifest, StagedFile
from kbqe_dagster.operations.erasure_batch import (
    STATE_FILE,
    ErasureError,
    apply_erasures,
    read_state,
)
from kbqe_dagster.resources.bigquery.erasure_tables import StatementResult
from kbqe_dagster.resources.staging_store import LocalStagingStore

NOW = datetime(2026, 1, 10, 12, tzinfo=UTC)
CONFIG = parse_pipeline_config(
    {
        "version": 1,
        "topics": [
            {
                "name": "t",
                "event_time": {"kafka_timestamp_fallback": True},
                "routing": {"mode": "static", "dataset": "shop", "table": "orders"},
            }
        ],
        "erasure": {"tables": {"shop.orders": {"columns": ["customer_id"]}}},
    }
)


class FakeTables:
    """shop.orders as rows of (customer_id, day); statements recorded."""

    def __init__(self, rows: list[tuple[str, str]]) -> None:
        self.rows = rows
        self.statements: list[Statement] = []
        self.audit: list[dict] = []

    def base_tables(self, dataset: str) -> list[str]:
        return ["orders"] if dataset == "shop" else []

    def column_types(self, dataset: str, table: str) -> dict:
        return {"customer_id": ("STRING", "NULLABLE"), "_event_date": ("DATE", "NULLABLE")}

    def _matching(self, statement: Statement) -> list[tuple[str, str]]:
        subjects = set(statement.params[0].values)
        days = next((p.values for p in statement.params if p.name == "partitions"), None)
        return [r for r in self.rows if r[0] in subjects and (days is None or r[1] in days)]

    def run(self, statement: Statement, *, dry_run: bool = False) -> StatementResult:
        self.statements.append(statement)
        matching = self._matching(statement)
        if statement.sql.startswith("SELECT"):
            counts: dict[str, int] = {}
            for customer, _ in matching:
                counts[customer] = counts.get(customer, 0) + 1
            return StatementResult(tuple(counts.items()), None, None, "j")
        self.rows = [r for r in self.rows if r not in matching]
        return StatementResult((), len(matching), 1000, "j")

    def estimate(self, statement: Statement) -> int | None:
        return 5000

    def ensure_audit_table(self, dataset: str, table: str) -> None:
        pass

    def append_audit(self, dataset: str, table: str, rows) -> None:
        self.audit.extend(rows)

    @property
    def deletes(self) -> list[Statement]:
        return [s for s in self.statements if s.sql.startswith("DELETE")]


def stage(store: LocalStagingStore, first: int, last: int, days: tuple, *, loaded: bool) -> None:
    avro = f"t.0.shop.orders.1.{first}.avro"
    done = f"t.0.shop.orders.1.{first}.{last}.done"
    staged = StagedFile(avro, done, sum(n for _, n in days), days=days)
    store.put_bytes(done, Manifest("t", 0, first, last, (staged,), 0, 0, NOW.isoformat()).encode())
    if not loaded:
        store.put_bytes(avro, b"rows")


def batch(store, tables, high: int = 0, *requests: ErasureRequest, dry_run: bool = False):
    return apply_erasures(
        CONFIG, store, tables, lambda topics: {("t", 0): (0, high)},  # type: ignore[arg-type]
        salt="s", now=NOW, requests=requests, dry_run=dry_run,
    )  # fmt: skip


@pytest.fixture
def store(tmp_path) -> LocalStagingStore:
    return LocalStagingStore(tmp_path)


def test_several_requests_are_one_delete_per_table_and_complete_when_all_is_loaded(store) -> None:
    stage(store, 0, 9, (("2026-01-01", 10),), loaded=True)
    tables = FakeTables([("a", "2026-01-01"), ("b", "2026-01-01"), ("c", "2026-01-01")])

    report = batch(store, tables, 10, ErasureRequest("r1", "a"), ErasureRequest("r2", "b"))

    assert [s.params[0].values for s in tables.deletes] == [("a", "b")]
    assert "partitions" not in tables.deletes[0].sql  # a first pass reads the whole table
    assert [(r.request_id, r.status, r.rows_deleted) for r in report.requests] == [
        ("r1", "complete", 1),
        ("r2", "complete", 1),
    ]
    assert tables.rows == [("c", "2026-01-01")]
    assert read_state(store).pending == ()
    assert [a["subject_hash"] for a in tables.audit] == [r.subject_hash for r in report.requests]
    assert all(a["subject_hash"] not in ("a", "b") for a in tables.audit)


def test_a_request_is_pending_until_its_watched_offsets_are_loaded(store) -> None:
    stage(store, 0, 9, (("2026-01-01", 10),), loaded=True)
    stage(store, 10, 19, (("2026-01-05", 10),), loaded=False)  # staged, not loaded
    tables = FakeTables([("a", "2026-01-01")])

    first = batch(store, tables, 25, ErasureRequest("r1", "a"))
    assert first.requests[0].status == "pending"
    assert first.requests[0].waiting_for == [
        {"topic": "t", "partition": 0, "from": 10, "until": 25}
    ]
    assert tables.rows == []

    # The load brings the subject's row of 2026-01-05; 20..24 are staged later.
    tables.rows.append(("a", "2026-01-05"))
    (store.root / "t.0.shop.orders.1.10.avro").unlink()
    stage(store, 20, 24, (("2026-01-06", 5),), loaded=True)
    second = batch(store, tables)

    assert second.requests[0].status == "complete" and second.requests[0].rows_deleted == 1
    later = tables.deletes[-1]
    assert later.params[-1].values == ("2026-01-05", "2026-01-06")  # only the watched days
    assert tables.rows == [] and read_state(store).pending == ()


def test_a_later_pass_skips_a_table_no_watched_range_wrote(store) -> None:
    stage(store, 0, 9, (), loaded=False)  # a range of no row of shop.orders
    tables = FakeTables([("a", "2026-01-01")])
    batch(store, tables, 10, ErasureRequest("r1", "a"))
    (store.root / "t.0.shop.orders.1.0.avro").unlink()
    statements = len(tables.statements)

    report = batch(store, tables)

    assert len(tables.statements) == statements  # no count, no DELETE
    assert report.tables[0].skipped and report.requests[0].status == "complete"


def test_a_dry_run_counts_and_records_nothing(store) -> None:
    stage(store, 0, 9, (("2026-01-01", 10),), loaded=False)
    tables = FakeTables([("a", "2026-01-01")])

    report = batch(store, tables, 10, ErasureRequest("r1", "a"), dry_run=True)

    assert report.requests[0].status == "dry_run" and report.requests[0].rows_deleted == 1
    assert report.tables[0].rows_found == 1 and report.tables[0].bytes_processed == 5000
    assert tables.deletes == [] and tables.audit == [] and tables.rows == [("a", "2026-01-01")]
    assert STATE_FILE not in {f.name for f in store.list("_kbqe/")}


def test_requests_another_writer_recorded_meanwhile_are_kept(store) -> None:
    stage(store, 0, 9, (("2026-01-01", 10),), loaded=False)
    tables = FakeTables([])
    batch(store, tables, 10, ErasureRequest("cli-1", "a"))

    class Interleaved(FakeTables):
        def append_audit(self, dataset, table, rows) -> None:
            # A concurrent `kbqe erase` writes its pending request before this batch does.
            other = FakeTables([])
            batch(store, other, 12, ErasureRequest("cli-2", "b"))

    batch(store, Interleaved([]), 10)
    assert sorted(p.request.request_id for p in read_state(store).pending) == ["cli-1", "cli-2"]


def test_no_erasure_without_the_salt(store) -> None:
    with pytest.raises(ErasureError, match="KBQE_ERASURE_SALT is unset"):
        apply_erasures(CONFIG, store, FakeTables([]), lambda t: {}, salt="", now=NOW)  # type: ignore[arg-type]


def test_a_batch_with_no_request_writes_nothing(store) -> None:
    tables = FakeTables([("a", "2026-01-01")])

    report = batch(store, tables)

    assert report.requests == [] and tables.statements == [] and tables.audit == []
    assert STATE_FILE not in {f.name for f in store.list("_kbqe/")}
