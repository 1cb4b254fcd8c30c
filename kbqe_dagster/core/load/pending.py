"""What waits in the staging area for a load: one definition, over one listing, for every
reader — the load op's metadata, the ``pending_files_fresh`` check, the staging sensor's
observation, the metrics, ``kbqe health`` and ``kbqe staging status``.

**Pending** means a *committed* avro file (its done file exists) that no succeeded load has
taken yet. Each is in one state: ``loadable`` (the next cycle takes it), ``in_load_job`` (held
by a planned, submitted or failed job of the load state), or ``quarantined`` (set aside).
Avro files without their done file are **uncommitted** — a stage run in flight or crash
leftovers — and not pending: no load may take them. The freshness the check and the health
judge is the age of the oldest pending file that is not quarantined (quarantined files have a
check of their own), against :func:`freshness_limit_s`.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Protocol

from kbqe_dagster.core.load.state import LoadState
from kbqe_dagster.core.protocol.naming import parse_listing

FRESHNESS_CADENCES = 3
"""A pending file older than this many load cadences is late (the check warns, health says
degraded)."""


def freshness_limit_s(cadence: timedelta) -> float:
    return FRESHNESS_CADENCES * cadence.total_seconds()


class ListedFile(Protocol):
    """One entry of a staging listing (``resources.staging_store.StoredFile`` is one)."""

    name: str
    size: int
    updated: datetime


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

    def _waiting(self) -> list[PendingFiles]:
        return [p for p in self.pending if p.state is not PendingState.QUARANTINED]

    @property
    def waiting_files(self) -> int:
        """Pending files that are not quarantined: what the loads still owe."""
        return sum(p.files for p in self._waiting())

    @property
    def waiting_bytes(self) -> int:
        return sum(p.bytes for p in self._waiting())

    @property
    def quarantined_files(self) -> int:
        return sum(p.files for p in self.pending if p.state is PendingState.QUARANTINED)

    @property
    def oldest_pending_age_s(self) -> float | None:
        """Age of the oldest pending file that is not quarantined; None when none waits."""
        ages = [p.oldest_age_s for p in self._waiting()]
        return max(ages) if ages else None

    def oldest_pending(self) -> PendingFiles | None:
        waiting = self._waiting()
        return max(waiting, key=lambda p: p.oldest_age_s) if waiting else None


def staging_view(files: Iterable[ListedFile], state: LoadState, now: datetime) -> StagingView:
    """The view of one listing (``files``) and the load state read with it."""
    by_name = {f.name: f for f in files}
    listing = parse_listing(by_name)
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
            dataset,
            table,
            where,
            len(names),
            sum(by_name[n].size for n in names),
            round(max(max(0.0, (now - by_name[n].updated).total_seconds()) for n in names), 3),
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
