"""The per-message stage path, the reference (DESIGN.md §5, §10): :class:`RangeStager` stages
one offset range, message by message, into its sink (staging/range_sink.py), and is the base class
every extension of the stage engine builds on (formats/, keyed/, through the seam of
kbqe_dagster/stager_registry.py).

Per message: Confluent frame → schema by id → probe (validate the body to its exact length,
decode only the fields routing and event time need) → route → event date → append the encoded
enrichment prefix plus the raw body to the record file of (table, schema id). No record is
decoded and re-encoded.

Bad input follows the topic's policy: ``dead_letter`` (a dead-letter file of the range,
committed with it), ``skip`` (counted), ``fail`` (the range stops with an error naming
topic/partition/offset, and nothing of it is committed).

**The interface for extensions and the native kernel host** (everything else is private):

- steps to call: :meth:`~RangeStager.checked_value` (the null and oversized rules),
  :meth:`~RangeStager.frame` (Confluent header → schema id and decoder, made once per id),
  :meth:`~RangeStager.known_frame` (the same, only if already resolved),
  :meth:`~RangeStager.decode` (frame and probe), :meth:`~RangeStager.place` (route, date,
  prefix, append), :meth:`~RangeStager.prefix` (route-free: the enrichment prefix and event
  day/hour), :meth:`~RangeStager.open_file` (the record file of a destination and schema id),
  :meth:`~RangeStager.registered_schema` (the registry's schema of an id, of a given type);
  attributes ``route`` (the router's ``route``), ``static_destination``, ``lookup``,
  ``topic``, ``router``, ``enrichment``, ``rng``, ``max_size``, ``messages``;
- hooks to override: :meth:`~RangeStager.stage` (one message's work),
  :meth:`~RangeStager.new_decoder` (what a schema id stages with; other registry schema
  types), :meth:`~RangeStager.make_decoder` (what an Avro writer schema stages with),
  :meth:`~RangeStager.framed_schema_id` (the dead letter's schema id),
  :meth:`~RangeStager.range_result` (extra counts in the result), ``native_kernel`` (whether
  the kernel may do the per-message work), ``native_driver`` (optional: the
  :class:`~kbqe_dagster.staging.native_kernel.NativeStaging` subclass that drives the kernel
  for this stager's own variant of that work, as ``format: json`` and ``format: raw`` have),
  :meth:`~RangeStager.file_enrichment` (the enrichment columns of its files).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from io import BytesIO
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_writer

from kbqe_dagster.core.config.pipeline import BadInputPolicy
from kbqe_dagster.core.errors import (
    BadInputError,
    NonAvroSchemaError,
    OversizedMessageError,
    StageRangeFailed,
    StagingError,
    UnknownSchemaIdError,
)
from kbqe_dagster.core.formats.avro_names import record_full_name
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.dead_letter_record import (
    DEAD_LETTER_SCHEMA,
    DEAD_LETTER_SCHEMA_ID,
    DeadLetter,
)
from kbqe_dagster.core.record.enrichment import (
    EnrichmentConfig,
    EnrichmentEncoder,
    event_hour_suffix,
    extended_schema,
    with_event_hour,
)
from kbqe_dagster.core.record.event_time import epoch_day, event_date, event_date_and_hour
from kbqe_dagster.core.record.routing import Destination, Router, RoutingInput
from kbqe_dagster.core.record.wire import HEADER_SIZE, parse_frame
from kbqe_dagster.resources.schema_registry import SchemaLookup
from kbqe_dagster.resources.staging_store import StagingStore
from kbqe_dagster.staging.context import RangeResult, StageContext
from kbqe_dagster.staging.probe.record_probe import RecordProbe
from kbqe_dagster.staging.range_sink import RangeSink, RangeTally, RecordFile
from kbqe_dagster.staging.staging_area_sink import StagingAreaSink


@dataclass
class Decoder:
    """What one schema id stages with: the probe and the extended schema of its files.
    Extensions subclass it to carry more (keyed/stage.py, formats/transform_stage.py)."""

    probe: RecordProbe
    schema: dict
    full_name: str | None


class RangeStager:
    """Stages one range (see the module docstring for the interface extensions use)."""

    native_kernel = True
    """Whether the native kernel may do this stager's per-message work (staging/native_kernel.py).
    A subclass that changes that work (keyed and JSON topics) sets it to False until the
    kernel implements its variant."""

    native_driver: Any = None
    """Hook: a kernel driver of the stager's own, for a format whose per-message work the
    append kernel does its own way (formats/json_stage.py, formats/raw_stage.py): a
    ``NativeStaging`` subclass whose ``for_range(stager, extension)`` returns the driver of a
    range or None for the Python path. None: the append kernel's driver, under its rules
    (``NativeStaging.append_rules_allow``: :attr:`native_kernel` on, no ``function``
    routing; HOUR tables only with a kernel that writes their event hour)."""

    def __init__(self, ctx: StageContext, rng: OffsetRange, workdir: Path) -> None:
        self.ctx = ctx
        self.rng = rng
        self.topic = ctx.topic
        self.workdir = workdir
        self.pipeline = ctx.pipeline
        self.codec = str(self.topic.staging.file_codec)
        self.max_size = self.topic.staging.max_message_size
        self.router: Router = ctx.pipeline.router(self.topic.name)
        self.enrichment = self.file_enrichment(self.pipeline.enrichment)
        self.encoder = EnrichmentEncoder(self.enrichment, rng.topic, rng.partition)
        self.lookup = SchemaLookup(ctx.registry)
        self.decoders: dict[int, Any] = {}  # schema id → its decoder or its BadInputError
        self.sink: RangeSink = (ctx.sink or StagingAreaSink)(rng, workdir, self.codec)
        self.files: dict[tuple[str, str, int], RecordFile] = {}  # the sink's, by key
        self.messages = 0
        self.dead_letters: Counter[str] = Counter()
        self.skipped: Counter[str] = Counter()
        self.staged_at = datetime.now(UTC)
        # Looked up once: stage() runs per message (bench/bench_stage.py measures it).
        self.route = self.router.route
        self._encode = self.encoder.encode
        self._event_time = self.topic.event_time
        self._with_headers = self.enrichment.headers_column is not None
        # A static route that is allowed is every message's destination; one that is not is
        # still asked per message, so its error names each offset.
        static = self.router.config.static_destination
        self.static_destination: Destination | None = (
            static if static is not None and self.router.allowed.allows(*static) else None
        )
        # Confluent header (magic byte + schema id) → (schema id, decoder). A header is valid
        # or not by its 5 bytes alone, so a known one skips parse_frame and the decoder
        # lookup. Only headers whose schema resolved are kept: one entry per good schema id.
        self._by_header: dict[bytes, tuple[int, Any]] = {}
        # HOUR tables (core/record/partitioning.py): their records also get the event hour column.
        # A pipeline without any pays one attribute test per record.
        self._tables = self.pipeline.tables
        self._any_hourly = self._tables.any_hourly
        self._hourly: dict[tuple[str, str], bool] = {}
        self._hour_suffixes: dict[int, bytes] = {}

    def file_enrichment(self, enrichment: EnrichmentConfig) -> EnrichmentConfig:
        """Hook: the enrichment columns of this stager's files, from the pipeline's
        (``enrichment``, returned as is here; raw archives turn the key and headers on)."""
        return enrichment

    @property
    def sync_marker(self) -> bytes | None:
        """The files' Avro sync marker; None draws a random one per file (tests fix it)."""
        return getattr(self.sink, "sync_marker", None)

    @sync_marker.setter
    def sync_marker(self, marker: bytes | None) -> None:
        self.sink.sync_marker = marker  # type: ignore[attr-defined]

    # --- per message ------------------------------------------------------------------------
    def add(self, msg: Any) -> None:
        """Stage one message, or apply the topic's bad-input policy to it."""
        self.messages += 1
        try:
            self.stage(msg)
        except BadInputError as error:
            self._bad_input(msg, error)

    def stage(self, msg: Any) -> None:
        """Hook: one message's work; raises its BadInputError. The Avro path: decode, place."""
        schema_id, decoder, body, fields = self.decode(msg)
        self.place(msg, fields, body, schema_id, decoder.schema, decoder.full_name)

    def checked_value(self, msg: Any) -> bytes:
        """The message value, or the bad input of a null or oversized one."""
        value = msg.value()
        if value is None:
            parse_frame(value)  # raises TombstoneError
        if len(value) > self.max_size:
            raise OversizedMessageError(
                f"{len(value)} bytes exceeds max_message_size {self.max_size}"
            )
        return value

    def frame(self, value: bytes) -> tuple[int, Any]:
        """The schema id and decoder of a Confluent-framed ``value``; raises the frame's or
        the schema's BadInputError. Each header is parsed and resolved once per range."""
        known = self._by_header.get(value[:HEADER_SIZE])
        return known if known is not None else self._resolve(value)

    def known_frame(self, header: bytes) -> tuple[int, Any] | None:
        """What :meth:`frame` returned for a value starting with ``header``, or None when no
        such value resolved yet (never asks the registry)."""
        return self._by_header.get(header)

    def decode(self, msg: Any) -> tuple[int, Decoder, bytes, dict]:
        """Frame → schema id and decoder → the validated body and the fields it yields."""
        value = self.checked_value(msg)
        # frame(), inlined: this runs per message on the Python path.
        known = self._by_header.get(value[:HEADER_SIZE])
        if known is None:
            known = self._resolve(value)
        schema_id, decoder = known
        body = value[HEADER_SIZE:]  # bytes: the probe would copy a memoryview
        return schema_id, decoder, body, decoder.probe.probe(body)

    def place(
        self,
        msg: Any,
        fields: dict,
        body: bytes,
        schema_id: int,
        schema: dict,
        full_name: str | None,
        destination: Any = None,
    ) -> None:
        """Route (unless ``destination`` is given), date, prefix and append one record's
        body: the steps every format shares once its body and fields are known."""
        offset = msg.offset()
        key = msg.key()
        destination = (
            destination
            or self.static_destination
            or self.route(
                RoutingInput(self.rng.topic, self.rng.partition, offset, full_name, fields, key)
            )
        )
        prefix, day, hour = self.prefix(msg, fields, offset, key, destination)
        self.open_file(destination.dataset, destination.table, schema_id, schema).append(
            prefix, body, day, hour
        )

    def prefix(
        self, msg: Any, fields: dict, offset: int, key: bytes | None, destination: Any
    ) -> tuple[bytes, int, int | None]:
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

    def open_file(self, dataset: str, table: str, schema_id: int, schema: dict) -> RecordFile:
        """The record file of (``dataset``, ``table``, ``schema_id``), opened in the sink the
        first time (an HOUR table's file schema gains the event hour column)."""
        key = (dataset, table, schema_id)
        open_file = self.files.get(key)
        if open_file is None:
            if self._any_hourly and self._is_hourly(dataset, table):
                schema = with_event_hour(schema, self.enrichment)
            open_file = self.files[key] = self.sink.open(dataset, table, schema_id, schema)
        return open_file

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

    # --- schemas ----------------------------------------------------------------------------
    def _resolve(self, value: bytes) -> tuple[int, Any]:
        """Parse a header not seen yet and find its decoder; raises the frame's or the
        schema's BadInputError, and remembers only a header that resolved."""
        frame = parse_frame(value)
        decoder = self._decoder(frame.schema_id)
        known = self._by_header[value[:HEADER_SIZE]] = (frame.schema_id, decoder)
        return known

    def _decoder(self, schema_id: int) -> Any:
        """The decoder of ``schema_id``, or its bad input, each made once per range
        (:meth:`new_decoder`); SchemaLookup re-asks a missing id after its negative TTL."""
        known = self.decoders.get(schema_id)
        if isinstance(known, BadInputError):
            raise type(known)(str(known))
        if known is not None:
            return known
        try:
            decoder = self.new_decoder(schema_id)
        except BadInputError as error:
            self.decoders[schema_id] = error
            raise
        self.decoders[schema_id] = decoder
        return decoder

    def new_decoder(self, schema_id: int) -> Any:
        """Hook: what staging needs of a registry schema id not seen yet; raises its bad
        input. Formats of other registry schema types (json_schema, protobuf) override it."""
        return self.make_decoder(
            self.registered_schema(schema_id, "AVRO", NonAvroSchemaError).schema
        )

    def registered_schema(self, schema_id: int, schema_type: str, wrong_type: type[BadInputError],
                          needs: str = "") -> Any:  # fmt: skip
        """The registry's schema of ``schema_id``, which must be a ``schema_type`` schema
        (``wrong_type`` otherwise, its message ending with ``needs``)."""
        registered = self.lookup.get(schema_id)
        if registered is None:
            raise UnknownSchemaIdError(f"schema id {schema_id} is not in the registry")
        if registered.schema_type != schema_type:
            raise wrong_type(f"schema id {schema_id} is a {registered.schema_type} schema{needs}")
        return registered

    def make_decoder(self, schema: dict) -> Decoder:
        """Hook: the probe and file schema of one Avro writer schema (keyed topics build
        their own)."""
        return Decoder(
            RecordProbe(schema, self.topic.required_fields),
            extended_schema(schema, self.enrichment),
            record_full_name(schema),
        )

    # --- bad input --------------------------------------------------------------------------
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
            schema_id=self.framed_schema_id(value),
            raw_key=msg.key(),
            raw_value=value,
            headers=[(k, v) for k, v in (msg.headers() or [])],
            staged_at=self.staged_at,
        )
        body = BytesIO()
        schemaless_writer(body, _DEAD_LETTER_PARSED, letter.to_record())
        dl = self.pipeline.dead_letter
        self.open_file(dl.dataset, dl.table, DEAD_LETTER_SCHEMA_ID, DEAD_LETTER_SCHEMA).append(
            body.getvalue(), b"", epoch_day(self.staged_at.date())
        )

    @staticmethod
    def framed_schema_id(value: bytes | None) -> int | None:
        """Hook: the Confluent frame's schema id, for the dead letter (unframed formats: None)."""
        return int.from_bytes(value[1:5], "big") if value and len(value) >= 5 else None

    # --- commit -----------------------------------------------------------------------------
    def commit(self, store: StagingStore, position: int,
               kafka_ts_max: int | None = None) -> RangeResult:  # fmt: skip
        """Commit ``[start, position)`` through the sink; nothing when nothing was read.
        ``kafka_ts_max``: the Kafka time the read reached, recorded for completeness."""
        if position <= self.rng.start:
            self.discard()
            return self.range_result(None, (), {})
        covered = OffsetRange(self.rng.topic, self.rng.partition, self.rng.start, position)
        tally = RangeTally(
            sum(self.dead_letters.values()),
            sum(self.skipped.values()),
            self.staged_at,
            kafka_ts_max,
        )
        outcome = self.sink.commit(store, covered, tally)
        self.dead_letters.update(outcome.dead_letters)
        result = self.range_result(
            outcome.committed_last, outcome.files, outcome.bytes_by_dataset, outcome.conflict
        )
        return replace(result, delivered=outcome.delivered) if outcome.delivered else result

    def discard(self) -> None:
        """Drop what was staged (the sink aborts): nothing of the range is committed."""
        self.sink.abort()

    def range_result(self, last, files, bytes_by_dataset, conflict=False) -> RangeResult:
        """Hook: the range's result (``last``: the last committed offset, None if none)."""
        dl = self.pipeline.dead_letter
        records = sum(
            f.records
            for (dataset, table, _), f in self.files.items()
            if (dataset, table) != (dl.dataset, dl.table)
        )
        return RangeResult(
            self.rng.topic,
            self.rng.partition,
            self.rng.start,
            self.rng.last,
            last,
            self.messages,
            records,
            files,
            sum(bytes_by_dataset.values()),
            dict(self.dead_letters),
            dict(self.skipped),
            conflict,
            bytes_by_dataset=dict(bytes_by_dataset),
        )


_DEAD_LETTER_PARSED = parse_schema(DEAD_LETTER_SCHEMA)


def chosen_stager(ctx: StageContext) -> type[RangeStager]:
    """The stager of the context's topic, as its builder's chooser (``ctx.stager_for``) names it."""
    if ctx.stager_for is None:
        raise StagingError(
            f"{ctx.topic_name}: the stage context names no stager chooser; build it with "
            "kbqe_dagster.stager_registry.stage_context (or pass stager_for)"
        )
    chosen: type[RangeStager] = ctx.stager_for(ctx.topic)
    return chosen
