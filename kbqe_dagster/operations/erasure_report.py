"""What one erasure batch did (operations/erasure_batch.py), per table and per request: what
``kbqe erase`` prints, the ``erasure`` run's metadata and the audit rows are made of. No
subject in clear: requests are named by id, source and salted hash."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class TableErasure:
    table: str
    rows_deleted: int = 0
    rows_found: int = 0
    bytes_processed: int | None = None
    """What the DELETE processed (BigQuery's job statistics; in a dry run its estimate);
    None where BigQuery does not say (the emulator)."""
    count_bytes_processed: int | None = None
    partitions: list[str] | None = None
    """The partitions the DELETE was restricted to; None: the whole table."""
    skipped: str | None = None
    """Why no statement ran on it (nothing arrived in its partitions, no comparable column)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "rows_deleted": self.rows_deleted,
            "rows_found": self.rows_found,
            "bytes_processed": self.bytes_processed,
            "count_bytes_processed": self.count_bytes_processed,
            "partitions": self.partitions,
            "skipped": self.skipped,
        }


@dataclass
class RequestOutcome:
    request_id: str
    subject_hash: str | None
    source: str
    status: str
    """``complete``, ``pending`` (rows may still arrive: watches outstanding), ``refused``,
    or ``dry_run``."""
    rows_deleted: int = 0
    tables: list[str] = field(default_factory=list)
    note: str = ""
    waiting_for: list[dict[str, Any]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "request_id": self.request_id,
            "subject_hash": self.subject_hash,
            "source": self.source,
            "status": self.status,
            "rows_deleted": self.rows_deleted,
            "tables": self.tables,
            "note": self.note,
            "waiting_for": self.waiting_for,
        }


@dataclass
class ErasureReport:
    dry_run: bool
    requests: list[RequestOutcome] = field(default_factory=list)
    tables: list[TableErasure] = field(default_factory=list)
    requests_read: dict[int, int] = field(default_factory=dict)

    @property
    def rows_deleted(self) -> int:
        return sum(t.rows_deleted for t in self.tables)

    @property
    def bytes_processed(self) -> int | None:
        known = [t.bytes_processed for t in self.tables if t.bytes_processed is not None]
        return sum(known) if known else None

    def to_json(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "rows_deleted": self.rows_deleted,
            "bytes_processed": self.bytes_processed,
            "requests": [r.to_json() for r in self.requests],
            "tables": [t.to_json() for t in self.tables],
        }
