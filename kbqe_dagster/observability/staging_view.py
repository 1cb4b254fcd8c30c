"""What the staging area holds right now, in the terms the metrics and the health check use:
committed avro files waiting for a load per table and state (loadable, in a load job,
quarantined), their bytes and oldest age, file counts by kind, and the load state file.

Read from one listing of the staging location plus the load state file
(``operations/snapshot.py``), the same reading ``kbqe staging status`` does, so the metrics
and the operator command never disagree.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from kbqe_dagster.core.load_state import LoadState
from kbqe_dagster.operations.snapshot import StagingSnapshot, read_load_state, take_snapshot
from kbqe_dagster.resources.staging_store import StagingStore


class PendingState(StrEnum):
    LOADABLE = "loadable"
    """Committed, not in a load job: the next load cycle takes it."""
    IN_LOAD_JOB = "in_load_job"
    """Held by a planned, submitted or failed load job of the state file."""
    QUARANTINED = "quarantined"
    """Its load failed too often; set aside until an operator releases it."""


@dataclass(frozen=True)
class PendingFiles:
    """Committed avro files of one table in one state."""

    dataset: str
    table: str
    state: PendingState
    files: int
    bytes: int
    oldest_age_s: float


@dataclass(frozen=True)
class StagingView:
    pending: tuple[PendingFiles, ...]
    avro_files: int
    """Every avro file, committed or not."""
    done_files: int
    """Done files, markers included."""
    uncommitted_files: int
    """Avro files without their done file: a stage run in flight, or crash leftovers."""
    unrecognized_files: int
    state: LoadState

    @property
    def quarantined_tables(self) -> frozenset[tuple[str, str]]:
        return self.state.quarantined_tables()

    @property
    def oldest_pending_age_s(self) -> float | None:
        """Age of the oldest committed avro file still to be loaded, quarantined ones left out
        (they have their own check): the staging freshness the health check judges."""
        ages = [p.oldest_age_s for p in self.pending if p.state is not PendingState.QUARANTINED]
        return max(ages) if ages else None

    def oldest_pending(self) -> PendingFiles | None:
        candidates = [p for p in self.pending if p.state is not PendingState.QUARANTINED]
        return max(candidates, key=lambda p: p.oldest_age_s) if candidates else None


def read_staging_view(store: StagingStore, now: datetime) -> StagingView:
    """List the staging area once and read its load state."""
    snapshot = take_snapshot(store)
    return staging_view(snapshot, read_load_state(store), now)


def staging_view(snapshot: StagingSnapshot, state: LoadState, now: datetime) -> StagingView:
    listing = snapshot.listing
    done_keys = {d.key for d in listing.done}
    in_jobs, quarantined = state.pending_files(), state.quarantined_files()
    groups: dict[tuple[str, str, PendingState], list[str]] = defaultdict(list)
    uncommitted = 0
    for avro in listing.avro:
        if avro.key not in done_keys:
            uncommitted += 1
            continue
        if avro.name in quarantined:
            where = PendingState.QUARANTINED
        elif avro.name in in_jobs:
            where = PendingState.IN_LOAD_JOB
        else:
            where = PendingState.LOADABLE
        groups[(avro.key.dataset, avro.key.table, where)].append(avro.name)
    pending = tuple(
        PendingFiles(
            dataset, table, where, len(names),
            sum(snapshot.size(n) for n in names),
            round(max(snapshot.age_seconds(n, now) for n in names), 3),
        )
        for (dataset, table, where), names in sorted(groups.items())
    )
    return StagingView(
        pending=pending,
        avro_files=len(listing.avro),
        done_files=len(listing.done),
        uncommitted_files=uncommitted,
        unrecognized_files=len(listing.unrecognized),
        state=state,
    )
