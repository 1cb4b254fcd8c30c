"""Staging topics with ``transforms``: the one shared step from a decoded record to a staged
record, and the Avro stager that decodes for it.

A transform changes fields, so the record must be decoded: these topics leave the Avro hot
path (no body slicing) for decode → transform → encode with fastavro:

- :class:`TransformingStager` is the shared step. A stager that holds a record dict and its
  Avro schema calls ``self.place_record(msg, record, schema_key, schema)``: the topic's
  transforms, compiled once per ``schema_key`` (core/transforms/compiler.py), apply to the record; it is
  encoded under the derived schema; routing and event time read the transformed fields; the
  record is appended like any other (``RangeStager.place``). Without transforms the same call
  just encodes the record under ``schema`` with ``schema_id`` (how ``format: json`` stages).
  A topic with ``destinations`` hands the record to its
  :class:`~kbqe_dagster.formats.destination_stage.DestinationFanOut` instead: one record, one
  placement per destination, all built before any is appended.
- :class:`TransformRangeStager` is the Avro path with transforms or destinations: frame → writer schema from
  the registry → ``schemaless_reader`` (the body must decode to exactly its length:
  ``body_decode_error`` otherwise) → the shared step.

**The native kernel** does the Avro path with transforms too when every transform renames,
drops, adds a constant or a part of the message, masks, converts a timestamp between numbers,
or casts without changing bytes or exactly (core/transforms/kernel_transforms.py; with destinations,
see below): :class:`TransformRangeStager`'s ``native_driver``
(formats/avro_transform_kernel.py) gives it each registry schema with its transform plan, and
it copies the body's bytes reshaped. This module stays the reference: every message whose
fastavro round trip would not give its bytes back, and every schema the plan refuses, is staged
here (docs/architecture.md, "Avro with transforms"). A topic with destinations takes the
kernel too when each routes per schema (static, schema_name), has no ``when`` and its
transforms after the topic's are such kinds (formats/avro_destination_kernel.py).

**Schema ids of transformed files.** A staging file's name carries its schema id and every
file of one id must carry one schema (core/protocol/commit.py). A transformed file's schema is the
*derived* schema, not the registry's writer schema, so the registry id cannot be reused: two
different Avro files would share a key, and a transform change would put a new schema under
an old id. Transformed files take the declared-schema id of their output schema
(``core/formats.declared_schema_id``): stable across runs, new for each schema change, and
outside the registry's range.

A schema the transforms cannot apply to (``TransformSchemaError``) is remembered per schema
key: each of its messages goes to the bad-input policy with that error, the registry is not
asked again. An HMAC key variable missing where the task runs stops the range (ConfigError).
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from kbqe_dagster.core.errors import (
    BadInputError,
    BodyDecodeError,
    TransformFailedError,
    UnsupportedSchemaError,
)
from kbqe_dagster.core.formats.avro_names import record_full_name
from kbqe_dagster.core.formats.source_format import declared_schema_id
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.enrichment import extended_schema
from kbqe_dagster.core.record.wire import HEADER_SIZE
from kbqe_dagster.core.transforms.compiler import (
    Compiled,
    compile_transforms,
    field_values,
    hmac_keys,
)
from kbqe_dagster.core.transforms.kernel_transforms import kernel_kinds
from kbqe_dagster.core.transforms.kinds import message_meta
from kbqe_dagster.formats.avro_destination_kernel import (
    AvroDestinationKernelStaging,
    destinations_on_kernel,
)
from kbqe_dagster.formats.avro_transform_kernel import AvroTransformKernelStaging
from kbqe_dagster.formats.destination_stage import DestinationFanOut
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging
from kbqe_dagster.staging.stager import Decoder, RangeStager


@dataclass(frozen=True)
class StagedSchema:
    """What one input schema stages as: the transforms over it (None: none configured), the
    parsed schema records are encoded with, the files' schema, id and record name."""

    compiled: Compiled | None
    parsed: Any
    file_schema: dict
    schema_id: int
    full_name: str | None


