"""Executor side of a stage run: stage exactly one offset range and commit it.

Per message: Confluent frame → schema by id → probe (validate the body to its exact length,
decode only the fields routing and event time need) → route → event date → append the encoded
enrichment prefix plus the raw body to the avro file of (table, schema id). No record is
decoded and re-encoded (DESIGN.md §5). Files stream to local temp files, so memory stays
bounded whatever the range size.

Commit protocol (DESIGN.md §3): upload every avro file of the range create-only, then create
its done files create-only, each carrying the range manifest, which pins the version of every
uploaded object; the first done file created is the commit point. An upload refused because
the name is taken means another writer owns the range: this attempt stops uncommitted. A crash before it leaves only orphans (deleted by the next run's preparation);
a crash after it is rolled forward. A range that stages nothing commits through its range
marker, so the offsets still advance.

Bad input follows the topic's policy: ``dead_letter`` (a dead-letter file of the range,
committed with it), ``skip`` (counted), ``fail`` (the range stops with an error naming
topic/partition/offset, and nothing of it is committed).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from io import BytesIO
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_writer

from kbqe_dagster.core.formats.avro_names import record_full_name
from kbqe_dagster.core.protocol.commit import avro_file_name, plan_range_commit
from kbqe_dagster.core.config.pipeline import BadInputPolicy, PipelineConfig, TopicConfig
from kbqe_dagster.core.record.dead_letters import (
    DEAD_LETTER_SCHEMA,
    DEAD_LETTER_SCHEMA_ID,
    DeadLetter,
)
from kbqe_dagster.core.record.enrichment import (
    EnrichmentEncoder,
    event_hour_suffix,
    extended_schema,
    with_event_hour,
)
from kbqe_dagster.core.errors import (
    BadInputError,
    CommitConflictError,
    NonAvroSchemaError,
    OversizedMessageError,
    StageRangeFailed,
    UnknownSchemaIdError,
)
from kbqe_dagster.core.record.event_time import (
    epoch_day,
    event_date,
    event_date_and_hour,
    from_epoch_day,
)
from kbqe_dagster.core.formats.source_format import SourceFormat
from kbqe_dagster.core.protocol.naming import AvroFileName
from kbqe_dagster.core.protocol.offsets import OffsetRange, StartPolicy
from kbqe_dagster.core.record.partitioning import hour_key
from kbqe_dagster.core.record.routing import Router, RoutingInput
from kbqe_dagster.core.record.wire import HEADER_SIZE, parse_frame
from kbqe_dagster.faults import crash_point
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.kafka.range_reader import RangeReader
from kbqe_dagster.resources.kafka.native_reader import (
    native_consumer_switch_on,
    native_range_reader,
)
from kbqe_dagster.resources.schema_registry import RegistrySettings, SchemaLookup
from kbqe_dagster.resources.staging_store import StagingLocation, StagingStore
from kbqe_dagster.staging.avro_container import AvroContainerWriter
from kbqe_dagster.staging.native_kernel import NATIVE, PYTHON, NativeStaging, kernel_switch_on
from kbqe_dagster.staging.probe import RecordProbe

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StageContext:
    """Everything a stage task needs; picklable, shipped to every Spark task."""

    kafka: KafkaSettings
    registry: RegistrySettings
    staging: StagingLocation
    pipeline: PipelineConfig
    topic_name: str
    native_kernel: bool = field(default_factory=kernel_switch_on)
    """Whether the run's tasks may use the native stage kernel: ``KBQE_STAGE_KERNEL`` where the
    run starts (staging/native_kernel.py). Tasks without the extension take the Python path."""
    native_consumer: bool = field(default_factory=native_consumer_switch_on)
    """Whether the kernel's ranges are read by its native consumer (resources/kafka/native_reader.py):
    ``KBQE_NATIVE_CONSUMER`` where the run starts."""

    @property
    def topic(self) -> TopicConfig:
        return self.pipeline.topic(self.topic_name)

    @property
    def start_policy(self) -> StartPolicy:
        return self.topic.staging.start_offset


@dataclass(frozen=True)
class RangeResult:
    topic: str
    partition: int
    start: int
    planned_last: int
    committed_last: int | None  # None: nothing was read, nothing committed
    messages: int
    records: int
    files: tuple[tuple[str, int], ...]  # (avro name, records), dead-letter files included
    bytes_written: int
    dead_letters: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    conflict: bool = False  # another writer committed this range first
    seconds: float = 0.0
    bytes_by_dataset: dict[str, int] = field(default_factory=dict)  # file bytes per dataset
    tombstones: int = 0  # keyed topics: null values counted, not staged (keyed/stage.py)
    stage_path: str = "python"  # "native" when the native kernel staged (staging/native_kernel.py)
    kernel_handbacks: dict[str, int] = field(default_factory=dict)  # messages it handed back, by why
    reader: str = "confluent-kafka"  # "native" when the kernel's own consumer read the range


@dataclass
class _Decoder:
    """What one schema id needs: the probe and the extended schema of its files."""

    probe: RecordProbe
    schema: dict
    full_name: str | None


class _OpenFile:
    def __init__(self, directory: Path, name: AvroFileName, schema: dict, codec: str,
                 sync_marker: bytes | None = None) -> None:  # fmt: skip
        self.name = name
        self.path = directory / name.name
        self._handle = open(self.path, "wb")
        self.writer = AvroContainerWriter(self._handle, schema, codec=codec, sync_marker=sync_marker)
        # Event day (days since 1970, as encoded) → records, for the manifest; ISO dates are
        # made once per day at commit, not once per record.
        self.days: Counter[int] = Counter()
        # Event hour (hours since 1970 UTC) → records, for an HOUR table's file only.
        self.hours: Counter[int] = Counter()

    @property
    def records(self) -> int:
        return self.writer.records

    def append(self, prefix: bytes, body: bytes, day: int, hour: int | None = None) -> None:
        self.writer.append(prefix, body)
        self.days[day] += 1
        if hour is not None:
            self.hours[hour] += 1

    def append_many(self, records: bytes, ends: Any, days: list[tuple[int, int]]) -> None:
        """Records staged by the native kernel: back to back, ``ends`` their end offsets,
        ``days`` (event day, records) pairs."""
        self.writer.append_many(records, ends)
        for day, n in days:
            self.days[day] += n

    def iso_days(self) -> dict[str, int]:
        return {from_epoch_day(day).isoformat(): n for day, n in sorted(self.days.items())}

    def hour_keys(self) -> dict[str, int]:
        return {hour_key(hour): n for hour, n in sorted(self.hours.items())}

    def close(self) -> int:
        self.writer.close()
        self._handle.close()
        return self.path.stat().st_size


class RangeStager:
    """Stages one range; split from :func:`stage_range` so tests can drive it step by step."""

    native_kernel = True
    """Whether the native kernel may do this stager's per-message work (staging/native_kernel.py).
    A subclass that changes that work (keyed and JSON topics) sets it to False until the
    kernel implements its variant."""
    sync_marker: bytes | None = None
    """The files' Avro sync marker; None draws a random one per file (tests fix it)."""

    def __init__(self, ctx: StageContext, rng: OffsetRange, workdir: Path) -> None:
        self.ctx = ctx
        self.rng = rng
        self.topic = ctx.topic
        self.workdir = workdir
        self.pipeline = ctx.pipeline
        self.codec = str(self.topic.staging.file_codec)
        self.max_size = self.topic.staging.max_message_size
        self.router: Router = ctx.pipeline.router(self.topic.name)
        self.enrichment = self.pipeline.enrichment
        self.encoder = EnrichmentEncoder(self.enrichment, rng.topic, rng.partition)
        self.lookup = SchemaLookup(ctx.registry)
        self.decoders: dict[int, Any] = {}  # schema id → its decoder or its BadInputError
        self.files: dict[tuple[str, str, int], _OpenFile] = {}
        self.messages = 0
        self.dead_letters: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.staged_at = datetime.now(timezone.utc)
        # Looked up once: _stage runs per message (bench/bench_stage.py measures it).
        self._route = self.router.route
        self._encode = self.encoder.encode
        self._event_time = self.topic.event_time
        self._with_headers = self.enrichment.headers_column is not None
        # A static route that is allowed is every message's destination; one that is not is
        # still asked per message, so its error names each offset.
        static = self.router.config.static_destination
        self._static = static if static is not None and self.router.allowed.allows(*static) else None
        # Confluent header (magic byte + schema id) → (schema id, decoder). A header is valid
        # or not by its 5 bytes alone, so a known one skips parse_frame and the decoder
        # lookup. Only headers whose schema resolved are kept: one entry per good schema id.
        self._by_header: dict[bytes, tuple[int, _Decoder]] = {}
        # HOUR tables (core/record/partitioning.py): their records also get the event hour column.
        # A pipeline without any pays one attribute test per record.
        self._tables = self.pipeline.tables
        self._any_hourly = self._tables.any_hourly
        self._hourly: dict[tuple[str, str], bool] = {}
        self._hour_suffixes: dict[int, bytes] = {}

    # --- per message ------------------------------------------------------------------------
    def add(self, msg: Any) -> None:
        self.messages += 1
        try:
            self._stage(msg)
        except BadInputError as error:
            self._bad_input(msg, error)

    def _stage(self, msg: Any) -> None:
        schema_id, decoder, body, fields = self._decode(msg)
        self._place(msg, fields, body, schema_id, decoder.schema, decoder.full_name)

    def _value(self, msg: Any) -> bytes:
        """The message value, or the bad input of a null or oversized one."""
        value = msg.value()
        if value is None:
            parse_frame(value)  # raises TombstoneError
        if len(value) > self.max_size:
            raise OversizedMessageError(
                f"{len(value)} bytes exceeds max_message_size {self.max_size}"
            )
        return value

    def _decode(self, msg: Any) -> tuple[int, _Decoder, bytes, dict]:
        """Frame → schema id and decoder → the validated body and the fields it yields."""
        value = self._value(msg)
        known = self._by_header.get(value[:HEADER_SIZE])
        if known is None:
            known = self._resolve(value)
        schema_id, decoder = known
        body = value[HEADER_SIZE:]  # bytes: the probe would copy a memoryview
        return schema_id, decoder, body, decoder.probe.probe(body)

    def _place(self, msg: Any, fields: dict, body: bytes, schema_id: int, schema: dict,
               full_name: str | None, destination: Any = None) -> None:
        """Route (unless ``destination`` is given), date, prefix and append one record's
        body: the steps every format shares once its body and fields are known."""
        offset = msg.offset()
        key = msg.key()
        destination = destination or self._static or self._route(
            RoutingInput(self.rng.topic, self.rng.partition, offset, full_name, fields, key)
        )
        prefix, day, hour = self._prefix(msg, fields, offset, key, destination)
        self._file(destination.dataset, destination.table, schema_id, schema).append(
            prefix, body, day, hour
        )

    def _prefix(self, msg: Any, fields: dict, offset: int, key: bytes | None,
                destination: Any) -> tuple[bytes, int, int | None]:
        """The encoded enrichment prefix, event day and (for an hourly destination table)
        event hour of one record whose routing and event time fields are ``fields``
        (``offset`` and ``key``: the message's, read once by the caller on the hot path);
        raises the event-time bad input. Apart from appending, so a message with several
        destinations builds all of them before appending any."""
        ts_type, ts = msg.timestamp()
        timestamp_ms = ts if ts_type != 0 else None
        hour = None
        if self._any_hourly and self._is_hourly(destination.dataset, destination.table):
            event_day, hour = event_date_and_hour(self._event_time, fields, timestamp_ms)
            day = epoch_day(event_day)
        else:
            day = epoch_day(event_date(self._event_time, fields, timestamp_ms))
        headers = msg.headers() if self._with_headers else None
        prefix = self._encode(day, offset, timestamp_ms, key, headers)
        if hour is not None:
            prefix += self._hour_suffix(hour)
        return prefix, day, hour

    def _is_hourly(self, dataset: str, table: str) -> bool:
        known = self._hourly.get((dataset, table))
        if known is None:
            if len(self._hourly) >= 4096:  # routed names come from data: keep it bounded
                self._hourly.clear()
            known = self._hourly[(dataset, table)] = self._tables.is_hourly(dataset, table)
        return known

    def _hour_suffix(self, hour: int) -> bytes:
        suffix = self._hour_suffixes.get(hour)
        if suffix is None:
            if len(self._hour_suffixes) >= 4096:  # hours cluster, garbage does not
                self._hour_suffixes.clear()
            suffix = self._hour_suffixes[hour] = event_hour_suffix(hour)
        return suffix

    def _resolve(self, value: bytes) -> tuple[int, _Decoder]:
        """Parse a header not seen yet and find its decoder; raises the frame's or the
        schema's BadInputError, and remembers only a header that resolved."""
        frame = parse_frame(value)
        decoder = self._decoder(frame.schema_id)
        known = self._by_header[value[:HEADER_SIZE]] = (frame.schema_id, decoder)
        return known

    def _decoder(self, schema_id: int) -> Any:
        """The decoder of ``schema_id``, or its bad input, each made once per range
        (:meth:`_new_decoder`); SchemaLookup re-asks a missing id after its negative TTL."""
        known = self.decoders.get(schema_id)
        if isinstance(known, BadInputError):
            raise type(known)(str(known))
        if known is not None:
            return known
        try:
            decoder = self._new_decoder(schema_id)
        except BadInputError as error:
            self.decoders[schema_id] = error
            raise
        self.decoders[schema_id] = decoder
        return decoder

    def _new_decoder(self, schema_id: int) -> Any:
        """What staging needs of a registry schema id not seen yet; raises its bad input.
        Formats of other registry schema types (json_schema, protobuf) override it."""
        return self._make_decoder(self._registered(schema_id, "AVRO", NonAvroSchemaError).schema)

    def _registered(self, schema_id: int, schema_type: str, wrong_type: type[BadInputError],
                    needs: str = "") -> Any:  # fmt: skip
        """The registry's schema of ``schema_id``, which must be a ``schema_type`` schema
        (``wrong_type`` otherwise, its message ending with ``needs``)."""
        registered = self.lookup.get(schema_id)
        if registered is None:
            raise UnknownSchemaIdError(f"schema id {schema_id} is not in the registry")
        if registered.schema_type != schema_type:
            raise wrong_type(f"schema id {schema_id} is a {registered.schema_type} schema{needs}")
        return registered

    def _make_decoder(self, schema: dict) -> _Decoder:
        """The probe and file schema of one writer schema (keyed topics build their own)."""
        return _Decoder(
            RecordProbe(schema, self.topic.required_fields),
            extended_schema(schema, self.enrichment),
            record_full_name(schema),
        )

    def _file(self, dataset: str, table: str, schema_id: int, schema: dict) -> _OpenFile:
        key = (dataset, table, schema_id)
        open_file = self.files.get(key)
        if open_file is None:
            name = avro_file_name(self.rng, dataset, table, schema_id)
            if self._any_hourly and self._is_hourly(dataset, table):
                schema = with_event_hour(schema, self.enrichment)
            open_file = self.files[key] = _OpenFile(self.workdir, name, schema, self.codec,
                                                    self.sync_marker)
        return open_file

    def _bad_input(self, msg: Any, error: BadInputError) -> None:
        where = f"{msg.topic()}[{msg.partition()}] offset {msg.offset()}"
        policy = self.topic.on_bad_input
        if policy is BadInputPolicy.FAIL:
            raise StageRangeFailed(f"{where}: {error.reason}: {error}") from error
        if policy is BadInputPolicy.SKIP:
            self.skipped[str(error.reason)] += 1
            return
        self.dead_letters[str(error.reason)] += 1
        value = msg.value()
        ts_type, ts = msg.timestamp()
        letter = DeadLetter(
            reason=str(error.reason),
            error=f"{where}: {error}",
            topic=msg.topic(),
            partition=msg.partition(),
            offset=msg.offset(),
            kafka_timestamp_ms=ts if ts_type != 0 else None,
            schema_id=self._framed_schema_id(value),
            raw_key=msg.key(),
            raw_value=value,
            headers=[(k, v) for k, v in (msg.headers() or [])],
            staged_at=self.staged_at,
        )
        body = BytesIO()
        schemaless_writer(body, _DEAD_LETTER_PARSED, letter.to_record())
        dl = self.pipeline.dead_letter
        self._file(dl.dataset, dl.table, DEAD_LETTER_SCHEMA_ID, DEAD_LETTER_SCHEMA).append(
            body.getvalue(), b"", epoch_day(self.staged_at.date())
        )

    @staticmethod
    def _framed_schema_id(value: bytes | None) -> int | None:
        """The Confluent frame's schema id, for the dead letter (unframed formats: None)."""
        return int.from_bytes(value[1:5], "big") if value and len(value) >= 5 else None

    # --- commit -------------------------------------------------------------------------------
    def commit(self, store: StagingStore, position: int,
               kafka_ts_max: int | None = None) -> RangeResult:  # fmt: skip
        """Upload the files and commit ``[start, position)``; nothing when nothing was read.
        ``kafka_ts_max``: the Kafka time the read reached, recorded for completeness."""
        if position <= self.rng.start:
            self._discard()
            return self._result(None, (), {})
        covered = OffsetRange(self.rng.topic, self.rng.partition, self.rng.start, position)
        staged = []
        versions: dict[str, str] = {}
        bytes_by_dataset: Counter[str] = Counter()
        for (dataset, _, _), open_file in self.files.items():
            bytes_by_dataset[dataset] += open_file.close()
        for open_file in self.files.values():
            try:
                versions[open_file.name.name] = store.create_only_file(
                    open_file.path, open_file.name.name
                )
            except CommitConflictError as error:
                # Another writer's object holds this name: a concurrent writer of the same
                # range, or (after the range was loaded and its files deleted) a zombie's
                # re-upload. Either way this attempt does not own the range: it stops before
                # its commit point. What it uploaded is an orphan if nobody commits the range
                # (the next run deletes it) or a leftover under a committed name (the load
                # step deletes it, never loads it: the commit pins other versions).
                log.warning("%s: not committing: %s", covered, error)
                return self._result(None, (), bytes_by_dataset, conflict=True)
            staged.append((open_file.name, open_file.records))
            crash_point("avro_uploaded")
        commit = plan_range_commit(
            covered, staged,
            dead_letters=sum(self.dead_letters.values()),
            skipped=sum(self.skipped.values()),
            created_at=self.staged_at,
            days={f.name.name: f.iso_days() for f in self.files.values()},
            hours={f.name.name: f.hour_keys() for f in self.files.values() if f.hours},
            versions=versions,
            kafka_ts_max=kafka_ts_max,
        )
        conflict = False
        for done in commit.done_files:
            try:
                store.create_only(done.name, commit.content)
            except CommitConflictError:
                # Only the first done file can conflict: this writer is a zombie that lost
                # the race for the commit point. The winner's manifest pins the winner's
                # avro objects, so whatever this writer uploaded is never loaded.
                log.warning("%s: already committed by another writer; not committing", covered)
                conflict = True
                break
            crash_point("done_created")
        files = tuple((name.name, n) for name, n in staged)
        return self._result(covered.last, files, bytes_by_dataset, conflict)

    def _discard(self) -> None:
        for open_file in self.files.values():
            open_file.close()

    def _result(self, last, files, bytes_by_dataset, conflict=False) -> RangeResult:
        dl = self.pipeline.dead_letter
        records = sum(
            f.records for (dataset, table, _), f in self.files.items()
            if (dataset, table) != (dl.dataset, dl.table)
        )
        return RangeResult(
            self.rng.topic, self.rng.partition, self.rng.start, self.rng.last, last,
            self.messages, records, files, sum(bytes_by_dataset.values()),
            dict(self.dead_letters), dict(self.skipped), conflict,
            bytes_by_dataset=dict(bytes_by_dataset),
        )


