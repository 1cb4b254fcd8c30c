"""The delivery sink: per (dataset, table), the staging area (Avro files loaded later, as
today) or the BigQuery Storage Write API (rows appended when the range commits), as the
table's ``delivery`` says (core/record/partitioning.py).

A storage_write table's records stream to a record file in the task's work directory during
the range (memory bounded). At commit, per such table, in this order (core/protocol/
delivery.py; docs/architecture.md, "Storage Write delivery"):

1. the table is made ready (created, new columns added: delivery/tables.py);
2. its **intent** is created, create-only: the stream (the table's stream for this partition,
   continued where the latest committed range left it, or a new one), the first row offset,
   the exact Kafka range and the rows per schema id. A retry of the range finds it and uses
   it: same rows, same offsets. Before a new stream the table is asked which of the range's
   Kafka offsets it holds (rows an earlier attempt appended through a stream that is gone
   since): the intent records them as ``delivered_before`` and they are not appended; an
   open intent whose stream is gone is replaced that way (core/protocol/delivery.py, "A
   stream gone");
3. every request is **appended at its offset**; ``already_exists`` is skipped (an earlier
   attempt wrote it), ``out_of_range`` fails the range naming everything, rows the API
   refuses are noted (refusal note, create-only), dead-lettered with the API's reason, and
   the request's other rows appended at the same offset;

then the range commits through the staging area's done files (the existing commit point),
whose manifest lists each storage_write file with its stream, offset and rows and no object.
Every other table of the range is staged and committed exactly as by the staging area's own
sink: their files and done files are byte-identical to a run without this sink.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.errors import CommitConflictError, StagingError
from kbqe_dagster.core.formats.avro_proto import ProtoRows, proto_schema
from kbqe_dagster.core.protocol.commit import Delivered, avro_file_name, parse_manifest
from kbqe_dagster.core.protocol.delivery import (
    Intent,
    PinnedTable,
    Refusal,
    append_decision,
    check_no_overlap,
    intent_name,
    open_intents,
    parse_intent,
    parse_refusal,
    stream_position,
)
from kbqe_dagster.core.protocol.naming import ParsedListing, of_topic, parse_listing, topic_prefix
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.reasons import Reason
from kbqe_dagster.core.record.dead_letter_record import (
    DEAD_LETTER_SCHEMA,
    DEAD_LETTER_SCHEMA_ID,
    DeadLetter,
)
from kbqe_dagster.core.record.event_time import epoch_day
from kbqe_dagster.core.record.partitioning import Delivery
from kbqe_dagster.delivery.rows import RowsFile, encode_file, records_at, requests
from kbqe_dagster.delivery.tables import TableKeeperSettings
from kbqe_dagster.faults import crash_point
from kbqe_dagster.resources.staging_store import StagingStore
from kbqe_dagster.staging.open_file import OpenFile
from kbqe_dagster.staging.range_sink import RangeTally, SinkOutcome, TableDelivery
from kbqe_dagster.staging.staging_area_sink import StagingAreaSink

if TYPE_CHECKING:
    from kbqe_dagster.resources.bigquery import BigQueryResource

log = logging.getLogger(__name__)

_DEAD_LETTER_PARSED: Any = None


class WriterSettings(Protocol):
    """Picklable settings that build a Storage Write client in the task
    (``resources.bigquery.storage_write.StorageWriteSettings``)."""

    def writer(self) -> Any: ...


class KeeperSettings(Protocol):
    """Picklable settings that build a table keeper in the task (delivery/tables.py)."""

    def keeper(self) -> Any: ...


@dataclass(frozen=True)
class DeliverySinkFactory:
    """The stage context's sink (``StageContext.sink``): a :class:`DeliverySink` per range.
    Picklable; the writer and the table keeper are built in the task, once per process."""

    pipeline: PipelineConfig
    writer: WriterSettings
    tables: KeeperSettings
    pinned: frozenset[PinnedTable] = frozenset()
    """Tables of the open intents the run restages: delivered through the Storage Write API
    whatever the pipeline file says now (core/protocol/delivery.py, ``pinned_tables``)."""

    def __call__(self, rng: OffsetRange, workdir: Path, codec: str) -> DeliverySink:
        return DeliverySink(rng, workdir, codec, self)

    def pinning(self, pinned: frozenset[PinnedTable]) -> DeliverySinkFactory:
        """This factory, also delivering the ``pinned`` tables (staging/range_sink.py)."""
        return replace(self, pinned=self.pinned | pinned)

    def storage_write(self, rng: OffsetRange, dataset: str, table: str) -> bool:
        """Whether range ``rng``'s records for ``dataset.table`` are appended: the table's
        delivery, unless an open intent of this very range pins it (the range was begun
        through the Storage Write API before the table was switched to ``load``)."""
        if (rng.topic, rng.partition, rng.start, dataset, table) in self.pinned:
            return True
        return self.pipeline.delivery(dataset, table, rng.topic) is Delivery.STORAGE_WRITE


_built: dict[int, tuple[Any, Any]] = {}


def _clients(factory: DeliverySinkFactory) -> tuple[Any, Any]:
    """The writer and table keeper of this process for ``factory``'s settings: streams keep
    their connection across the ranges a task stages."""
    key = hash((factory.writer, factory.tables))
    if key not in _built:
        _built[key] = (factory.writer.writer(), factory.tables.keeper())
    return _built[key]


@dataclass
class _StreamFile:
    dataset: str
    table: str
    schema_id: int
    schema: dict
    file: OpenFile


@dataclass
class _Table:
    """One storage_write table of the range at commit."""

    dataset: str
    table: str
    files: list[_StreamFile]
    rows: dict[int, RowsFile] = field(default_factory=dict)  # by schema id
    fresh: bool = False
    """This attempt created the intent: no earlier attempt can have appended its rows."""
    skipped: frozenset[int] = frozenset()
    """Kafka offsets left out of :attr:`rows` (the intent's ``delivered_before``)."""

    @property
    def parts(self) -> tuple[tuple[int, int], ...]:
        return tuple((f.schema_id, self.rows[f.schema_id].rows) for f in self.files)


class DeliverySink:
    """A :class:`~kbqe_dagster.staging.range_sink.RangeSink` routing tables by their delivery."""

    def __init__(
        self, rng: OffsetRange, workdir: Path, codec: str, factory: DeliverySinkFactory
    ) -> None:
        self.rng = rng
        self.workdir = workdir
        self.factory = factory
        self.pipeline = factory.pipeline
        self.area = StagingAreaSink(rng, workdir, codec)
        self.streamed: list[_StreamFile] = []
        self._delivery: dict[tuple[str, str], Delivery] = {}

    @property
    def sync_marker(self) -> bytes | None:
        return self.area.sync_marker

    @sync_marker.setter
    def sync_marker(self, marker: bytes | None) -> None:
        self.area.sync_marker = marker

    def open(self, dataset: str, table: str, schema_id: int, schema: dict) -> OpenFile:
        if not self.factory.storage_write(self.rng, dataset, table):
            return self.area.open(dataset, table, schema_id, schema)
        name = avro_file_name(self.rng, dataset, table, schema_id)
        # Not compressed: read back once by this task, never uploaded.
        record_file = OpenFile(self.workdir, name, schema, "null", None)
        self.streamed.append(_StreamFile(dataset, table, schema_id, schema, record_file))
        return record_file

    def abort(self) -> None:
        self.area.abort()
        for f in self.streamed:
            f.file.close()

    # --- commit ---------------------------------------------------------------------------
    def commit(self, store: StagingStore, covered: OffsetRange, tally: RangeTally) -> SinkOutcome:
        if not self.streamed:
            return self.area.commit(store, covered, tally)
        writer, keeper = _clients(self.factory)
        tables: dict[tuple[str, str], _Table] = {}
        for f in sorted(self.streamed, key=lambda f: (f.dataset, f.table, f.schema_id)):
            f.file.close()
            tables.setdefault((f.dataset, f.table), _Table(f.dataset, f.table, [])).files.append(f)
        listing = self._listing(store, covered)
        dead: list[DeadLetter] = []
        delivered: list[tuple] = []
        reports: list[TableDelivery] = []
        for t in tables.values():
            for f in t.files:
                t.rows[f.schema_id] = encode_file(
                    f.file.path, f.schema, f"{f.dataset}.{f.table} {covered}"
                )
                dead += self._dead_letters(
                    f,
                    t.rows[f.schema_id].unencodable,
                    tally.created_at,
                    "cannot be a Storage Write row",
                )
            layout = self.pipeline.table_layout(t.dataset, t.table)
            for f in t.files:
                keeper.ensure(t.dataset, t.table, f.schema, layout)
        intents = {
            key: self._intent(store, writer, keeper, listing, covered, t)
            for key, t in tables.items()
        }
        for key, t in tables.items():
            try:
                files, report, letters = self._append(
                    store, writer, listing, intents[key], t, tally
                )
            finally:
                # One connection per range and stream: the next range of this (table,
                # partition) may be another process's (StorageWriter.release).
                writer.release(intents[key].stream)
            delivered += files
            reports.append(report)
            dead += letters
        crash_point("storage_write_delivered")
        if dead:
            self._stage_dead_letters(dead)
        tally = RangeTally(
            tally.dead_letters + len(dead), tally.skipped, tally.created_at, tally.kafka_ts_max
        )
        outcome = self.area.commit(store, covered, tally, delivered=delivered)
        by_reason = {str(Reason.STORAGE_WRITE_REFUSED): len(dead)} if dead else {}
        appended = {name.name for name, *_ in delivered}
        files = tuple(f for f in outcome.files if f[0] not in appended)  # files written only
        return SinkOutcome(
            outcome.committed_last,
            files,
            outcome.bytes_by_dataset,
            outcome.conflict,
            by_reason,
            tuple(reports),
        )

    def _listing(self, store: StagingStore, covered: OffsetRange) -> ParsedListing:
        """This partition's staging names (one prefix listing of the topic)."""
        names, _ = of_topic(
            (f.name for f in store.list(topic_prefix(covered.topic))), covered.topic
        )
        listing = parse_listing(names)
        p = covered.partition
        return ParsedListing(
            tuple(a for a in listing.avro if a.key.partition == p),
            tuple(d for d in listing.done if d.key.partition == p),
            (),
            tuple(i for i in listing.intents if i.key.partition == p),
            tuple(r for r in listing.refusals if r.key.partition == p),
        )

    def _intent(
        self,
        store: StagingStore,
        writer: Any,
        keeper: Any,
        listing: ParsedListing,
        covered: OffsetRange,
        t: _Table,
    ) -> Intent:
        """The intent of this range for table ``t``: the one an earlier attempt created, or a
        new one, created now (create-only) before any append. An earlier intent whose stream
        is gone is replaced (core/protocol/delivery.py, "A stream gone")."""
        name = intent_name(covered, t.dataset, t.table, t.files[0].schema_id)
        where = f"{t.dataset}.{t.table} {covered}"
        t.fresh = False
        intent: Intent | None = None
        if name in listing.intents:
            # The version before the content: a replacement in between fails the guarded
            # delete below instead of deleting the replacement.
            version = next((f.version for f in store.list(name.name) if f.name == name.name), None)
            intent = parse_intent(store.read_bytes(name.name), name)
            if writer.stream_state(intent.stream) is None:
                intent = self._drop_gone(store, name, intent, version, where)
            else:
                log.info(
                    "%s: rolling forward intent %s (stream %s, rows from %d)",
                    where,
                    name.name,
                    intent.stream,
                    intent.offset,
                )
        if intent is None:
            stream, offset, new = self._stream_for(store, writer, listing, t)
            present = self._present(keeper, covered, t) if new else frozenset()
            self._skip(t, present, covered)
            intent = Intent(
                covered.topic,
                covered.partition,
                t.dataset,
                t.table,
                covered.start,
                covered.last,
                stream,
                offset,
                t.parts,
                tuple(sorted(present)),
            )
            others = {
                i.name: parse_intent(store.read_bytes(i.name), i)
                for i in open_intents(listing)
                if (i.key.dataset, i.key.table) == (t.dataset, t.table) and i != name
            }
            check_no_overlap(intent, others)
            try:
                store.create_only(name.name, intent.encode())
                t.fresh = True
            except CommitConflictError:
                # A concurrent attempt of this very range created it first: its rows are ours
                # (same range, same staging), so its stream and offset are the ones to use.
                intent = parse_intent(store.read_bytes(name.name), name)
            crash_point("storage_write_intent")
        self._skip(t, frozenset(intent.delivered_before), covered)
        if intent.parts != t.parts:
            raise StagingError(
                f"{where}: intent {name.name} recorded rows per schema id {list(intent.parts)}, "
                f"this attempt staged {list(t.parts)}: staging of the range is not deterministic "
                "(a routing function or transform that changed?); not appending"
            )
        return intent

    @staticmethod
    def _drop_gone(
        store: StagingStore, name: Any, intent: Intent, version: str | None, where: str
    ) -> Intent | None:
        """An open intent whose stream is gone: delete it while it is ``version``, the one
        read, so that this attempt creates a new one (None); or the intent another writer put
        in its place meanwhile."""
        if version is not None and store.delete_version(name.name, version):
            log.warning(
                "%s: stream %s of intent %s is gone; the range gets a new stream "
                "(the table's rows at its Kafka offsets are not appended again)",
                where,
                intent.stream,
                name.name,
            )
            return None
        if not any(f.name == name.name for f in store.list(name.name)):
            return None  # deleted by another writer, which may be creating its new one
        return parse_intent(store.read_bytes(name.name), name)

    def _present(self, keeper: Any, covered: OffsetRange, t: _Table) -> frozenset[int]:
        """The range's Kafka offsets the table holds rows of (asked before a new stream)."""
        e = self.pipeline.enrichment
        layout = self.pipeline.table_layout(t.dataset, t.table)
        present = keeper.offsets_present(
            t.dataset,
            t.table,
            (e.topic_column, e.partition_column, e.offset_column),
            covered.topic,
            covered.partition,
            covered.start,
            covered.last,
            layout.partition_column if layout.options.require_partition_filter else None,
        )
        if present:
            log.warning(
                "%s.%s %s: the table holds rows of %d of the range's offsets already "
                "(appended through a stream that is gone): not appending them again",
                t.dataset,
                t.table,
                covered,
                len(present),
            )
        return frozenset(present)

    def _skip(self, t: _Table, offsets: frozenset[int], covered: OffsetRange) -> None:
        """Encode ``t``'s rows again without the records at ``offsets`` (when they differ
        from what its rows were encoded without)."""
        if offsets == t.skipped:
            return
        column = self.pipeline.enrichment.offset_column
        for f in t.files:
            t.rows[f.schema_id] = encode_file(
                f.file.path, f.schema, f"{f.dataset}.{f.table} {covered}", skip=(column, offsets)
            )
        t.skipped = offsets

    def _stream_for(
        self, store: StagingStore, writer: Any, listing: ParsedListing, t: _Table
    ) -> tuple[str, int, bool]:
        """The table's stream for this partition where the latest committed range left it,
        or a new stream (none yet, a new schema id, or the stream is gone): (stream, first
        row offset, whether it is new)."""
        latest = max(
            (d for d in listing.done if (d.key.dataset, d.key.table) == (t.dataset, t.table)),
            key=lambda d: d.first_offset,
            default=None,
        )
        position = None
        if latest is not None:
            manifest = parse_manifest(store.read_bytes(latest.name), latest.name)
            position = stream_position([manifest] if manifest else [], t.dataset, t.table)
        schema_ids = {f.schema_id for f in t.files}
        if (
            position is not None
            and schema_ids <= position.schema_ids
            and writer.stream_state(position.stream) is not None
        ):
            return position.stream, position.next_offset, False
        stream = writer.create_stream(t.dataset, t.table, "committed")
        log.info("%s.%s[%d]: new stream %s", t.dataset, t.table, self.rng.partition, stream)
        return stream, 0, True

    def _append(
        self,
        store: StagingStore,
        writer: Any,
        listing: ParsedListing,
        intent: Intent,
        t: _Table,
        tally: RangeTally,
    ) -> tuple[list[tuple], TableDelivery, list[DeadLetter]]:
        """Every request of table ``t`` at its offset (module docstring, step 3)."""
        name = intent_name(intent.range, t.dataset, t.table, t.files[0].schema_id)
        noted = self._notes(store, listing, name, intent.stream)
        where = f"{t.dataset}.{t.table} stream {intent.stream}, {intent.range} (intent {name.name})"
        offset = intent.offset
        delivered, letters = [], []
        requests_sent = skipped = appended_bytes = refused_total = 0
        days: Counter[str] = Counter()
        for f in t.files:
            descriptor = proto_schema(f.schema, f"{t.dataset}.{t.table}")
            first = offset
            refused_here: dict[int, str] = {}
            for indices, rows in requests(t.rows[f.schema_id]):
                note = noted.get(offset)
                outcome = writer.append(intent.stream, ProtoRows(descriptor, tuple(rows)), offset)
                requests_sent += 1
                step = append_decision(
                    outcome.kind,
                    len(rows),
                    outcome.message,
                    outcome.row_errors,
                    f"{where} row {offset}",
                    note,
                )
                if step.refused:
                    note = Refusal(offset, step.refused, intent.stream)
                    self._note(store, name.refusal(offset), note)
                    keep = [r for i, r in enumerate(rows) if i not in dict(step.refused)]
                    if keep:
                        retry = writer.append(
                            intent.stream, ProtoRows(descriptor, tuple(keep)), offset
                        )
                        requests_sent += 1
                        again = append_decision(
                            retry.kind,
                            len(keep),
                            retry.message,
                            retry.row_errors,
                            f"{where} row {offset}",
                        )
                        if again.refused:
                            raise StagingError(
                                f"{where} row {offset}: the API refused rows it "
                                "had not refused in the same request before"
                            )
                        step = again
                elif outcome.kind == "already_exists":
                    if t.fresh:
                        # Nobody but this attempt knows the intent it just created: rows at
                        # its offsets are a foreign writer's, not ours to skip.
                        raise StagingError(
                            f"{where} row {offset}: the stream already holds rows at offsets "
                            f"this new intent claims ({outcome.message}); another writer? not "
                            "appending (the intent stays open)"
                        )
                    skipped += 1
                if note is not None:
                    refused_here.update({indices[i]: why for i, why in note.refused})
                appended_bytes += sum(
                    len(r)
                    for i, r in enumerate(rows)
                    if note is None or i not in dict(note.refused)
                )
                offset += step.advance
                crash_point("storage_write_appended")
            letters += self._dead_letters(
                f,
                tuple(sorted(refused_here.items())),
                tally.created_at,
                "refused by the Storage Write API",
            )
            refused_total += len(refused_here) + len(t.rows[f.schema_id].unencodable)
            delivered.append(
                (
                    f.file.name,
                    f.file.records,
                    f.file.iso_days(),
                    f.file.hour_keys(),
                    Delivered(intent.stream, first, offset - first),
                )
            )
            days.update(f.file.iso_days())
        report = TableDelivery(
            t.dataset,
            t.table,
            intent.stream,
            intent.offset,
            offset - intent.offset,
            # Records already in the table (delivered_before) are not this range's appends.
            sum(f.file.records for f in t.files) - len(t.skipped),
            refused_total,
            appended_bytes,
            tuple(sorted(days.items())),
            requests_sent,
            skipped,
        )
        return delivered, report, letters

    @staticmethod
    def _notes(
        store: StagingStore, listing: ParsedListing, name: Any, stream: str
    ) -> dict[int, Refusal]:
        """The refusal notes of intent ``name`` by row offset; notes of another stream (of an
        intent replaced after its stream was gone) are deleted: their offsets mean nothing in
        ``stream``, and a note of this stream may need their names."""
        notes = {}
        for r in listing.refusals:
            if r.intent != name:
                continue
            note = parse_refusal(store.read_bytes(r.name), r)
            if note.stream and note.stream != stream:
                store.delete(r.name)
            else:
                notes[r.row_offset] = note
        return notes

    @staticmethod
    def _note(store: StagingStore, name: Any, note: Refusal) -> None:
        try:
            store.create_only(name.name, note.encode())
        except CommitConflictError:
            pass  # a zombie of the same intent noted the same refusal of the same request

    def _dead_letters(
        self, f: _StreamFile, refused: tuple[tuple[int, str], ...], staged_at: datetime, what: str
    ) -> list[DeadLetter]:
        if not refused:
            return []
        why = dict(refused)
        e = self.pipeline.enrichment
        letters = []
        for index, (record, raw) in sorted(records_at(f.file.path, set(why)).items()):
            topic, partition, offset = (
                record.get(e.topic_column),
                record.get(e.partition_column),
                record.get(e.offset_column),
            )
            stamp = record.get(e.timestamp_column) if e.timestamp_column else None
            letters.append(
                DeadLetter(
                    reason=str(Reason.STORAGE_WRITE_REFUSED),
                    error=(
                        f"{topic}[{partition}] offset {offset}: {f.dataset}.{f.table}: {what}: "
                        f"{why[index]}"
                    ),
                    topic=str(topic),
                    partition=int(partition),
                    offset=int(offset),
                    kafka_timestamp_ms=int(stamp.timestamp() * 1000) if stamp else None,
                    schema_id=f.schema_id,
                    raw_key=record.get(e.key_column) if e.key_column else None,
                    raw_value=raw,
                    headers=[],
                    staged_at=staged_at,
                )
            )
        return letters

    def _stage_dead_letters(self, letters: list[DeadLetter]) -> None:
        from io import BytesIO

        from fastavro import parse_schema, schemaless_writer

        global _DEAD_LETTER_PARSED
        if _DEAD_LETTER_PARSED is None:
            _DEAD_LETTER_PARSED = parse_schema(DEAD_LETTER_SCHEMA)
        dl = self.pipeline.dead_letter
        target = self.area.opened(dl.dataset, dl.table, DEAD_LETTER_SCHEMA_ID) or self.area.open(
            dl.dataset, dl.table, DEAD_LETTER_SCHEMA_ID, DEAD_LETTER_SCHEMA
        )
        for letter in letters:
            body = BytesIO()
            schemaless_writer(body, _DEAD_LETTER_PARSED, letter.to_record())
            target.append(body.getvalue(), b"", epoch_day(letter.staged_at.date()))


def delivery_sink(
    pipeline: PipelineConfig, writer: WriterSettings | None, tables: KeeperSettings | None
) -> Callable[..., Any] | None:
    """The stage context's sink for ``pipeline``: a :class:`DeliverySinkFactory` whenever the
    settings to reach the API are given, else None (the staging area's own sink). A pipeline
    without any storage_write table gets the factory too: its tables go to the staging area
    exactly as by the staging area's sink (same files, same calls), and an open intent left
    by a table since switched to ``load`` is still delivered as it says (``pinning``)."""
    if writer is None or tables is None:
        if not _any_storage_write(pipeline):
            return None
        raise StagingError(
            f"{pipeline.source}: tables are delivered by storage_write but the stage run has no "
            "Storage Write settings (resources/environment.py builds them)"
        )
    return DeliverySinkFactory(pipeline, writer, tables)


def stage_run_sink(
    pipeline: PipelineConfig, bigquery: BigQueryResource
) -> Callable[..., Any] | None:
    """The sink of a stage run's context, from its BigQuery resource: :func:`delivery_sink`
    with the resource's Storage Write settings (none without a project) and the settings the
    tables are created and updated with."""
    load = pipeline.load
    return delivery_sink(
        pipeline,
        bigquery.storage_write_settings() if bigquery.project else None,
        TableKeeperSettings.of(bigquery, load.partition_expiration_days, load.create_datasets),
    )


def _any_storage_write(pipeline: PipelineConfig) -> bool:
    return (
        pipeline.tables.any_storage_write
        or any(t.delivery is Delivery.STORAGE_WRITE for t in pipeline.topics)
        or any(p.prototype.delivery is Delivery.STORAGE_WRITE for p in pipeline.topic_patterns)
    )
