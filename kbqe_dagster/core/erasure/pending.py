"""When an erasure request is complete, and where its later passes look.

**The rule.** A request must leave no row of its subject in its tables, now *and later*:
rows of the subject may still be on their way — staged and not loaded yet, in a stage run in
flight, or in Kafka not staged yet. At arrival a request records, for every partition of
every topic feeding its tables, a :class:`Watch`: the partition's *loaded* position then
(``start``) and its Kafka **high watermark** then (``end``). It stays pending, its DELETE
re-run at every erasure batch, until the loaded position of every watched partition has
reached ``end``; the pass that sees this is its last, and it is complete.

Why the high watermark and not the staged position (the done files' end) the issue
suggested: the staged position misses the range a stage run has in flight when the request
arrives (it commits after, above the recorded position) and the messages not staged yet,
both of which may hold the subject's rows; the high watermark covers every message Kafka held
when the request arrived. The cost is the same (one watermarks request per feeding topic).
Messages produced *after* the request are new data about the subject: stopping them is the
producer's business (docs/operations.md, "Erasure").

**Loaded position** of a partition (:func:`loaded_positions`): the end of its contiguous
chain of done files, lowered to the first offset of any avro file still in the staging area
(committed and waiting for a load, in a load job, quarantined, or uncommitted: in flight).
A file delivered through the Storage Write API has no avro file: it is in BigQuery at commit.
The erasure runs in the load pool, so no load runs while it reads this and deletes.

**Where later passes look** (:func:`follow_up_restriction`): after the first pass (which
reads the whole table: a subject's rows may be in any day), rows of the subject can only
arrive from the watched offset windows; their done files' manifests list each file's event
days (hours), so a later pass deletes in those partitions only — in none, skipping the table,
when no file of the window wrote it. The dead-letter table is partitioned on the staging date:
a pass looks from the day before the window's first commit to its last. A keyed current
table is written by its MERGE, not by dated files: always whole. A window whose manifest is
missing (retention, a Scala-era empty done file) is not restricted.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import Any

from kbqe_dagster.core.erasure.requests import ErasureRequest
from kbqe_dagster.core.erasure.statements import PartitionRestriction
from kbqe_dagster.core.erasure.targets import Target
from kbqe_dagster.core.errors import KbqeError
from kbqe_dagster.core.protocol.commit import Manifest
from kbqe_dagster.core.protocol.naming import AvroFileName, DoneFileName, parse_listing, parse_name
from kbqe_dagster.core.protocol.offsets import recover

TopicPartition = tuple[str, int]
STATE_VERSION = 1


class ErasureStateError(KbqeError):
    """The erasure state file cannot be read."""


@dataclass(frozen=True, order=True)
class Watch:
    """Offsets ``start`` ≤ o < ``end`` of one topic-partition: not loaded when the request
    arrived, so possibly holding rows of its subject that a later pass must erase."""

    topic: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class PendingRequest:
    """A request between its arrival and its last pass (kept in ``_kbqe/erasure_state.json``:
    the subject is needed in clear until then, next to the staged files that hold it too)."""

    request: ErasureRequest
    received_at: str
    watches: tuple[Watch, ...]
    passes: int = 0
    """Passes applied so far (the first reads whole tables)."""
    rows_deleted: int = 0
    """Rows of its subject deleted by its passes so far."""


@dataclass(frozen=True)
class ErasureState:
    pending: tuple[PendingRequest, ...] = ()
    requests_read: Mapping[int, int] = field(default_factory=dict)
    """Requests topic partition → the next offset to read (what the erasure job consumed)."""

    def encode(self) -> bytes:
        return json.dumps(
            {
                "version": STATE_VERSION,
                "requests_read": {str(p): o for p, o in sorted(self.requests_read.items())},
                "pending": [
                    {
                        "request_id": p.request.request_id,
                        "subject": p.request.subject,
                        "tables": list(p.request.tables),
                        "source": p.request.source,
                        "received_at": p.received_at,
                        "watches": [[w.topic, w.partition, w.start, w.end] for w in p.watches],
                        "passes": p.passes,
                        "rows_deleted": p.rows_deleted,
                    }
                    for p in self.pending
                ],
            },
            indent=1,
        ).encode()


def decode_state(content: bytes, where: str) -> ErasureState:
    try:
        doc = json.loads(content)
        if doc.get("version") != STATE_VERSION:
            raise ValueError(f"version {doc.get('version')!r}, expected {STATE_VERSION}")
        pending = tuple(
            PendingRequest(
                ErasureRequest(p["request_id"], p["subject"], tuple(p["tables"]), p["source"]),
                p["received_at"],
                tuple(Watch(str(t), int(n), int(a), int(b)) for t, n, a, b in p["watches"]),
                int(p["passes"]),
                int(p["rows_deleted"]),
            )
            for p in doc["pending"]
        )
        read = {int(p): int(o) for p, o in doc.get("requests_read", {}).items()}
    except (ValueError, TypeError, KeyError, AttributeError) as error:
        raise ErasureStateError(f"{where}: not an erasure state: {error}") from error
    return ErasureState(pending, read)


def loaded_positions(names: Iterable[str]) -> dict[TopicPartition, int]:
    """Per topic-partition of the staging area, the offset below which every staged message
    is in BigQuery (module docstring)."""
    listing = parse_listing(names)
    out = {tp: chain.resume_offset for tp, chain in recover(listing).items()}
    for avro in listing.avro:
        tp = avro.key.topic_partition
        out[tp] = min(out.get(tp, avro.key.first_offset), avro.key.first_offset)
    return out


def watches_at_arrival(
    watermarks: Mapping[TopicPartition, tuple[int, int]],
    loaded: Mapping[TopicPartition, int],
) -> tuple[Watch, ...]:
    """What a request arriving now waits for: each partition's offsets from its loaded
    position (else its low watermark) to its high watermark, when that is not empty."""
    out = []
    for (topic, partition), (low, high) in sorted(watermarks.items()):
        start = loaded.get((topic, partition), low)
        if start < high:
            out.append(Watch(topic, partition, start, high))
    return tuple(out)


def outstanding(
    watches: Iterable[Watch], loaded: Mapping[TopicPartition, int]
) -> tuple[Watch, ...]:
    """The watches whose offsets are not all loaded yet: the request is complete when none
    is left after a pass."""
    return tuple(w for w in watches if loaded.get((w.topic, w.partition), w.start) < w.end)


def window_done_files(names: Iterable[str], watches: Sequence[Watch]) -> tuple[str, ...]:
    """Done files of committed ranges that overlap a watch: the manifests a later pass
    reads to restrict its DELETEs."""
    by_tp: dict[TopicPartition, list[Watch]] = {}
    for w in watches:
        by_tp.setdefault((w.topic, w.partition), []).append(w)
    out = []
    for name in names:
        done = parse_name(name)
        if not isinstance(done, DoneFileName):
            continue
        for w in by_tp.get(done.key.topic_partition, ()):
            if done.first_offset < w.end and done.last_offset >= w.start:
                out.append(name)
                break
    return tuple(sorted(out))


def follow_up_restriction(
    target: Target, manifests: Mapping[str, Manifest | None]
) -> PartitionRestriction | None:
    """The partitions of ``target`` a later pass must look at, given the manifests of the
    watched windows (:func:`window_done_files`); None: the whole table. A restriction with
    no values means no file of the windows wrote the table: nothing to erase there."""
    if target.partition_column is None or any(m is None for m in manifests.values()):
        return None
    found: set[str] = set()
    commits: set[date] = set()
    for manifest in manifests.values():
        assert manifest is not None
        for staged in manifest.files:
            avro = parse_name(staged.avro)
            if not isinstance(avro, AvroFileName) or avro.key.table_id != (
                target.dataset,
                target.table,
            ):
                continue
            if target.dead_letter:
                commits.add(datetime.fromisoformat(manifest.created_at).date())
            elif target.hourly:
                if staged.records and not staged.hours:
                    return None
                found.update(hour for hour, _ in staged.hours)
            else:
                if staged.records and not staged.days:
                    return None
                found.update(day for day, _ in staged.days)
    column = target.partition_column
    if target.dead_letter:
        if not commits:
            return PartitionRestriction(column, "between", ("", ""))  # nothing arrived
        low = (min(commits) - timedelta(days=1)).isoformat()
        return PartitionRestriction(column, "between", (low, max(commits).isoformat()))
    return PartitionRestriction(column, "hour" if target.hourly else "day", tuple(sorted(found)))


def nothing_to_look_at(restriction: PartitionRestriction | None) -> bool:
    """A restriction that leaves no partition: the pass skips the table."""
    if restriction is None:
        return False
    if restriction.kind == "between":
        return restriction.values == ("", "")
    return not restriction.values


def merge_restrictions(
    restrictions: Iterable[PartitionRestriction | None],
) -> PartitionRestriction | None:
    """One restriction covering several requests' of one table (one DELETE per table per
    batch): None (whole table) as soon as one is None."""
    items = list(restrictions)
    if not items or any(r is None for r in items):
        return None
    real = [r for r in items if r is not None and not nothing_to_look_at(r)]
    if not real:
        return items[0]
    first = real[0]
    if first.kind == "between":
        lows = [r.values[0] for r in real]
        highs = [r.values[1] for r in real]
        return replace(first, values=(min(lows), max(highs)))
    return replace(first, values=tuple(sorted({v for r in real for v in r.values})))


def state_after_pass(
    state: ErasureState,
    applied: Mapping[str, int],
    loaded: Mapping[TopicPartition, int],
) -> tuple[ErasureState, tuple[PendingRequest, ...]]:
    """``state`` after a pass that deleted ``applied[request_id]`` rows per pending request:
    the requests whose watches are all loaded now leave (returned, complete); the others
    count one more pass. A pass ran after what it read of the loaded positions, so a request
    completes only on a pass that started with every watched offset loaded."""
    still: list[PendingRequest] = []
    done: list[PendingRequest] = []
    for p in state.pending:
        if p.request.request_id not in applied:
            still.append(p)
            continue
        updated = replace(
            p, passes=p.passes + 1, rows_deleted=p.rows_deleted + applied[p.request.request_id]
        )
        (still if outstanding(p.watches, loaded) else done).append(updated)
    return replace(state, pending=tuple(still)), tuple(done)


def describe_watches(watches: Iterable[Watch]) -> list[dict[str, Any]]:
    return [
        {"topic": w.topic, "partition": w.partition, "from": w.start, "until": w.end}
        for w in watches
    ]