class TransformingStager(RangeStager):
    """The shared step from a decoded record to a staged one (see the module docstring)."""

    native_kernel = False  # records are decoded and re-encoded: the Python path (a subclass
    # whose kernel does its transforms says so)

    def __init__(self, ctx: StageContext, rng: OffsetRange, workdir: Path) -> None:
        super().__init__(ctx, rng, workdir)
        self.transforms = self.topic.transforms
        # Read once per task, where it runs; a missing key stops the range (ConfigError).
        where = self.pipeline.key_path(self.topic.name)
        self.hmac_keys = hmac_keys(self.transforms, os.environ, f"{where}.transforms")
        self.staged_schemas: dict[Hashable, StagedSchema | BadInputError] = {}
        self.wanted = self.topic.required_fields
        self.fan_out = DestinationFanOut(self, where) if self.topic.destinations else None
        self.reshapes = bool(self.transforms) or self.fan_out is not None
        """Whether records must take :meth:`place_record` (transforms or destinations): a
        stager with a faster way for plain records keeps it only when this is False."""

    def place_record(
        self,
        msg: Any,
        record: Mapping[str, Any],
        schema_key: Hashable,
        schema: Mapping[str, Any],
        schema_id: int | None = None,
    ) -> None:
        """Transform (if configured), encode, route, date and append one decoded record.
        ``schema_key`` identifies ``schema`` (a registry id, a declared id); ``schema_id`` is
        the files' id when there are no transforms (default: the declared id of ``schema``)."""
        if self.fan_out is not None:
            self.fan_out.place(msg, record, schema_key, schema, schema_id)
            return
        staged = self.staged_schema_of(schema_key, schema, schema_id)
        if staged.compiled is not None:
            record = staged.compiled.apply(record, message_meta(msg))
        body = BytesIO()
        try:
            schemaless_writer(body, staged.parsed, record)
        except Exception as error:  # noqa: BLE001 - fastavro raises several types on a misfit
            raise TransformFailedError(
                f"transforms output does not fit the derived schema: {error}"
            ) from None
        fields = field_values(record, self.wanted)
        self.place(
            msg, fields, body.getvalue(), staged.schema_id, staged.file_schema, staged.full_name
        )

    def staged_schema_of(
        self, schema_key: Hashable, schema: Mapping[str, Any], schema_id: int | None
    ) -> StagedSchema:
        known = self.staged_schemas.get(schema_key)
        if isinstance(known, StagedSchema):
            return known
        if isinstance(known, BadInputError):
            raise type(known)(str(known))
        try:
            staged = self._derive(schema, schema_id)
        except BadInputError as error:
            self.staged_schemas[schema_key] = error
            raise
        self.staged_schemas[schema_key] = staged
        return staged

    def _derive(self, schema: Mapping[str, Any], schema_id: int | None) -> StagedSchema:
        compiled = None
        output: Mapping[str, Any] = schema
        if self.transforms:
            compiled = compile_transforms(self.transforms, schema, self.hmac_keys)
            output = compiled.output_schema
            schema_id = None  # the file's schema is the derived one: its own id
        return StagedSchema(
            compiled,
            parse_schema(dict(output), _write_hint=False),
            extended_schema(output, self.enrichment),
            schema_id if schema_id is not None else declared_schema_id(output),
            record_full_name(output),
        )


@dataclass
class _WriterSchema(Decoder):
    """A registry schema of a transformed Avro topic: decoded with fastavro, not probed."""

    parsed: Any = None


class TransformRangeStager(TransformingStager):
    """Confluent-framed Avro with transforms or destinations: decode, then the shared step."""

    def __init__(self, ctx: StageContext, rng: OffsetRange, workdir: Path) -> None:
        super().__init__(ctx, rng, workdir)
        # Transforms of other kinds stay here; the kernel's plan is made per registry schema
        # (formats/avro_transform_kernel.py; with destinations, formats/avro_destination_kernel.py,
        # whose per-topic rules come first: routing per schema, no `when`, and no rewrites or
        # parts of the message yet).
        if self.fan_out is None:
            self.native_kernel = kernel_kinds(self.transforms, rewrites=True)
        else:
            self.native_driver = AvroDestinationKernelStaging
            self.native_kernel = destinations_on_kernel(self.transforms, self.topic.destinations)

    native_driver: type[NativeStaging] = AvroTransformKernelStaging

    def stage(self, msg: Any) -> None:
        value = self.checked_value(msg)
        known = self.frame(value)
        schema_id, writer = known
        record = _read(value, writer.parsed)
        self.place_record(msg, record, schema_id, writer.schema)

    def make_decoder(self, schema: dict) -> Decoder:
        if not isinstance(schema, dict) or schema.get("type") != "record":
            raise UnsupportedSchemaError("the writer schema is not an Avro record")
        try:
            parsed = parse_schema(schema, _write_hint=False)
        except Exception as error:  # noqa: BLE001 - fastavro raises several types
            raise UnsupportedSchemaError(f"the writer schema does not parse: {error}") from None
        # No probe: the record is decoded whole (see _read), which validates it as well.
        return _WriterSchema(None, schema, record_full_name(schema), parsed)  # type: ignore[arg-type]


def _read(value: bytes, parsed: Any) -> dict[str, Any]:
    """The record of a framed value; the body must decode to exactly its own length."""
    buffer = BytesIO(value)
    buffer.seek(HEADER_SIZE)
    try:
        record = schemaless_reader(buffer, parsed, None)
    except Exception as error:  # noqa: BLE001 - truncated or invalid data raises many types
        # fastavro's EOFError names the stream by its repr, a memory address: the same range
        # staged twice must dead-letter the same reason, byte for byte.
        why = f"{type(error).__name__}: {error}".replace(repr(buffer), "the body")
        raise BodyDecodeError(f"the body does not decode: {why}") from None
    trailing = len(value) - buffer.tell()
    if trailing:
        raise BodyDecodeError(f"{trailing} byte(s) left after the record")
    return record
