"""What ``kbqe run --until-idle`` did: the outcome of each run it executed, and the totals per
topic and per destination table that ``--json`` prints (a contract: keys are added, never
renamed or removed). Plain data, no Dagster: the in-process pipeline translates its runs'
events into these outcomes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kbqe_dagster.core.load.cost import storage_write_list_price

OffsetRange = tuple[str, int, int, int]  # topic, partition, first, last (inclusive)


@dataclass(frozen=True)
class StageOutcome:
    """One stage run of one topic."""

    topic: str
    run_id: str
    ok: bool
    error: str | None = None
    records: int = 0
    """Records staged for destination tables (the run's ``dagster/row_count``)."""
    messages: int = 0
    dead_letters: int = 0
    tombstones: int = 0
    """Null values seen: dead-lettered or skipped in append mode, counted only when keyed."""
    ranges: int = 0
    """Offset ranges the run committed: zero while the topic has a backlog is no progress."""
    appended: Mapping[str, tuple[int, int]] = field(default_factory=dict)
    """``dataset.table`` → (rows, bytes) appended through the Storage Write API."""


@dataclass(frozen=True)
class TableLoad:
    """What the load jobs one run finished wrote into one table."""

    rows: int
    job_ids: tuple[str, ...]
    offset_ranges: tuple[OffsetRange, ...]
    bytes: int = 0
    """Input bytes of those jobs (the avro files loaded: free)."""


@dataclass(frozen=True)
class LoadOutcome:
    """One load-cycle or poll run; ``tables`` keyed ``"dataset.table"``."""

    run_id: str
    ok: bool
    error: str | None = None
    tables: Mapping[str, TableLoad] = field(default_factory=dict)


@dataclass
class TopicTotals:
    staged: int = 0
    dead_lettered: int = 0
    tombstones: int = 0
    messages: int = 0
    stage_runs: int = 0
    missing: str | None = None
    """Why the topic was not staged at the last look: Kafka does not hold it."""

    def add(self, outcome: StageOutcome) -> None:
        self.staged += outcome.records
        self.dead_lettered += outcome.dead_letters
        self.tombstones += outcome.tombstones
        self.messages += outcome.messages
        self.stage_runs += 1


@dataclass
class TableTotals:
    rows_loaded: int = 0
    load_jobs: int = 0
    keys_merged: int = 0
    merge_bytes_processed: int | None = None
    """``None`` until a merge reports its billed bytes (never, for append tables)."""
    bytes_loaded: int = 0
    """Input bytes of its load jobs: free."""
    rows_appended: int = 0
    bytes_appended: int = 0
    """Through the Storage Write API (``delivery: storage_write``): billed per GiB."""

    @property
    def list_price_usd(self) -> float:
        """The bytes appended at the Storage Write API's list rate, before the monthly free
        tier (core/load/cost.py); loads cost nothing."""
        return storage_write_list_price(self.bytes_appended)

    def add_load(self, load: TableLoad) -> None:
        self.rows_loaded += load.rows
        self.load_jobs += len(load.job_ids)
        self.bytes_loaded += load.bytes

    def add_appended(self, rows: int, n_bytes: int) -> None:
        self.rows_appended += rows
        self.bytes_appended += n_bytes

    def add_merge(self, keys: int, bytes_processed: int | None) -> None:
        self.keys_merged += keys
        if bytes_processed is not None:
            self.merge_bytes_processed = (self.merge_bytes_processed or 0) + bytes_processed


@dataclass(frozen=True)
class TableCompleteness:
    """One table's completeness after the run, as ``kbqe completeness --json`` shows it
    (``doc``: its per-table document), and the days this run declared complete."""

    doc: Mapping[str, Any]
    newly_complete: tuple[str, ...] = ()
    """Partition keys declared complete by this run (recorded in Dagster as
    ``day_complete`` / ``hour_complete`` where the table has the check)."""

    @property
    def newest_complete(self) -> str | None:
        return self.doc.get("newest_complete")

    @property
    def late_after_complete(self) -> int:
        return int(self.doc.get("late_after_complete", 0))

    def to_json(self) -> dict[str, Any]:
        return {**self.doc, "newly_complete": list(self.newly_complete)}


@dataclass
class UntilIdleReport:
    """Totals of one ``kbqe run --until-idle``; ``ok`` only when everything was staged and
    loaded (and merged) with no failure and no quarantined file, else ``error`` says why."""

    topics: dict[str, TopicTotals]
    tables: dict[str, TableTotals] = field(default_factory=dict)
    rounds: int = 0
    run_ids: list[str] = field(default_factory=list)
    quarantined_tables: tuple[str, ...] = ()
    error: str | None = None
    completeness: dict[str, TableCompleteness] = field(default_factory=dict)
    """Per table fed by the pipeline, evaluated once after the last round (whether or not
    the run loaded it): ``completeness_sensor``'s evaluation, which this run also wrote."""

    @property
    def ok(self) -> bool:
        return self.error is None

    def table(self, name: str) -> TableTotals:
        return self.tables.setdefault(name, TableTotals())

    def add_stage(self, outcome: StageOutcome) -> None:
        self.run_ids.append(outcome.run_id)
        self.topics.setdefault(outcome.topic, TopicTotals()).add(outcome)
        for name, (rows, n_bytes) in outcome.appended.items():
            self.table(name).add_appended(rows, n_bytes)

    def add_load(self, outcome: LoadOutcome) -> None:
        self.run_ids.append(outcome.run_id)
        for name, load in outcome.tables.items():
            self.table(name).add_load(load)

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "error": self.error,
            "rounds": self.rounds,
            "runs": len(self.run_ids),
            "topics": {
                name: {
                    "staged": t.staged,
                    "dead_lettered": t.dead_lettered,
                    "tombstones": t.tombstones,
                    "messages": t.messages,
                    "stage_runs": t.stage_runs,
                    # Only for a topic Kafka does not hold, so the usual document is unchanged.
                    **({"missing": t.missing} if t.missing else {}),
                }
                for name, t in sorted(self.topics.items())
            },
            "tables": {
                name: {
                    "rows_loaded": t.rows_loaded,
                    "keys_merged": t.keys_merged,
                    "merge_bytes_processed": t.merge_bytes_processed,
                    "load_jobs": t.load_jobs,
                    "bytes_loaded": t.bytes_loaded,
                    "rows_appended": t.rows_appended,
                    "bytes_appended": t.bytes_appended,
                    "list_price_usd": round(t.list_price_usd, 6),
                }
                for name, t in sorted(self.tables.items())
            },
            "quarantined_tables": list(self.quarantined_tables),
            "completeness": {name: t.to_json() for name, t in sorted(self.completeness.items())},
        }
