"""What a keyed merge has merged, and what is new: the merge state, and the offset ranges of a
changelog's new rows, from its load jobs (``delivery: load``) or from the committed ranges of
the staging area (``delivery: storage_write``; core/keyed/delivered.py). keyed/merge.py runs
the merge over them.

The merge state (``_kbqe/merge_state.json`` in the staging area) is written only by the merge
step, after its statements: per current table, the load jobs merged, the cycles waited for
``merge_every``, and the delivered watermarks. Deleting it is always safe: every row is then
merged again, which changes nothing.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kbqe_dagster.core.errors import KbqeError, StagingError
from kbqe_dagster.core.keyed.delivered import coalesce, union
from kbqe_dagster.core.load.state import JobStatus, LoadJobRecord, LoadState
from kbqe_dagster.core.protocol.commit import parse_manifest
from kbqe_dagster.core.protocol.naming import (
    DoneFileName,
    of_topic,
    parse_listing,
    parse_name,
    topic_prefix,
)
from kbqe_dagster.core.protocol.offsets import recover
from kbqe_dagster.resources.staging_store import StagingStore

MERGE_STATE_FILE = "_kbqe/merge_state.json"


class MergeError(KbqeError):
    """A keyed destination could not be merged; the message names the table."""


# --- the merge state ----------------------------------------------------------------------------
@dataclass
class MergeState:
    merged_jobs: dict[str, set[str]] = field(default_factory=dict)
    """``dataset.table`` → ids of the load jobs whose rows are merged."""
    cycles: dict[str, int] = field(default_factory=dict)
    """``dataset.table`` → cycles with new rows since its last merge (for ``merge_every``)."""
    delivered: dict[str, dict[int, int]] = field(default_factory=dict)
    """``dataset.table`` → Kafka partition → the last offset of the changelog's delivered rows
    merged (``delivery: storage_write``; core/keyed/delivered.py)."""

    @classmethod
    def decode(cls, content: bytes | None) -> MergeState:
        if not content:
            return cls()
        try:
            raw = json.loads(content)
            tables = raw["tables"].items()
            return cls(
                {t: set(v.get("merged_jobs", ())) for t, v in tables},
                {t: int(v.get("cycles", 0)) for t, v in tables},
                {
                    t: {int(p): int(o) for p, o in v["delivered"].items()}
                    for t, v in tables
                    if "delivered" in v
                },
            )
        except (ValueError, KeyError, TypeError, AttributeError) as error:
            raise MergeError(
                f"{MERGE_STATE_FILE} is unreadable ({error}); deleting it is safe: every "
                "succeeded load job and every delivered row is then merged again, which changes nothing"
            ) from error

    def encode(self) -> bytes:
        tables: dict[str, dict[str, Any]] = {
            t: {"merged_jobs": sorted(self.merged_jobs.get(t, ())), "cycles": self.cycles.get(t, 0)}
            for t in sorted(set(self.merged_jobs) | set(self.cycles) | set(self.delivered))
        }
        for t, marks in self.delivered.items():
            tables[t]["delivered"] = {str(p): o for p, o in sorted(marks.items())}
        return json.dumps({"version": 1, "tables": tables}, indent=1).encode()


def read_merge_state(store: StagingStore) -> MergeState:
    names = {f.name for f in store.list("_kbqe/")}
    if MERGE_STATE_FILE not in names:
        return MergeState()
    try:
        return MergeState.decode(store.read_bytes(MERGE_STATE_FILE))
    except StagingError:
        return MergeState()


def unmerged_ranges(
    state: LoadState, merged: set[str], dataset: str, changelog: str
) -> tuple[list[str], dict[int, list[tuple[int, int]]]]:
    """The succeeded load jobs of the changelog not merged yet, and the exact offset ranges of
    their done files per partition (adjacent ranges joined)."""
    jobs = [
        j
        for j in _changelog_jobs(state, dataset, changelog)
        if j.status is JobStatus.SUCCEEDED and j.job_id not in merged
    ]
    return [j.job_id for j in jobs], job_ranges(jobs)


def not_merged_ranges(
    state: LoadState, merged: set[str], dataset: str, changelog: str
) -> dict[int, list[tuple[int, int]]]:
    """The offset ranges of every load job of the changelog the merge has not applied: the
    succeeded ones not merged yet and the pending ones (whose rows may land any moment)."""
    return job_ranges(
        [j for j in _changelog_jobs(state, dataset, changelog) if j.job_id not in merged]
    )


def changed_dates(
    store: StagingStore, state: LoadState, job_ids: Iterable[str]
) -> tuple[str, ...] | None:
    """The event dates of the rows the load jobs ``job_ids`` put in their changelog, from the
    per-day counts of their done files' manifests (core/protocol/commit.py; one read per
    range); None when a file's days are not recorded (an older manifest, an empty done
    file): the merge then reads every partition for the new rows."""
    wanted = set(job_ids)
    jobs = [j for j in state.jobs if j.job_id in wanted]
    files = {avro for j in jobs for avro in j.files}
    per_range: dict[tuple[str, int, int], str] = {}
    for name in (n for j in jobs for n in j.done_files):
        done = parse_name(name)
        if isinstance(done, DoneFileName):
            per_range.setdefault((done.key.topic, done.key.partition, done.key.first_offset), name)
    days: set[str] = set()
    found: set[str] = set()
    for name in per_range.values():
        try:
            manifest = parse_manifest(store.read_bytes(name), name)
        except StagingError:
            return None
        for staged in manifest.files if manifest is not None else ():
            if staged.avro not in files:
                continue
            if staged.records and not staged.days:
                return None
            found.add(staged.avro)
            days.update(day for day, _ in staged.days)
    return tuple(sorted(days)) if found == files else None


def _changelog_jobs(state: LoadState, dataset: str, changelog: str) -> list[LoadJobRecord]:
    return [j for j in state.jobs if (j.dataset, j.table) == (dataset, changelog)]


def job_ranges(jobs: Iterable[LoadJobRecord]) -> dict[int, list[tuple[int, int]]]:
    spans: dict[int, list[tuple[int, int]]] = {}
    for job in jobs:
        for name in job.done_files:
            done = parse_name(name)
            if isinstance(done, DoneFileName):
                spans.setdefault(done.key.partition, []).append(
                    (done.key.first_offset, done.last_offset)
                )
    return {p: coalesce(s) for p, s in spans.items()}


# --- rows delivered through the Storage Write API ------------------------------------------------
@dataclass(frozen=True)
class DeliveredView:
    """What the staging area says, at one listing, about a changelog's delivered rows."""

    committed: dict[int, int]
    """Kafka partition → last offset of its contiguous chain of committed ranges: every row up
    to it is in the changelog (a range's appends precede its done files)."""
    owned: dict[int, list[tuple[int, int]]]
    """Ranges the load path owns: the changelog's load jobs and committed files still to load
    (a table switched between deliveries)."""


def delivered_view(
    store: StagingStore, topic: str, dataset: str, changelog: str, load_state: LoadState
) -> DeliveredView:
    """The view of ``dataset.changelog``, fed by ``topic``: one prefix listing of the topic's
    staging names (DESIGN.md §8: never the whole bucket)."""
    names, _ = of_topic((f.name for f in store.list(topic_prefix(topic))), topic)
    listing = parse_listing(names)
    committed = {p: chain.chain_last for (_, p), chain in recover(listing.done).items()}
    waiting = {a.key for a in listing.avro if (a.key.dataset, a.key.table) == (dataset, changelog)}
    to_load: dict[int, list[tuple[int, int]]] = {}
    for done in listing.done:
        if done.key in waiting:
            to_load.setdefault(done.key.partition, []).append((done.first_offset, done.last_offset))
    loads = job_ranges(_changelog_jobs(load_state, dataset, changelog))
    return DeliveredView(committed, union(loads, to_load))
