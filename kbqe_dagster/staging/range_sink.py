"""Where a range's records go once staged: the stage engine's sink seam (DESIGN.md §12).

A :class:`RangeStager <kbqe_dagster.staging.stager.RangeStager>` decides what each record is
(its destination table, schema id, enrichment prefix and body); a :class:`RangeSink` decides
where records go and how the range commits. The stager asks its sink for a
:class:`RecordFile` the first time a range meets a (dataset, table, schema id), appends to it
directly from then on (no call through the sink per record), and at the end commits the
range through the sink or aborts it. Formats, keyed changes and transforms never know which
sink they write to.

The staging area's: :class:`~kbqe_dagster.staging.staging_area_sink.StagingAreaSink`, Avro
container files committed by done files in the staging area (DESIGN.md §3). Above staging/,
``kbqe_dagster/delivery/`` routes the tables of ``delivery: storage_write`` to the BigQuery
Storage Write API and the others to the staging area; the driver gives it to the stage
context (``StageContext.sink``): no stager changes, and staging/ never imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.resources.staging_store import StagingStore


class RecordFile(Protocol):
    """The records of one (dataset, table, schema id) of a range, open for appends."""

    @property
    def records(self) -> int:
        """Records appended so far."""

    def append(self, prefix: bytes, body: bytes, day: int, hour: int | None = None) -> None:
        """One record: its encoded enrichment prefix, its body, its event day (days since
        1970) and, for an HOUR table, its event hour (hours since 1970 UTC)."""

    def append_many(self, records: bytes, ends: Any, days: list[tuple[int, int]],
                    hours: list[tuple[int, int]] | None = None) -> None:  # fmt: skip
        """Records the native kernel staged: back to back, ``ends`` their end offsets,
        ``days`` (event day, records) pairs and, for an HOUR table, ``hours`` (event hour,
        records) pairs."""


@dataclass(frozen=True)
class RangeTally:
    """What the stager counted of a range, recorded with its commit."""

    dead_letters: int
    skipped: int
    created_at: datetime
    kafka_ts_max: int | None = None
    """The Kafka time the read reached, for completeness (core/completeness/decision.py)."""


@dataclass(frozen=True)
class TableDelivery:
    """What a range appended to one table through the Storage Write API (kbqe_dagster/
    delivery/), for the table's materialization and its rows check."""

    dataset: str
    table: str
    stream: str
    first_row: int
    """The first row offset of the range's rows in :attr:`stream`."""
    rows: int
    """Rows now in the stream from this range (refused rows not counted)."""
    records: int
    """Records the range staged for the table (``rows`` + :attr:`refused`)."""
    refused: int
    """Records dead-lettered because the API refused them (or they could not be rows)."""
    bytes: int
    """Serialized row bytes appended (what the API bills)."""
    days: tuple[tuple[str, int], ...] = ()
    """Records per event date (ISO date), as in a manifest."""
    requests: int = 0
    """AppendRows requests sent by this attempt (those answered already_exists included)."""
    skipped_requests: int = 0
    """Requests answered ``already_exists``: written by an earlier attempt of the range."""

    @property
    def last_row(self) -> int:
        return self.first_row + self.rows - 1


@dataclass(frozen=True)
class SinkOutcome:
    """How a range's commit through a sink went."""

    committed_last: int | None
    """The last offset committed; None when this attempt did not commit."""
    files: tuple[tuple[str, int], ...] = ()
    """(file name, records) of every file committed, dead-letter files included."""
    bytes_by_dataset: dict[str, int] = field(default_factory=dict)
    conflict: bool = False
    """Another writer owns the range (it committed first, or holds a name this one needs)."""
    dead_letters: dict[str, int] = field(default_factory=dict)
    """Dead letters the commit itself made, by reason (rows the Storage Write API refused)."""
    delivered: tuple[TableDelivery, ...] = ()
    """What went to tables through the Storage Write API."""


class RangeSink(Protocol):
    """Where one range's records go, and how the range commits (see the module docstring)."""

    def open(self, dataset: str, table: str, schema_id: int, schema: dict) -> RecordFile:
        """A new record file for (``dataset``, ``table``, ``schema_id``), whose records are
        written under ``schema`` (the file schema: enrichment columns included). Called once
        per key and range; the stager keeps what it returns."""

    def commit(self, store: StagingStore, covered: OffsetRange, tally: RangeTally) -> SinkOutcome:
        """Commit ``covered`` with every record appended, atomically and at most once
        (DESIGN.md §3); ``store`` is the staging area, which records what was committed."""

    def abort(self) -> None:
        """Drop what was appended: nothing of the range is committed."""


SinkFactory = Callable[[OffsetRange, Path, str], RangeSink]
"""Makes the sink of one range: (the range, the task's work directory, the topic's file codec).
A factory that delivers through the Storage Write API also has ``pinning(pinned) ->
SinkFactory``: the driver hands it the tables of the open intents the run restages
(core/protocol/delivery.py, ``pinned_tables``), which it delivers as the intents say."""
