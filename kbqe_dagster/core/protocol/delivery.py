"""Delivery through the BigQuery Storage Write API, exactly once: what is recorded before and
after each call, and what recovery reads back (docs/architecture.md, "Storage Write delivery").

A table with ``delivery: storage_write`` gets its rows appended, when each staged range
commits, to an application-created COMMITTED stream of its own per (table, topic, partition),
reused across ranges. Offsets *in the stream* are tied to Kafka ranges by three files in the
staging area, all create-only:

1. **Intent** (``...$schemaId.$first.$last.intent``, before the first append of the range to
   the table): the stream, the first row offset in it, the range's exact Kafka offsets and
   its rows per schema id (:class:`Intent`). It pins the range: a retry stages exactly these
   Kafka offsets, hence the same rows in the same order (staging is deterministic), hence the
   same requests at the same stream offsets.
2. **Appends** at their offsets (:func:`append_decision`): ``already_exists`` means an
   earlier attempt (or a zombie of the same intent) wrote that request: skipped;
   ``out_of_range`` means the stream is not where the intent says: the range fails naming
   everything; ``rows_refused`` means the API refused rows of the request, which wrote
   nothing: a **refusal note** (``...$last.$rowOffset.refused``) records them *before* the
   other rows are appended again at the same offset, so a retry, which gets
   ``already_exists`` for that request, knows how many rows it holds.
3. **Done file** (the range's existing commit point): the manifest lists the table's file with
   ``storage_write: {stream, offset, rows}`` (core/protocol/commit.py) and no avro file exists.

Recovery: an intent whose range has no done file is **open**; the next preparation of the
partition restages exactly its range before anything else is planned (:func:`open_intents`),
and the rows already in the stream answer ``already_exists``. The next range of a (table,
partition) continues the stream where the latest committed range left it
(:func:`stream_position`).

**A stream gone** (deleted, garbage-collected, or the local emulator restarted: it forgets
its streams) can never gain a row again, so the table's content says what the range still
owes it. Whenever a range's rows go to a stream it does not continue, a **new** stream (the
first range of a (table, partition), a new schema id, the previous stream gone, or an open
intent whose stream is gone), the sink first asks the table which of the range's Kafka
offsets it holds (one query, only then): their rows were appended by an earlier attempt
through a stream that is gone, and the intent records them as :attr:`Intent.delivered_before`
(not appended again; a retry of the intent skips exactly those, whatever the table holds by
then). An open intent whose stream is gone is replaced: its refusal notes (of the gone
stream's requests) are deleted, then the intent itself, only while it is the version read
(``delete_version``: of two writers, one replaces it; the other finds the new intent, or none
and creates it, create-only), and a new intent is created as above. A crash in between
leaves no intent: the range is planned like any uncommitted one, and its new stream is
checked against the table the same way. Exactly once either way; never a range stuck on a
stream that no longer exists.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.core.protocol.commit import Delivered, Manifest
from kbqe_dagster.core.protocol.naming import (
    FileKey,
    IntentFileName,
    ParsedListing,
    RefusalFileName,
    parse_listing,
)
from kbqe_dagster.core.protocol.offsets import OffsetRange, RangePlan, TopicPartition

INTENT_VERSION = 1

APPENDED = "appended"
ALREADY_EXISTS = "already_exists"
OUT_OF_RANGE = "out_of_range"
ROWS_REFUSED = "rows_refused"


# --- names ---------------------------------------------------------------------------------
def intent_name(rng: OffsetRange, dataset: str, table: str, schema_id: int) -> IntentFileName:
    """The intent of committing ``rng`` (as covered: its done files' bounds) to a table;
    ``schema_id``: the lowest schema id of the table's records in the range."""
    key = FileKey(rng.topic, rng.partition, dataset, table, schema_id, rng.start)
    return IntentFileName(key, rng.last)


# --- the intent ----------------------------------------------------------------------------
@dataclass(frozen=True)
class Intent:
    """What a range will append to one table, recorded before the first append."""

    topic: str
    partition: int
    dataset: str
    table: str
    first: int
    """The range's first Kafka offset (inclusive)."""
    last: int
    """The range's last Kafka offset (inclusive): what its done files will say."""
    stream: str
    """The stream's full name (``projects/.../streams/...``)."""
    offset: int
    """The first row offset of the range's rows in :attr:`stream`."""
    parts: tuple[tuple[int, int], ...]
    """(schema id, rows) in append order: each schema id's rows are one file of the range."""
    delivered_before: tuple[int, ...] = ()
    """Kafka offsets of the range whose rows the table already held when this intent chose a
    new stream (an earlier attempt's appends through a stream that is gone since): not
    appended again, not counted in :attr:`parts`. Empty for every intent that continues a
    stream (module docstring, "A stream gone")."""

    @property
    def rows(self) -> int:
        """Rows staged (the rows the API refuses are later subtracted, see refusal notes)."""
        return sum(n for _, n in self.parts)

    @property
    def range(self) -> OffsetRange:
        return OffsetRange(self.topic, self.partition, self.first, self.last + 1)

    def encode(self) -> bytes:
        doc = {
            "kbqe_intent": INTENT_VERSION,
            "topic": self.topic,
            "partition": self.partition,
            "dataset": self.dataset,
            "table": self.table,
            "first": self.first,
            "last": self.last,
            "stream": self.stream,
            "offset": self.offset,
            "parts": [[schema_id, rows] for schema_id, rows in self.parts],
        }
        if self.delivered_before:  # absent otherwise: such intents read as they always did
            doc["delivered_before"] = list(self.delivered_before)
        return (json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n").encode()


def parse_intent(content: bytes, name: IntentFileName) -> Intent:
    """The intent in file ``name``; :class:`StagingError` naming the file when it is not one
    of this name's range and table."""
    try:
        doc = json.loads(content)
        if doc.get("kbqe_intent") != INTENT_VERSION:
            raise ValueError(
                f"intent version {doc.get('kbqe_intent')!r}, expected {INTENT_VERSION}"
            )
        intent = Intent(
            _typed(doc["topic"], str),
            _typed(doc["partition"], int),
            _typed(doc["dataset"], str),
            _typed(doc["table"], str),
            _typed(doc["first"], int),
            _typed(doc["last"], int),
            _typed(doc["stream"], str),
            _typed(doc["offset"], int),
            tuple((_typed(s, int), _typed(n, int)) for s, n in _typed(doc["parts"], list)),
            tuple(_typed(o, int) for o in _typed(doc.get("delivered_before", []), list)),
        )
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise StagingError(f"intent {name.name} is not readable: {exc}") from exc
    key = name.key
    if (
        intent.topic,
        intent.partition,
        intent.dataset,
        intent.table,
        intent.first,
        intent.last,
    ) != (key.topic, key.partition, key.dataset, key.table, key.first_offset, name.last_offset):
        raise StagingError(
            f"intent {name.name} describes {intent.dataset}.{intent.table} "
            f"{intent.range}, not this file's range and table"
        )
    return intent


def _typed(value: Any, kind: type) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"expected {kind.__name__}, got {value!r}")
    return value


# --- refusal notes -------------------------------------------------------------------------
@dataclass(frozen=True)
class Refusal:
    """Rows the API refused of the request at :attr:`row_offset` (indices into that request,
    with the API's reason); the request's other rows are appended at the same offset."""

    row_offset: int
    refused: tuple[tuple[int, str], ...]
    stream: str = ""
    """The stream of the request (empty in notes written before it was recorded): a note of
    another stream than its intent's is a replaced intent's, stale (module docstring, "A
    stream gone")."""

    def encode(self) -> bytes:
        doc: dict[str, Any] = {
            "kbqe_refusal": 1,
            "row_offset": self.row_offset,
            "refused": [[i, why] for i, why in self.refused],
        }
        if self.stream:
            doc["stream"] = self.stream
        return (json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n").encode()


def parse_refusal(content: bytes, name: RefusalFileName) -> Refusal:
    try:
        doc = json.loads(content)
        refusal = Refusal(
            _typed(doc["row_offset"], int),
            tuple((_typed(i, int), _typed(w, str)) for i, w in doc["refused"]),
            _typed(doc.get("stream", ""), str),
        )
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise StagingError(f"refusal note {name.name} is not readable: {exc}") from exc
    if refusal.row_offset != name.row_offset:
        raise StagingError(f"refusal note {name.name} is of row offset {refusal.row_offset}")
    return refusal


# --- appends -------------------------------------------------------------------------------
@dataclass(frozen=True)
class AppendStep:
    """What the writer does after one request's outcome."""

    advance: int
    """Rows the stream now holds from this request (the next request's offset moves by it)."""
    refused: tuple[tuple[int, str], ...] = ()
    """Rows refused: note them, dead-letter them, append the others at the same offset."""


def append_decision(
    kind: str,
    rows: int,
    message: str,
    row_errors: Sequence[tuple[int, str]],
    where: str,
    noted: Refusal | None = None,
) -> AppendStep:
    """The protocol's answer to a request of ``rows`` rows whose outcome is ``kind``
    (``where`` names the table, stream, topic/partition and offsets for errors; ``noted``: the
    refusal note of this request, if an earlier attempt wrote one)."""
    if kind == APPENDED:
        return AppendStep(rows)
    if kind == ALREADY_EXISTS:
        # Written by an earlier attempt of the same intent (or a zombie of it): the same rows,
        # minus the ones a refusal note says the API refused.
        return AppendStep(rows - len(noted.refused) if noted else rows)
    if kind == OUT_OF_RANGE:
        raise StagingError(
            f"{where}: the stream is not where the intent says ({message}); "
            "another writer or a bug: not appending (nothing of the range is "
            "committed; the intent stays open)"
        )
    if kind == ROWS_REFUSED:
        if not row_errors:
            raise StagingError(
                f"{where}: the API refused the request without naming a row ({message})"
            )
        return AppendStep(0, tuple((i, why or message) for i, why in row_errors))
    raise StagingError(f"{where}: unknown append outcome {kind!r}")


# --- recovery ------------------------------------------------------------------------------
Listing = Iterable[str] | ParsedListing


def _parsed(names: Listing) -> ParsedListing:
    return names if isinstance(names, ParsedListing) else parse_listing(names)


def open_intents(names: Listing) -> tuple[IntentFileName, ...]:
    """Intents whose range has no done file: to roll forward before anything else. An intent
    below every done file of its partition is not open: retention deleted its range's done
    files (it deletes intents first, but a crash may stop it in between), the range is
    committed."""
    listing = _parsed(names)
    committed = {
        (d.key.topic, d.key.partition, d.first_offset, d.last_offset) for d in listing.done
    }
    lowest: dict[tuple[str, int], int] = {}
    for d in listing.done:
        tp = d.key.topic_partition
        lowest[tp] = min(lowest.get(tp, d.first_offset), d.first_offset)
    return tuple(
        i
        for i in listing.intents
        if (i.key.topic, i.key.partition, i.first_offset, i.last_offset) not in committed
        and i.first_offset >= lowest.get(i.key.topic_partition, 0)
    )


def ranges_to_roll_forward(names: Listing) -> tuple[OffsetRange, ...]:
    """The exact Kafka ranges of the open intents, one per range, by partition and offset."""
    found = {
        OffsetRange(i.key.topic, i.key.partition, i.first_offset, i.last_offset + 1)
        for i in open_intents(names)
    }
    return tuple(sorted(found))


PinnedTable = tuple[str, int, int, str, str]
"""(topic, partition, first Kafka offset, dataset, table) of an open intent."""


def pinned_tables(intents: Iterable[IntentFileName]) -> frozenset[PinnedTable]:
    """The tables whose delivery open ``intents`` pin: restaging an open intent's range
    delivers its table through the Storage Write API whatever the pipeline file says now.
    Rows of the range may already be in the stream (the table); a table switched to ``load``
    meanwhile must not stage them as avro files too (loaded, they would be there twice). The
    switch takes effect at the next range, a range boundary."""
    return frozenset(
        (i.key.topic, i.key.partition, i.first_offset, i.key.dataset, i.key.table) for i in intents
    )


def committed_intents(names: Listing) -> tuple[IntentFileName, ...]:
    """Intents whose range is committed: their done files say everything; retention deletes
    them with their refusal notes."""
    open_ = set(open_intents(names))
    return tuple(i for i in _parsed(names).intents if i not in open_)


def delivery_notes_to_delete(names: Listing) -> tuple[str, ...]:
    """The intents of committed ranges and their refusal notes, refusal notes first: what
    retention deletes before any done file (an intent outliving its done files would look
    open to a reader that does not know the rule of :func:`open_intents`)."""
    listing = _parsed(names)
    done_intents = set(committed_intents(listing))
    notes = [r.name for r in listing.refusals if r.intent in done_intents]
    return tuple(sorted(notes)) + tuple(sorted(i.name for i in done_intents))


@dataclass(frozen=True)
class StreamPosition:
    """Where the next range of a (table, topic, partition) appends: :attr:`stream` at row
    :attr:`next_offset`, last written with the file schemas of :attr:`schema_ids`."""

    stream: str
    next_offset: int
    schema_ids: frozenset[int]


def stream_position(
    manifests: Iterable[Manifest], dataset: str, table: str
) -> StreamPosition | None:
    """The stream of ``dataset.table`` as the latest (highest Kafka offsets) of
    ``manifests`` (one partition's committed ranges) that wrote the table left it; None when
    none did (a first range, or retention deleted them) or when that range **loaded** the
    table (it was switched to ``load`` since its last appends): a new stream then, so a
    table switched back never continues a stream from before its loads."""
    best: tuple[int, StreamPosition | None] | None = None
    for manifest in manifests:
        files = [f for f in manifest.files if _table_of(f.avro) == (dataset, table)]
        if not files or (best is not None and manifest.first <= best[0]):
            continue
        delivered = [(f, f.delivered) for f in files if f.delivered is not None]
        if not delivered:
            best = (manifest.first, None)
            continue
        last: Delivered = max((d for _, d in delivered), key=lambda d: d.next_offset)
        schema_ids = frozenset(_schema_of(f.avro) for f, _ in delivered)
        best = (manifest.first, StreamPosition(last.stream, last.next_offset, schema_ids))
    return best[1] if best else None


def _table_of(avro: str) -> tuple[str, str]:
    parts = avro.split(".")
    return parts[-5], parts[-4]


def _schema_of(avro: str) -> int:
    return int(avro.split(".")[-3])


def check_no_overlap(intent: Intent, others: Mapping[str, Intent]) -> None:
    """Refuse an intent whose rows would share stream offsets with another range's open
    intent (``others``: open intent name → intent, same table and partition): two ranges writing
    one stream at once cannot both be right. By construction (intents are per range, open
    ones are rolled forward first, one run owns a topic) it never happens."""
    end = intent.offset + intent.rows
    for name, other in sorted(others.items()):
        if other.stream != intent.stream or (other.first, other.last) == (
            intent.first,
            intent.last,
        ):
            continue
        if other.offset < end and intent.offset < other.offset + other.rows:
            raise StagingError(
                f"{intent.dataset}.{intent.table}: {intent.range} would append rows "
                f"{intent.offset}..{end - 1} of stream {intent.stream}, which intent {name} "
                f"({other.range}) holds; not appending"
            )


# --- planning ------------------------------------------------------------------------------
def plan_with_deliveries(
    plan: RangePlan, roll_forward: Sequence[OffsetRange], *, one_range_per_partition: bool
) -> RangePlan:
    """``plan`` (core/protocol/offsets.py) with the open intents' exact ranges first: a
    partition with an open intent stages that range and nothing else this run (its range
    must be restaged exactly, and the stream offsets of any later range follow from its
    rows). With ``one_range_per_partition`` (a topic that may write a storage_write table)
    every other partition stages only its first planned range: a range's stream offsets are
    known only once the previous range of the partition is committed."""
    rolled: dict[TopicPartition, OffsetRange] = {}
    for rng in sorted(roll_forward):
        rolled.setdefault(rng.topic_partition, rng)
    partitions = []
    for p in plan.partitions:
        tp = (p.topic, p.partition)
        if tp in rolled:
            ranges: tuple[OffsetRange, ...] = (rolled[tp],)
        elif one_range_per_partition:
            ranges = p.ranges[:1]
        else:
            ranges = p.ranges
        dropped = sum(r.size for r in p.ranges) - sum(r.size for r in ranges if r in p.ranges)
        partitions.append(
            replace(p, ranges=ranges, backlog_after_run=p.backlog_after_run + max(dropped, 0))
        )
    kept = {r for p in partitions for r in p.ranges}
    ordered = [r for r in plan.ranges if r in kept]
    ordered = sorted(set(kept) - set(ordered)) + ordered  # roll-forward ranges first
    return RangePlan(tuple(ordered), tuple(partitions))
