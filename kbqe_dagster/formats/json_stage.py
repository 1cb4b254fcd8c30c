"""Schemaless JSON topics (``format: json``): each value is one JSON object, staged under the
Avro record schema the topic declares, as kafka-delta-ingest does.

Per message: parse the JSON (``json_decode_error`` when it is not one object), check it against
the declared schema and encode it with fastavro (``json_schema_mismatch``, naming the field
path, when it does not fit), then everything is the Avro path's: routing and event time read
the decoded fields, the enrichment prefix goes before the body, the files commit with the
range. Topic ``transforms`` apply to the checked record through the shared step of
``formats/transform_stage.py`` (a schema the transforms cannot apply to is a config error here:
the schema is declared). Unlike the Avro path this decodes and encodes every record — JSON has no binary form to
slice; ``bench/bench_formats.py`` reports its rate. Values are taken as JSON gives them: a
``timestamp-millis`` field wants epoch milliseconds, a ``date`` field days since 1970, as
Avro's JSON encoding does.

**The native kernel** (``kernel/src/json.rs``) does the same for a topic without transforms or
destinations, or whose transforms only rename, drop, add constants or parts of the message,
mask, convert timestamps between numbers or cast exactly (core/transforms/kernel_transforms.py; the
per-field rewrites and parts in ``kernel/src/rewrite.rs``):
:class:`JsonKernelStaging`, this stager's ``native_driver``, gives it the declared schema
once, and it parses, checks and encodes each value in Rust. Every message it
is not certain about — every one the Python path would dead-letter among them — comes back
here and is staged (or dead-lettered, with this module's reasons) by :meth:`stage`: the files,
dead letters and counts are this path's, byte for byte (docs/architecture.md, "The JSON
kernel"). A topic with destinations the kernel does (static or schema-name routing, no
``when``, the kernel's transforms: formats/avro_destination_kernel.py) takes
:class:`JsonDestinationKernelStaging` instead.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastavro import parse_schema
from fastavro.validation import ValidationError, validate

from kbqe_dagster.core.errors import BadInputError, JsonDecodeError, JsonSchemaMismatchError
from kbqe_dagster.core.formats.source_format import declared_schema_id
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.routing import RoutingInput, RoutingMode
from kbqe_dagster.core.transforms.kernel_transforms import kernel_transforms
from kbqe_dagster.formats.avro_destination_kernel import destinations_on_kernel, kernel_outputs
from kbqe_dagster.formats.transform_stage import StagedSchema, TransformingStager
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging

log = logging.getLogger(__name__)


class JsonRangeStager(TransformingStager):
    def __init__(self, ctx: StageContext, rng: OffsetRange, workdir: Path) -> None:
        super().__init__(ctx, rng, workdir)
        schema = dict(self.topic.value_schema or {})
        self.value_schema = schema
        self.parsed = parse_schema(schema, _write_hint=False)
        self.schema_id = declared_schema_id(schema)
        # Transforms and destinations reshape records in Python: those topics stay here, but
        # for renames, drops, constants, message parts, masks, numeric timestamps and exact
        # casts the kernel stages exactly (kernel_transforms).
        self.kernel_transforms = kernel_transforms(
            self.transforms, schema, self.wanted, self.hmac_keys
        )
        self.native_kernel = not self.reshapes or (
            self.kernel_transforms is not None
            if self.fan_out is None
            else destinations_on_kernel(self.transforms, self.topic.destinations)
        )

    @property
    def native_driver(self) -> type[NativeStaging]:
        # A property: the driver classes are defined below.
        return JsonKernelStaging if self.fan_out is None else JsonDestinationKernelStaging

    def staged_schema(self) -> StagedSchema:
        """What every record of the topic stages as (no transforms: the declared schema, its
        files' extended schema and id)."""
        return self.staged_schema_of(self.schema_id, self.value_schema, self.schema_id)

    def stage(self, msg: Any) -> None:
        record = _decode(self.checked_value(msg))  # null and oversized values as on the Avro path
        _check(record, self.parsed)
        self.place_record(msg, record, self.schema_id, self.value_schema, self.schema_id)

    @staticmethod
    def framed_schema_id(value: bytes | None) -> int | None:
        return None  # JSON values carry no schema id


def _decode(value: bytes) -> dict[str, Any]:
    try:
        record = json.loads(value)
    except (UnicodeDecodeError, ValueError) as error:
        raise JsonDecodeError(f"not JSON: {error}") from None
    if not isinstance(record, dict):
        raise JsonDecodeError(f"expected a JSON object, got {type(record).__name__}")
    return record


def _check(record: Mapping[str, Any], parsed: Any) -> None:
    try:
        validate(record, parsed, raise_errors=True)
    except ValidationError as error:
        raise JsonSchemaMismatchError(_mismatch(error)) from None
    except (ValueError, TypeError) as error:
        # fastavro parses a string given for an int/date field and lets its parser's error
        # out ("Invalid isoformat string"): a value that does not fit, not a failed range.
        raise JsonSchemaMismatchError(f"does not fit the declared schema: {error}") from None


def _mismatch(error: ValidationError) -> str:
    """fastavro's error names each failing field path; keep the first, on one line."""
    details = [str(e) for e in getattr(error, "errors", ())] or [str(error)]
    first = details[0].replace("\n", " ")
    return f"does not fit the declared schema: {first}"


class JsonKernelStaging(NativeStaging):
    """The native kernel's driver for ``format: json`` (staging/native_kernel.py's loop): the
    declared schema is given once, at the start; the only thing the kernel learns later is
    a route (field routing), from the Python router."""

    LEARN_HEADER = b"json:"
    """``learn_route``'s header: the JSON kernel has one schema, whatever header it is told."""

    stager: JsonRangeStager
    staged: StagedSchema
    """What every record stages as (set by :meth:`for_range`)."""

    KERNEL_METHOD = "add_json_schema"

    @classmethod
    def for_range(cls, stager: Any, extension: Any) -> NativeStaging | None:
        if not cls.append_rules_allow(stager):
            return None  # transforms or destinations, function routing
        driver = cls(stager, extension)
        staged = driver.staged = stager.staged_schema()
        constant = None
        try:
            if driver._mode is not RoutingMode.FIELDS or stager.static_destination is not None:
                # Static and schema-name routing do not depend on the record: one destination.
                destination = stager.static_destination or stager.route(
                    RoutingInput(
                        stager.rng.topic,
                        stager.rng.partition,
                        stager.rng.start,
                        staged.full_name,
                        {},
                        None,
                    )
                )
                constant = driver._slot(
                    destination.dataset, destination.table, staged.schema_id, staged.file_schema
                )
            # The declared schema: values are checked and encoded as declared (renames change
            # the files' schema and id, staged.file_schema and staged.schema_id, not the bytes).
            driver.kernel.add_json_schema(json.dumps(stager.parsed), constant)
            done = stager.kernel_transforms
            if done is not None and done.drops:
                if not hasattr(driver.kernel, "drop_json_fields"):
                    return None  # a kernel built before drops
                driver.kernel.drop_json_fields(list(done.drops))
            if done is not None and done.digits:
                if not hasattr(driver.kernel, "cast_json_fields_to_digits"):
                    return None  # a kernel built before casts to strings
                driver.kernel.cast_json_fields_to_digits(list(done.digits))
            if done is not None and done.rewrites:
                if not hasattr(driver.kernel, "rewrite_json_field"):
                    return None  # a kernel built before masks and timestamps
                for rewrite in done.rewrites:
                    driver.kernel.rewrite_json_field(rewrite.field, rewrite.spec(), rewrite.key)
            if done is not None and done.parts:
                if not hasattr(driver.kernel, "append_message_parts") or staged.compiled is None:
                    return None  # a kernel built before message parts
                rng = stager.rng
                items = done.appended(staged.compiled.output_schema, rng.topic, rng.partition)
                driver.kernel.append_message_parts(items)
            elif done is not None and done.constants:
                if not hasattr(driver.kernel, "append_json_constants"):
                    return None  # a kernel built before added constants
                if staged.compiled is None:  # constants come from transforms: never
                    return None
                output = staged.compiled.output_schema
                driver.kernel.append_json_constants(done.constants_encoding(output))
        except (BadInputError, ValueError) as error:
            log.debug("%s: the JSON values stay on the Python stage path: %s", stager.rng, error)
            return None
        return driver

    def _teach(self, msg: Any, reason: str, unknown_route: tuple[bytes, bytes] | None) -> bool:
        """A route the kernel has not seen: the Python router's destination for it, as the
        Avro driver learns it (a route it refuses stays the Python path's to dead-letter)."""
        if reason != "route_unknown" or unknown_route is None:
            return False
        staged = self.staged
        slot = self._route_slot(
            msg, unknown_route, staged.full_name, staged.schema_id, staged.file_schema
        )
        if slot is None:
            return False
        self.kernel.learn_route(self.LEARN_HEADER, *unknown_route, slot)
        return True


class JsonDestinationKernelStaging(JsonKernelStaging):
    """The native kernel's driver for ``format: json`` with ``destinations`` that route per
    schema, have no ``when`` and only the kernel's transforms (formats/avro_destination_kernel.py
    says which): the kernel encodes each value as declared, then builds every destination's
    record from the body's top-level field spans (``add_json_destinations``), all or nothing
    per message; the plan is made with ``complete=False`` (a JSON value may leave out a field
    with a default: the rules about defaults apply)."""

    KERNEL_METHOD = "add_json_destinations"

    @classmethod
    def for_range(cls, stager: Any, extension: Any) -> NativeStaging | None:
        if not cls.append_rules_allow(stager):
            return None
        driver = cls(stager, extension)
        driver.staged = stager.staged_schema()
        try:
            outputs = kernel_outputs(driver, stager.rng.start, stager.schema_id,
                                     stager.value_schema, stager.schema_id, False)  # fmt: skip
            text = json.dumps(stager.parsed)
            driver.kernel.add_json_schema(text, outputs[0][0])  # (its slot unused)
            driver.kernel.add_json_destinations(text, outputs)
        except (BadInputError, ValueError) as error:
            log.debug("%s: the JSON values stay on the Python stage path: %s", stager.rng, error)
            return None
        return driver
