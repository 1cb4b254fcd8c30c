"""The native stage kernel's seat on the append path: the Python path is the reference.

The optional extension ``kbqe_dagster_kernel`` (the Rust crate in ``kernel/``, built by
``make install`` when ``cargo`` is on the PATH) does a stage task's per-message work for whole
``consume()`` batches. It stops at the first message it is not certain about and returns its
index. When it stopped at a schema or a route it has not been given, :class:`NativeStaging`
teaches it what the Python path's own sources say (the registry schema, the router's
destination) and gives it the message again; otherwise, or when they refuse, it gives that
message to the Python path (:meth:`RangeStager.add <kbqe_dagster.staging.stager.RangeStager.add>`)
exactly as a run without the kernel would, and resumes the kernel after it. Dead letters, their reasons, counts, file names and file bytes are the
Python path's by construction: the kernel never decides that a message is bad, and its records
reach the same container writer in the same order (docs/architecture.md, "Two stage paths").

A stager whose per-message work differs from the Avro path's names its own driver, a subclass
of :class:`NativeStaging`, as ``native_driver`` (``format: json`` and ``format: raw`` do:
formats/json_stage.py, formats/raw_stage.py; keyed change topics: keyed/native_stage.py); its
:meth:`~NativeStaging.for_range` may decline a range.

HOUR-partitioned tables (core/record/partitioning.py): when a file slot's table is HOUR, the
driver tells the kernel so (``StageKernel.hourly_slot``) and the kernel writes the event hour
column after the enrichment prefix and counts the slot's records per hour, as the Python path's
``RangeStager.prefix`` and ``open_file`` do; an hour it cannot read exactly (a naive time
placed by a zone id, say) is handed back like any uncertain event time. A kernel built before
that routine has no ``hourly_slot``: topics that may write an HOUR table then take the Python
path (:meth:`NativeStaging.append_rules_allow`).

What stays on the Python path for good: other formats (stagers of their own, which set
``native_kernel = False`` and name no driver), ``function`` routing, and a schema whose types
or wanted fields the kernel does not implement (:meth:`StageKernel.add_schema` refuses it; its
messages are handed back one by one). ``KBQE_STAGE_KERNEL=off`` forces the Python path
everywhere.

A format whose per-message work is not the append path's may bring a kernel routine of its
own: its stager's ``native_driver`` names the driver :meth:`NativeStaging.for_stager` returns
instead (``format: raw``: ``RawKernel`` driven by formats/raw_stage.py, this class's loop).
"""

from __future__ import annotations

import gc
import json
import logging
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from fastavro import parse_schema
from fastavro.read import LOGICAL_READERS

from kbqe_dagster.core.errors import BadInputError, KbqeError
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.enrichment import with_event_hour
from kbqe_dagster.core.record.event_time import DateRule, epoch_day
from kbqe_dagster.core.record.routing import RoutingInput, RoutingMode
from kbqe_dagster.core.record.wire import HEADER_SIZE

log = logging.getLogger(__name__)

SWITCH = "KBQE_STAGE_KERNEL"
"""``off`` forces the Python stage path (``on``/unset: the kernel when it is built)."""

PYTHON, NATIVE = "python", "native"
"""The ``stage_path`` values of a range result and of the stage run's metadata."""

try:  # the optional extension; the Python path needs nothing of it
    import kbqe_dagster_kernel as _extension
except ImportError as error:  # pragma: no cover - depends on the build
    _extension = None
    _IMPORT_ERROR = str(error)
else:
    _IMPORT_ERROR = ""


class StageKernelError(KbqeError):
    """The native kernel failed (a panic or an internal error): the range stops uncommitted."""


@dataclass(frozen=True)
class KernelStatus:
    """Which stage path a stage task takes, and why."""

    available: bool
    detail: str

    @property
    def path(self) -> str:
        return NATIVE if self.available else PYTHON

    def __str__(self) -> str:
        return f"{self.path} ({self.detail})"


def kernel_built() -> bool:
    """Whether the extension is installed in this interpreter, whatever the switch says."""
    return _extension is not None


def extension() -> Any | None:
    """The extension module, for a routine of it used outside a stage task (Storage Write
    rows, delivery/rows.py): None when it is not built or ``KBQE_STAGE_KERNEL`` is off."""
    return _extension if kernel_switch_on() else None


def kernel_switch_on() -> bool:
    """The ``KBQE_STAGE_KERNEL`` switch where a stage run starts (its driver): the run's
    tasks follow it, whatever their own environment (``StageContext.native_kernel``)."""
    return os.environ.get(SWITCH, "").strip().lower() not in ("off", "0", "false", "no")


