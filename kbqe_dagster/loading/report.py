"""What one run of the load coordinator did, in terms the Dagster layer reports: loads per
(table, DAY or HOUR partition) with rows, bytes, job id, file count and offset ranges; the rows
check of every finished job; retries, quarantines and jobs running too long.

Pure data and arithmetic; ``defs/bigquery`` turns it into materializations and check results.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from kbqe_dagster.core.completeness.decision import unit_of
from kbqe_dagster.core.load.checks import JobRows
from kbqe_dagster.core.load.notices import SchemaNotice
from kbqe_dagster.core.load.state import LoadJobRecord
from kbqe_dagster.core.protocol.naming import DoneFileName, parse_name
from kbqe_dagster.core.record.partitioning import Partitioning
from kbqe_dagster.loading.manifests import FileFacts
from kbqe_dagster.resources.bigquery import JobReport

OffsetRange = tuple[str, int, int, int]  # topic, partition, first, last (inclusive)


@dataclass(frozen=True)
class PartitionLoad:
    """Rows one job wrote into one partition of its table. ``day`` is the partition key: the
    event date of a DAY table, the event hour (``YYYY-MM-DDTHH``) of an HOUR table, the first
    day of the month (year) of a MONTH (YEAR) table; ``None`` for an unpartitioned table and
    for rows whose partition is not recorded (done files without per-day or per-hour
    counts): the table as a whole."""

    dataset: str
    table: str
    day: str | None
    rows: int | None
    files: int
    offset_ranges: tuple[OffsetRange, ...]
    job_id: str
    job_bytes: int | None


@dataclass(frozen=True)
class CompletedLoad:
    """A job that succeeded: its avro files are deleted and the state says so."""

    job: LoadJobRecord
    stats: JobReport
    facts: Mapping[str, FileFacts]
    input_bytes: int | None

    @property
    def table_id(self) -> tuple[str, str]:
        return self.job.table_id

    @property
    def rows_check(self) -> JobRows:
        """Rows the job wrote (BigQuery's statistics) against the records staged in its files
        (the done-file manifests); core/load/checks.py judges them."""
        return JobRows(
            self.job.job_id,
            f"{self.job.dataset}.{self.job.table}",
            self.job.records,
            self.stats.output_rows,
            self.stats.rows_source,
        )

    def partitions(self, unit: Partitioning = Partitioning.DAY) -> tuple[PartitionLoad, ...]:
        """One entry per event day (``unit`` HOUR: per event hour; MONTH, YEAR: per month,
        year, keyed by its first day) the job's files hold records for, plus one ``day=None``
        entry for the files whose days (hours) are not recorded — an HOUR table's files
        staged before it was made HOUR, for instance. An unpartitioned table (``none``): one
        ``day=None`` entry for the whole job."""
        days: dict[str | None, _Day] = {}
        done_files = self.job.done_files or (None,) * len(self.job.files)
        for avro, done in zip(self.job.files, done_files):
            facts = self.facts.get(avro, FileFacts())
            counts = facts.hours if unit is Partitioning.HOUR else facts.days
            if unit is Partitioning.NONE:
                counts = None  # one entry: the table as a whole
            elif counts is not None and unit is not Partitioning.HOUR:
                counts = unit_of(unit).rollup(counts)
            per_day = dict(counts) if counts is not None else {None: facts.records}
            for day, count in per_day.items():
                days.setdefault(day, _Day()).add(count, _offset_range(done))
        if list(days) == [None] and days[None].rows is None:
            days[None].rows = self.stats.output_rows  # no manifest at all: BigQuery's count
        job_bytes = self.stats.input_file_bytes or self.input_bytes
        return tuple(
            PartitionLoad(
                self.job.dataset,
                self.job.table,
                day,
                acc.rows,
                acc.files,
                tuple(acc.ranges),
                self.job.job_id,
                job_bytes,
            )
            for day, acc in sorted(days.items(), key=lambda item: (item[0] is None, item[0] or ""))
        )


@dataclass
class _Day:
    rows: int | None = 0
    files: int = 0
    ranges: list[OffsetRange] = field(default_factory=list)

    def add(self, count: int | None, where: OffsetRange | None) -> None:
        self.rows = None if self.rows is None or count is None else self.rows + count
        self.files += 1
        if where is not None:
            self.ranges.append(where)


def _offset_range(done_name: str | None) -> OffsetRange | None:
    done = parse_name(done_name) if done_name else None
    if not isinstance(done, DoneFileName):
        return None
    return (done.key.topic, done.key.partition, done.first_offset, done.last_offset)


@dataclass(frozen=True)
class QuarantinedLoad:
    job: LoadJobRecord
    error: str
    note: str
    """Staging name of the quarantine note written for operators."""


@dataclass
class CycleReport:
    """Everything one coordinator run did; empty lists when nothing happened."""

    planned: list[LoadJobRecord] = field(default_factory=list)
    submitted: list[str] = field(default_factory=list)
    already_submitted: list[str] = field(default_factory=list)
    """Submissions answered 409: the id existed, so the job counts as submitted."""
    resubmitted: list[str] = field(default_factory=list)
    """Recorded jobs BigQuery did not know, submitted again under their recorded id."""
    transient: list[str] = field(default_factory=list)
    completed: list[CompletedLoad] = field(default_factory=list)
    retried: list[tuple[str, str, str]] = field(default_factory=list)
    """(failed id, new id, error)."""
    quarantined: list[QuarantinedLoad] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    """Operator messages for jobs pending longer than the stuck threshold."""
    notices: list[SchemaNotice] = field(default_factory=list)
    """Tables created, columns added or relaxed by the jobs this run finished (core/load/notices.py)."""
    leftovers_deleted: list[str] = field(default_factory=list)
    """Objects under a committed name that were not the version the commit pinned (a late
    writer's re-upload): deleted, never loaded."""
    waiting: list[str] = field(default_factory=list)
    pending_after: int = 0
    quarantined_tables: frozenset[tuple[str, str]] = frozenset()
    """Tables with quarantined files after this run (their checks fail)."""
    state_writes: int = 0
    unloaded_files: int = 0
    """Avro files left in the staging area after a load cycle (quarantined ones excluded)."""
    oldest_unloaded_age_s: float | None = None
    """Age of the oldest of them; ``None`` when no cycle listed the staging area."""

    @property
    def completed_files(self) -> int:
        return sum(len(c.job.files) for c in self.completed)

    def summary(self) -> str:
        return (
            f"{len(self.planned)} planned, {len(self.submitted)} submitted "
            f"({len(self.resubmitted)} resubmitted, {len(self.already_submitted)} already known), "
            f"{len(self.completed)} succeeded ({self.completed_files} files), "
            f"{len(self.retried)} retried, {len(self.quarantined)} quarantined, "
            f"{len(self.stuck)} running too long, {self.pending_after} pending"
            + (
                f", {len(self.leftovers_deleted)} leftover(s) deleted"
                if self.leftovers_deleted
                else ""
            )
        )
