"""Load selection: which staged avro files go into which BigQuery load job, and job ids
(DESIGN.md §4).

A file is loadable when its avro file and its done file both exist, matched on the **full**
key (schema id included — two schema ids in one range are two files, both loadable), it is
not part of a pending job in the load state, not quarantined, and not a marker.

Loadable files are grouped per destination table and schema id: one job per (table, schema
id) per cycle, lowest schema id first (an older schema's rows go in before the newer schema
widens the table), and every schema id gets its job in the same cycle, so newer ones are
never starved. A job takes at most ``max_files_per_job`` files (BigQuery's limit per load
job is 10,000 source URIs), lowest (topic, partition, first offset) first, so a backlog
drains oldest first; the rest waits for the next cycle. Dead-letter files are selected like
any table: their dataset/table are configured destinations.

Names are file names relative to the staging location; the caller maps them to URIs.

Job ids are globally unique (uuid4), readable, and within BigQuery's rules (letters, digits,
underscores, dashes; at most 1,024 characters):
``<prefix>_<dataset>_<table>_<yyyymmddHHMMSS>_<32 hex>``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from datetime import UTC, datetime

from kbqe_dagster.core.protocol.commit import is_marker, is_pinned
from kbqe_dagster.core.protocol.naming import (
    AvroFileName,
    DoneFileName,
    FileKey,
    ParsedListing,
    parse_listing,
    parse_name,
)

MAX_FILES_PER_JOB = 10_000
MAX_JOB_ID_LENGTH = 1024
DEFAULT_JOB_ID_PREFIX = "kbqe"

_JOB_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")


@dataclass(frozen=True)
class PlannedLoadJob:
    """One BigQuery load job to record in the state file, then submit.

    ``files``: avro names in (topic, partition, first offset) order; ``done_files``: their
    done files, same order; ``records``: total records when every file's count is known
    from manifests, else ``None``.
    """

    dataset: str
    table: str
    schema_id: int
    files: tuple[str, ...]
    done_files: tuple[str, ...]
    records: int | None = None

    @property
    def table_id(self) -> tuple[str, str]:
        return (self.dataset, self.table)

    @property
    def offset_ranges(self) -> tuple[tuple[str, int, int, int], ...]:
        """(topic, partition, first, last) of every file: materialization metadata."""
        result = []
        for name in self.done_files:
            done = parse_name(name)
            if isinstance(done, DoneFileName):
                result.append(
                    (done.key.topic, done.key.partition, done.first_offset, done.last_offset)
                )
        return tuple(result)


def loadable_files(
    names: Iterable[str] | ParsedListing,
    *,
    pending: AbstractSet[str] = frozenset(),
    quarantined: AbstractSet[str] = frozenset(),
) -> tuple[tuple[AvroFileName, DoneFileName], ...]:
    """(avro, done) pairs that may be loaded now, sorted by key.

    ``pending``: avro names in jobs not yet finished; ``quarantined``: avro names set aside
    after their job failed too often.
    """
    listing = names if isinstance(names, ParsedListing) else parse_listing(names)
    done_by_key: dict[FileKey, DoneFileName] = {}
    for done in listing.done:
        # Two done files for one avro key would mean two writers committed different bounds
        # from the same start; the avro file is still loaded once, with the lowest bound.
        done_by_key.setdefault(done.key, done)
    pairs = []
    for avro in listing.avro:
        paired = done_by_key.get(avro.key)
        if paired is None or is_marker(avro):
            continue
        if avro.name in pending or avro.name in quarantined:
            continue
        pairs.append((avro, paired))
    return tuple(pairs)


def plan_load_jobs(
    names: Iterable[str] | ParsedListing,
    *,
    pending: AbstractSet[str] = frozenset(),
    quarantined: AbstractSet[str] = frozenset(),
    records: Mapping[str, int] | None = None,
    max_files_per_job: int = MAX_FILES_PER_JOB,
) -> tuple[PlannedLoadJob, ...]:
    """The load jobs of one cycle, ordered by (dataset, table, schema id).

    ``records`` maps avro names to their record counts (``core.commit.records_by_avro``).
    """
    if not 1 <= max_files_per_job <= MAX_FILES_PER_JOB:
        raise ValueError(
            f"max_files_per_job must be between 1 and {MAX_FILES_PER_JOB}, got {max_files_per_job}"
        )
    groups: dict[tuple[str, str, int], list[tuple[AvroFileName, DoneFileName]]] = {}
    for avro, done in loadable_files(names, pending=pending, quarantined=quarantined):
        groups.setdefault((avro.key.dataset, avro.key.table, avro.key.schema_id), []).append(
            (avro, done)
        )
    jobs = []
    for (dataset, table, schema_id), pairs in sorted(groups.items()):
        pairs.sort(key=lambda p: (p[0].key.topic, p[0].key.partition, p[0].key.first_offset))
        chosen = pairs[:max_files_per_job]
        files = tuple(a.name for a, _ in chosen)
        counts = [records.get(name) for name in files] if records is not None else [None]
        known = [c for c in counts if c is not None]
        total = sum(known) if len(known) == len(counts) else None
        done_files = tuple(d.name for _, d in chosen)
        jobs.append(PlannedLoadJob(dataset, table, schema_id, files, done_files, total))
    return tuple(jobs)


def make_job_id(
    dataset: str,
    table: str,
    now: datetime,
    *,
    prefix: str = DEFAULT_JOB_ID_PREFIX,
    token: str | None = None,
) -> str:
    """A new, globally unique BigQuery job id: ``<prefix>_<dataset>_<table>_<utc time>_<hex>``.

    ``token`` replaces the uuid4 hex (tests). Characters BigQuery refuses become ``_``; the
    dataset and table parts are shortened when the id would exceed 1,024 characters.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware")
    stamp = now.astimezone(UTC).strftime("%Y%m%d%H%M%S")
    unique = _JOB_ID_UNSAFE.sub("_", token if token is not None else uuid.uuid4().hex)
    head = _JOB_ID_UNSAFE.sub("_", prefix)
    if not unique:
        raise ValueError("job id token must not be empty")
    fixed = [head] if head else []
    # Budget for dataset and table: what the fixed parts and the four separators leave.
    budget = MAX_JOB_ID_LENGTH - sum(len(p) + 1 for p in fixed) - len(stamp) - len(unique) - 3
    if budget < 2:
        raise ValueError(f"job id prefix {prefix!r} is too long")
    safe_dataset = _JOB_ID_UNSAFE.sub("_", dataset)
    safe_table = _JOB_ID_UNSAFE.sub("_", table)
    if len(safe_dataset) + len(safe_table) > budget:
        half = budget // 2
        safe_dataset = safe_dataset[: max(half, budget - len(safe_table))]
        safe_table = safe_table[: budget - len(safe_dataset)]
    return "_".join([*fixed, safe_dataset, safe_table, stamp, unique])


def without_leftovers(
    jobs: Iterable[PlannedLoadJob],
    pinned: Mapping[str, str | None],
    current: Mapping[str, str | None],
) -> tuple[list[PlannedLoadJob], tuple[str, ...]]:
    """``jobs`` without the files whose object is not the version their commit pinned, and
    those files (leftovers: to delete, never to load). ``pinned``: avro name → the version
    its manifest records (absent or ``None``: the commit pins nothing, the file loads by
    name); ``current``: avro name → the version the listing shows. A job left without files
    is dropped."""
    kept: list[PlannedLoadJob] = []
    leftovers: list[str] = []
    for job in jobs:
        pairs = [
            (avro, done)
            for avro, done in zip(job.files, job.done_files)
            if is_pinned(pinned.get(avro), current.get(avro))
        ]
        leftovers.extend(avro for avro in job.files if avro not in {a for a, _ in pairs})
        if pairs:
            kept.append(
                PlannedLoadJob(
                    job.dataset,
                    job.table,
                    job.schema_id,
                    tuple(a for a, _ in pairs),
                    tuple(d for _, d in pairs),
                    job.records,
                )
            )
    return kept, tuple(leftovers)