def kernel_status() -> KernelStatus:
    """Whether stage tasks of this process can use the native kernel (``kbqe health``)."""
    if not kernel_switch_on():
        return KernelStatus(False, f"{SWITCH}=off")
    if _extension is None:
        return KernelStatus(False, "native stage kernel not built: staging uses the Python path"
                                   + (f" ({_IMPORT_ERROR})" if _IMPORT_ERROR else ""))  # fmt: skip
    return KernelStatus(True, f"kbqe_dagster_kernel {_extension.__version__}")


_UNIT_CODES = {"auto": "auto", "s": "s", "ms": "ms", "us": "us", "ns": "ns"}


class TransformingStager(Protocol):
    """What a kernel driver of a format with transforms reads of its stager, whatever the
    format: the range, the transforms, the fields they read and the HMAC keys of its masks.
    Each driver's own Protocol adds what its format needs."""

    rng: OffsetRange
    transforms: tuple[Any, ...]
    wanted: tuple[str, ...]
    hmac_keys: Mapping[int, bytes]


class NativeStaging:
    """Drives one range's :class:`RangeStager` through the kernel (see the module docstring)."""

    def __init__(self, stager: Any, extension: Any) -> None:
        self.stager = stager
        topic = stager.topic
        wanted = self.wanted_paths(stager)
        routing = stager.router.config
        route_slots = None
        if routing.mode is RoutingMode.FIELDS and stager.static_destination is None:
            route_slots = (wanted.index(routing.dataset_field), wanted.index(routing.table_field))
        event = topic.event_time
        enrichment = stager.enrichment
        self.kernel = extension.StageKernel(
            stager.rng.topic, stager.rng.partition, stager.max_size, wanted,
            [wanted.index(path) for path in event.fields], route_slots,
            _UNIT_CODES[str(event.epoch_unit)], event.date_rule is DateRule.UTC,
            event.kafka_timestamp_fallback, epoch_day(event.min_date), epoch_day(event.max_date),
            enrichment.timestamp_column is not None, enrichment.key_column is not None,
            enrichment.headers_column is not None, sorted(LOGICAL_READERS),
        )  # fmt: skip
        self.wanted = wanted  # the kernel's value slots, by path
        self._mode = routing.mode
        self._dataset_field, self._table_field = routing.dataset_field, routing.table_field
        self._offered: dict[bytes, str | None] = {}  # header → None (taken) or why refused
        self._slots: list[
            tuple[str, str, int, dict]
        ] = []  # file slot → (dataset, table, id, schema)
        self._slot_of: dict[tuple[str, str, int], int] = {}
        self._hourly_slots: set[int] = set()  # slots of HOUR tables (their drains count hours)
        self.handbacks: Counter[str] = Counter()
        self.handed_back_records: Counter[str] = Counter()
        """Hand-backs the Python path then staged (neither dead-lettered nor skipped), by the
        kernel's reason and, for the JSON kernels, its ``stop_detail`` (``reason:detail``): what
        the kernel's share of staged records loses, and to which rule."""

    @staticmethod
    def wanted_paths(stager: Any) -> list[str]:
        """Hook: the field paths the kernel reads of every record (its values by slot):
        routing's, then event time's. A driver whose records need more appends them."""
        return list(stager.topic.required_fields)

    @classmethod
    def for_stager(cls, stager: Any) -> NativeStaging | None:
        """The kernel's driver for ``stager``, or None when this range takes the Python path:
        the stager's own ``native_driver`` (a subclass, for a format whose per-message work
        differs: formats/json_stage.py, formats/raw_stage.py) or this class, asked by
        :meth:`for_range`."""
        if not stager.ctx.native_kernel or _extension is None:
            return None
        driver: type[NativeStaging] = getattr(stager, "native_driver", None) or cls
        if driver.KERNEL_METHOD and not hasattr(_extension.StageKernel, driver.KERNEL_METHOD):
            return None  # a kernel built before this driver's routine (`make install` rebuilds it)
        return driver.for_range(stager, _extension)

    KERNEL_METHOD: str | None = None
    """The ``StageKernel`` method a driver's format needs: a kernel built before it lacks the
    method, and :meth:`for_stager` then takes the Python path."""

    @classmethod
    def for_range(cls, stager: Any, extension: Any) -> NativeStaging | None:
        """Hook: the driver of ``stager``'s range, or None when it takes the Python path. Here,
        the append kernel's rules (:meth:`append_rules_allow`)."""
        return cls(stager, extension) if cls.append_rules_allow(stager) else None

    @staticmethod
    def append_rules_allow(stager: Any) -> bool:
        """Whether the append kernel's loop may stage ``stager``'s range: the stager allows it
        (``native_kernel``), routing is not a Python ``function``, and, when a record may go
        to an HOUR table, the kernel writes the event hour column (``hourly_slot``)."""
        if not getattr(stager, "native_kernel", False):
            return False
        if stager.router.config.mode is RoutingMode.FUNCTION:
            return False
        # A kernel built before HOUR tables writes DAY tables' layout only; an HOUR table's
        # records carry the event hour column too (core/record/partitioning.py).
        return not stager.pipeline.topic_may_write_hourly(stager.topic.name) or hasattr(
            getattr(_extension, "StageKernel", None), "hourly_slot"
        )

    # --- the loop ---------------------------------------------------------------------------
    def stage(self, reader: Any) -> None:
        """Stage every message ``reader`` (a :class:`~kbqe_dagster.resources.kafka.range_reader.RangeReader`)
        yields; the position it reaches is what the stager commits."""
        kernel, stager, end = self.kernel, self.stager, reader.end_exclusive
        # Each batch is thousands of fresh message objects that refcounting frees; the cyclic
        # collector would scan them again and again for nothing.
        collecting = gc.isenabled()
        gc.disable()
        try:
            self._stage(reader, kernel, stager, end)
        finally:
            if collecting:
                gc.enable()
        stager.messages += kernel.messages

    def _stage(self, reader: Any, kernel: Any, stager: Any, end: int) -> None:
        for batch in reader.batches():
            i, n = 0, len(batch)
            # A native consumer's batch (resources/kafka/native_reader.py) is staged from librdkafka's
            # messages; a confluent-kafka batch from its Python objects.
            raw = getattr(batch, "raw", None)
            run = kernel.run if raw is None else kernel.run_native
            source = batch if raw is None else raw
            taught: tuple[int, set[str]] = (-1, set())  # a message and what it taught the kernel
            while i < n:
                try:
                    stop = run(source, i, end)
                except BaseException as error:  # a Rust panic arrives as pyo3's PanicException
                    if type(error).__name__ != "PanicException":
                        raise
                    raise self._failure(batch, i, error) from error
                if stop > i:
                    reader.staged_through(batch[stop - 1].offset())
                    self._drain()
                if stop >= n:
                    break
                msg = batch[stop]
                reason = kernel.stopped
                unknown_route = kernel.unknown_route
                if taught[0] != stop:
                    taught = (stop, set())
                # Each thing at most once per message (a message may teach a schema, then a
                # route), so a kernel that stops again for the same reason hands it back.
                if reason not in taught[1] and self._teach(msg, reason, unknown_route):
                    taught[1].add(reason)
                    i = stop  # the kernel stages it now, as it stages the next ones
                    continue
                self.handbacks[reason] += 1
                i = stop + 1
                if not reader.accept(msg):
                    if reader.finished:
                        break
                    continue
                refused = stager.dead_letters.total() + stager.skipped.total()
                stager.add(msg)
                if stager.dead_letters.total() + stager.skipped.total() == refused:
                    # (A kernel built before ``stop_detail`` gives the reason alone.)
                    detail = (
                        getattr(kernel, "stop_detail", "") if reason == "json_uncertain" else ""
                    )
                    self.handed_back_records[f"{reason}:{detail}" if detail else reason] += 1
            if reader.finished:
                break

    def _failure(self, batch: list, i: int, error: BaseException) -> StageKernelError:
        where = batch[i] if i < len(batch) else None
        at = (
            f"{where.topic()}[{where.partition()}] near offset {where.offset()}"
            if where
            else "a batch"
        )
        return StageKernelError(f"native stage kernel failed at {at}: {error!r}; the range is not "
                                f"committed (set {SWITCH}=off to stage with the Python path)")  # fmt: skip

    def _drain(self) -> None:
        files, hourly = self.stager.open_file, self._hourly_slots
        # (slot, records, ends, days, hours); a kernel built before HOUR tables gives no hours.
        for slot, records, ends, days, *hours in self.kernel.drain():
            dataset, table, schema_id, schema = self._slots[slot]
            files(dataset, table, schema_id, schema).append_many(
                records, memoryview(ends).cast("Q"), days, hours[0] if slot in hourly else None
            )

    # --- what the kernel is taught ----------------------------------------------------------
    def _teach(self, msg: Any, reason: str, unknown_route: tuple[bytes, bytes] | None) -> bool:
        """Teach the kernel the schema or the route it stopped at *before* the Python path
        stages the message, so the kernel stages it and the Python path never has to compile
        its probe for a schema the kernel handles (~0.15 s of a fresh worker's first range).
        Whether there was anything to teach: a header that does not resolve, a schema the
        kernel refuses or a route the router does not accept stay the Python path's to
        judge, which they then are, with their reasons. The message itself is never judged
        here: it is staged by whichever path would have staged it."""
        if reason not in ("schema_unknown", "route_unknown"):
            return False
        value = msg.value()
        if not value or len(value) < HEADER_SIZE:
            return False
        header = value[:HEADER_SIZE]
        if reason == "route_unknown":
            return unknown_route is not None and self._learn_route(header, msg, unknown_route)
        if header in self._offered:
            return False  # offered before: the kernel refused the schema
        try:
            known = self.stager.frame(value)
        except BadInputError:
            return False  # a bad frame or schema: the Python path's verdict
        self._offer(header, msg, known)
        return self._offered.get(header, "") is None

    def _offer(self, header: bytes, msg: Any, known: tuple[int, Any]) -> None:
        schema_id, decoder = known
        constant = None
        try:
            full_name, file_id, file_schema = self._file_of(schema_id, decoder)
            if self._mode is not RoutingMode.FIELDS or self.stager.static_destination is not None:
                destination = self.stager.static_destination or self.stager.route(
                    RoutingInput(
                        self.stager.rng.topic,
                        self.stager.rng.partition,
                        msg.offset(),
                        full_name,
                        {},
                        None,
                    )  # fmt: skip
                )
                constant = self._slot(destination.dataset, destination.table, file_id, file_schema)
            self._add_schema(header, schema_id, decoder, constant)
        except (BadInputError, ValueError) as error:
            self._offered[header] = str(error)
            log.debug(
                "%s: schema id %d stays on the Python stage path: %s",
                self.stager.rng,
                schema_id,
                error,
            )
            return
        self._offered[header] = None

    def _add_schema(
        self, header: bytes, schema_id: int, decoder: Any, constant: int | None
    ) -> None:
        """Hook: give the kernel the registry schema framed by ``header`` (``decoder``: the
        stager's for it; ``constant``: the file slot of every record, or None for field
        routing); raises ValueError or BadInputError when the kernel refuses it."""
        registered = self.stager.lookup.get(schema_id)
        text = json.dumps(parse_schema(registered.schema, _write_hint=False))
        self.kernel.add_schema(header, text, constant)

    def _file_of(self, schema_id: int, decoder: Any) -> tuple[str | None, int, dict]:
        """Hook: what the records of registry schema ``schema_id`` (``decoder``: the stager's
        for it) are staged as: their record's full name (what schema-name routing reads), the
        files' schema id and schema. Here the registry's; a driver whose kernel transforms the
        records gives the derived schema's (formats/json_schema_stage.py)."""
        return decoder.full_name, schema_id, decoder.schema

    def _learn_route(self, header: bytes, msg: Any, route: tuple[bytes, bytes]) -> bool:
        """Teach the kernel the destination of a pair of routing values; whether it was."""
        known = self.stager.known_frame(header)
        if known is None:
            return False
        try:
            full_name, file_id, file_schema = self._file_of(*known)
        except BadInputError:
            return False  # the Python path's verdict
        slot = self._route_slot(msg, route, full_name, file_id, file_schema)
        if slot is None:
            return False
        self.kernel.learn_route(header, *route, slot)
        return True

    def _route_slot(
        self,
        msg: Any,
        route: tuple[bytes, bytes],
        full_name: str | None,
        schema_id: int,
        schema: dict,
    ) -> int | None:
        """The file slot of the Python router's destination for a pair of routing values (the
        record named ``full_name``, staged under ``schema_id``), or None when the router
        refuses them: such messages keep going to the Python path's verdict."""
        dataset, table = route
        try:
            fields = {self._dataset_field: dataset.decode(), self._table_field: table.decode()}
            destination = self.stager.route(
                RoutingInput(
                    self.stager.rng.topic,
                    self.stager.rng.partition,
                    msg.offset(),
                    full_name,
                    fields,
                    msg.key(),
                )
            )
            return self._slot(destination.dataset, destination.table, schema_id, schema)
        except (BadInputError, UnicodeDecodeError):
            return None

    def _slot(self, dataset: str, table: str, schema_id: int, schema: dict) -> int:
        """The kernel's file slot of (``dataset``, ``table``, ``schema_id``), whose DAY file
        schema is ``schema``. An HOUR table's slot is marked so: the kernel then writes the
        event hour column. Raises the BadInputError of an HOUR table's file schema that
        cannot take that column (``with_event_hour``): the Python path then judges each of
        its messages, as it does without the kernel."""
        key = (dataset, table, schema_id)
        slot = self._slot_of.get(key)
        if slot is None:
            hourly = self.stager.pipeline.is_hourly(dataset, table)
            if hourly:
                with_event_hour(schema, self.stager.enrichment)  # raises its clash
            slot = self._slot_of[key] = len(self._slots)
            self._slots.append((dataset, table, schema_id, schema))
            if hourly:
                self.kernel.hourly_slot(slot)
                self._hourly_slots.add(slot)
        return slot