_DEAD_LETTER_PARSED = parse_schema(DEAD_LETTER_SCHEMA)


WORKDIR_PREFIX = "kbqe-stage-"


def remove_abandoned_workdirs(root: Path | None = None) -> int:
    """Delete the temp dirs of stage tasks whose process is gone (killed tasks never reach
    their cleanup); the pid is part of each dir's name. Returns how many were removed."""
    root = Path(root or tempfile.gettempdir())
    removed = 0
    for path in root.glob(f"{WORKDIR_PREFIX}*"):
        pid = path.name[len(WORKDIR_PREFIX):].split("-", 1)[0]
        if pid.isdigit() and int(pid) != os.getpid() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)
            removed += 1
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stager_class(ctx: StageContext) -> type[RangeStager]:
    """Keyed topics, unframed formats and transformed topics (or with several destinations)
    are rooms of their own, built on this one (JSON topics apply their transforms themselves)."""
    if ctx.topic.keyed is not None:
        from kbqe_dagster.keyed.stage import KeyedRangeStager

        return KeyedRangeStager
    if ctx.topic.decoder is not None:
        from kbqe_dagster.formats.decoder_stage import DecoderRangeStager

        return DecoderRangeStager
    if ctx.topic.value_schema is not None:
        from kbqe_dagster.formats.json_stage import JsonRangeStager

        return JsonRangeStager
    if ctx.topic.format is SourceFormat.JSON_SCHEMA:
        from kbqe_dagster.formats.json_schema_stage import JsonSchemaRangeStager

        return JsonSchemaRangeStager
    if ctx.topic.format is SourceFormat.PROTOBUF:
        from kbqe_dagster.formats.protobuf_stage import ProtobufRangeStager

        return ProtobufRangeStager
    if ctx.topic.transforms or ctx.topic.destinations:
        from kbqe_dagster.formats.transform_stage import TransformRangeStager

        return TransformRangeStager
    return RangeStager


