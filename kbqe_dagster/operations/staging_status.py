"""``kbqe staging status``: what the staging area holds, per topic-partition and per table.

Per topic-partition (those with at least one done file): the next offset a stage run would
start from (``core/offsets.recover``), the committed offset ranges merged into intervals,
holes, the bootstrap anchor, and the avro files still waiting to be loaded (count, bytes,
oldest age). Per destination table: the files a load cycle could take now
(``core/selection.loadable_files``), the files held by pending load jobs and the quarantined
ones. Names that are not staging names are listed, never fatal.

Ranges of ``delivery: storage_write`` tables (core/protocol/delivery.py) are committed ranges
like any other; their files were appended through the Storage Write API, so they are never
pending. A Storage Write intent without a done file is listed per partition
(``open_intents``): the next stage run restages exactly its range first.

Bootstrap markers are not listed as committed ranges (they commit no message, they pin a
start); ``bootstrap_offset`` shows them. Range markers (ranges that staged no file) are.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kbqe_dagster.core.load.selection import loadable_files
from kbqe_dagster.core.load.state import LoadState
from kbqe_dagster.core.protocol.commit import is_marker
from kbqe_dagster.core.protocol.delivery import open_intents
from kbqe_dagster.core.protocol.naming import AvroFileName
from kbqe_dagster.core.protocol.offsets import CommittedRange, PartitionChain, recover
from kbqe_dagster.operations.snapshot import StagingSnapshot, read_load_state, take_snapshot
from kbqe_dagster.resources.staging_store import StagingStore

Interval = tuple[int, int]  # first, last — both inclusive, as in done file names


@dataclass(frozen=True)
class PartitionStatus:
    topic: str
    partition: int
    next_offset: int
    """Where the next stage run starts: the end of the contiguous committed chain."""
    committed_ranges: tuple[Interval, ...]
    """Committed offsets merged into intervals; superseded ranges and bootstrap markers are
    left out."""
    holes: tuple[Interval, ...]
    """Uncommitted offsets between committed ranges: the next run redoes them first."""
    bootstrap_offset: int | None
    done_files: int
    superseded_done_files: int
    pending_files: int
    """Committed avro files not loaded yet (their done file exists)."""
    pending_bytes: int
    oldest_pending_age_seconds: float | None
    uncommitted_files: int
    """Avro files without a done file: a stage run in flight, or leftovers it will delete."""
    warnings: tuple[str, ...]
    open_intents: tuple[str, ...] = ()
    """Storage Write intents without a done file: ranges the next stage run rolls forward."""


@dataclass(frozen=True)
class TableStatus:
    dataset: str
    table: str
    loadable_files: int
    """Files the next load cycle can take: committed, not in a pending job, not quarantined."""
    loadable_bytes: int
    schema_ids: tuple[int, ...]
    oldest_loadable_age_seconds: float | None
    files_in_pending_jobs: int
    quarantined_files: int


@dataclass(frozen=True)
class StagingStatus:
    staging: str
    generated_at: datetime
    partitions: tuple[PartitionStatus, ...]
    tables: tuple[TableStatus, ...]
    uncommitted: tuple[str, ...]
    unrecognized: tuple[str, ...]
    pending_jobs: int
    quarantined_files: int

    def to_json(self) -> dict[str, Any]:
        return {
            "staging": self.staging,
            "generated_at": self.generated_at.isoformat(),
            "partitions": [_partition_json(p) for p in self.partitions],
            "tables": [_table_json(t) for t in self.tables],
            "uncommitted": list(self.uncommitted),
            "unrecognized": list(self.unrecognized),
            "load_state": {
                "pending_jobs": self.pending_jobs,
                "quarantined_files": self.quarantined_files,
            },
        }


def _partition_json(p: PartitionStatus) -> dict[str, Any]:
    return {
        "topic": p.topic,
        "partition": p.partition,
        "next_offset": p.next_offset,
        "committed_ranges": [list(r) for r in p.committed_ranges],
        "holes": [list(h) for h in p.holes],
        "bootstrap_offset": p.bootstrap_offset,
        "done_files": p.done_files,
        "superseded_done_files": p.superseded_done_files,
        "pending_files": p.pending_files,
        "pending_bytes": p.pending_bytes,
        "oldest_pending_age_seconds": p.oldest_pending_age_seconds,
        "uncommitted_files": p.uncommitted_files,
        "warnings": list(p.warnings),
        "open_intents": list(p.open_intents),
    }


def _table_json(t: TableStatus) -> dict[str, Any]:
    return {
        "dataset": t.dataset,
        "table": t.table,
        "loadable_files": t.loadable_files,
        "loadable_bytes": t.loadable_bytes,
        "schema_ids": list(t.schema_ids),
        "oldest_loadable_age_seconds": t.oldest_loadable_age_seconds,
        "files_in_pending_jobs": t.files_in_pending_jobs,
        "quarantined_files": t.quarantined_files,
    }


def staging_status(
    store: StagingStore, now: datetime, state: LoadState | None = None
) -> StagingStatus:
    """The status of the staging area behind ``store``; reads its load state unless given."""
    snapshot = take_snapshot(store)
    if state is None:
        state = read_load_state(store)
    return summarize(snapshot, state, now, staging=store.location.url)


def summarize(
    snapshot: StagingSnapshot, state: LoadState, now: datetime, *, staging: str
) -> StagingStatus:
    listing = snapshot.listing
    done_keys = {d.key for d in listing.done}
    committed = [a for a in listing.avro if a.key in done_keys]
    uncommitted = [a for a in listing.avro if a.key not in done_keys]
    partitions = tuple(
        _partition_status(chain, snapshot, committed, uncommitted, now)
        for chain in recover(listing).values()
    )
    return StagingStatus(
        staging=staging,
        generated_at=now,
        partitions=partitions,
        tables=_table_statuses(snapshot, state, committed, now),
        uncommitted=tuple(a.name for a in uncommitted),
        unrecognized=tuple(sorted(listing.unrecognized)),
        pending_jobs=len(state.pending_jobs()),
        quarantined_files=len(state.quarantined),
    )


def _partition_status(
    chain: PartitionChain,
    snapshot: StagingSnapshot,
    committed: list[AvroFileName],
    uncommitted: list[AvroFileName],
    now: datetime,
) -> PartitionStatus:
    tp = (chain.topic, chain.partition)
    pending = [a.name for a in committed if a.key.topic_partition == tp]
    anchor = chain.anchor
    warnings = tuple(
        f"committed range {r.first}..{r.last} overlaps another range ({_files_hint(r)})"
        for r in chain.overlapping
        if not r.is_bootstrap
    )
    return PartitionStatus(
        topic=chain.topic,
        partition=chain.partition,
        next_offset=chain.resume_offset,
        committed_ranges=_merge(r for r in chain.chain + chain.after_hole if not r.is_bootstrap),
        holes=tuple((start, end - 1) for start, end in chain.holes),
        bootstrap_offset=anchor.next_offset if anchor is not None else None,
        done_files=sum(len(r.done) for r in chain.chain + chain.after_hole + chain.superseded),
        superseded_done_files=sum(len(r.done) for r in chain.superseded),
        pending_files=len(pending),
        pending_bytes=sum(snapshot.size(n) for n in pending),
        oldest_pending_age_seconds=_oldest(snapshot, pending, now),
        uncommitted_files=sum(1 for a in uncommitted if a.key.topic_partition == tp),
        warnings=warnings,
        open_intents=tuple(
            i.name for i in open_intents(snapshot.listing) if i.key.topic_partition == tp
        ),
    )


def _files_hint(rng: CommittedRange) -> str:
    return rng.done[0].name + (f" and {len(rng.done) - 1} more" if len(rng.done) > 1 else "")


def _merge(ranges: Iterable[CommittedRange]) -> tuple[Interval, ...]:
    merged: list[list[int]] = []
    for rng in sorted(ranges, key=lambda r: (r.first, r.last)):
        if merged and rng.first <= merged[-1][1] + 1:
            merged[-1][1] = max(merged[-1][1], rng.last)
        else:
            merged.append([rng.first, rng.last])
    return tuple((first, last) for first, last in merged)


def _oldest(snapshot: StagingSnapshot, names: list[str], now: datetime) -> float | None:
    if not names:
        return None
    return round(max(snapshot.age_seconds(n, now) for n in names), 3)


def _table_statuses(
    snapshot: StagingSnapshot, state: LoadState, committed: list[AvroFileName], now: datetime
) -> tuple[TableStatus, ...]:
    pending, quarantined = state.pending_files(), state.quarantined_files()
    loadable = loadable_files(snapshot.listing, pending=pending, quarantined=quarantined)
    tables = {a.key.table_id for a in committed if not is_marker(a)}
    tables |= state.quarantined_tables()
    out = []
    for table_id in sorted(tables):
        mine = [a for a, _ in loadable if a.key.table_id == table_id]
        names = [a.name for a in mine]
        present = [a for a in committed if a.key.table_id == table_id]
        out.append(
            TableStatus(
                dataset=table_id[0],
                table=table_id[1],
                loadable_files=len(names),
                loadable_bytes=sum(snapshot.size(n) for n in names),
                schema_ids=tuple(sorted({a.key.schema_id for a in mine})),
                oldest_loadable_age_seconds=_oldest(snapshot, names, now),
                files_in_pending_jobs=sum(1 for a in present if a.name in pending),
                quarantined_files=sum(
                    1 for q in state.quarantined if (q.dataset, q.table) == table_id
                ),
            )
        )
    return tuple(out)