def stage_messages(stager: RangeStager, reader: RangeReader, native: NativeStaging | None) -> None:
    """Every message of the range through the native kernel, or one by one through the
    Python path (the reference; also what the kernel hands back)."""
    if native is not None:
        native.stage(reader)
        return
    for batch in reader.batches():
        for msg in batch:
            if reader.accept(msg):
                stager.add(msg)
            elif reader.finished:
                break


def _range_reader(ctx: StageContext, rng: OffsetRange, native: bool) -> RangeReader:
    """The kernel's native consumer when it can read the range, else confluent-kafka's."""
    if native and ctx.native_consumer:
        reader = native_range_reader(ctx.kafka, rng.topic, rng.partition, rng.start, rng.end_exclusive)
        if reader is not None:
            return reader
    return RangeReader(ctx.kafka, rng.topic, rng.partition, rng.start, rng.end_exclusive)


def stage_range(ctx: StageContext, rng: OffsetRange) -> RangeResult:
    """Stage and commit ``rng`` (runs inside a Spark task)."""
    started = time.monotonic()
    remove_abandoned_workdirs()
    workdir = Path(tempfile.mkdtemp(prefix=f"{WORKDIR_PREFIX}{os.getpid()}-{rng.partition}-{rng.start}-"))
    try:
        stager = _stager_class(ctx)(ctx, rng, workdir)
        native = NativeStaging.for_stager(stager)
        reader = _range_reader(ctx, rng, native is not None)
        stage_messages(stager, reader, native)
        result = stager.commit(ctx.staging.open(), reader.covered, reader.kafka_ts_max)
        reader_name = NATIVE if getattr(reader, "native", False) else "confluent-kafka"
        log.info("%s: %d message(s), %d record(s), %d file(s) in %.1fs (%s stage path, %s reader)",
                 rng, result.messages, result.records, len(result.files),
                 time.monotonic() - started, NATIVE if native else PYTHON, reader_name)
        return replace(result, seconds=time.monotonic() - started,
                       stage_path=NATIVE if native else PYTHON,
                       kernel_handbacks=dict(native.handbacks) if native else {},
                       reader=reader_name)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
