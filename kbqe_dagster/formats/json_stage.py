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
destinations, or whose transforms only rename, drop and add constant fields
(:func:`kernel_transforms`):
:class:`JsonKernelStaging`, this stager's ``native_driver``, gives it the declared schema
once, and it parses, checks and encodes each value in Rust. Every message it
is not certain about — every one the Python path would dead-letter among them — comes back
here and is staged (or dead-lettered, with this module's reasons) by :meth:`stage`: the files,
dead letters and counts are this path's, byte for byte (docs/architecture.md, "The JSON
kernel").
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_writer
from fastavro.validation import ValidationError, validate

from kbqe_dagster.core.errors import BadInputError, JsonDecodeError, JsonSchemaMismatchError
from kbqe_dagster.core.formats.source_format import declared_schema_id
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.routing import RoutingInput, RoutingMode
from kbqe_dagster.core.transforms.specs import AddField, CastField, DropFields, RenameField
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
        # for renames, drops and constants the kernel stages exactly (kernel_transforms).
        self.kernel_transforms = kernel_transforms(self.transforms, schema, self.wanted)
        self.native_kernel = not self.reshapes or (
            self.fan_out is None and self.kernel_transforms is not None
        )

    @property
    def native_driver(self) -> type[NativeStaging]:
        return JsonKernelStaging  # a property: the driver class is defined below

    def staged_schema(self) -> StagedSchema:
        """What every record of the topic stages as (no transforms: the declared schema, its
        files' extended schema and id)."""
        return self._staged_schema(self.schema_id, self.value_schema, self.schema_id)

    def stage(self, msg: Any) -> None:
        record = _decode(self.checked_value(msg))  # null and oversized values as on the Avro path
        _check(record, self.parsed)
        self.place_record(msg, record, self.schema_id, self.value_schema, self.schema_id)

    @staticmethod
    def framed_schema_id(value: bytes | None) -> int | None:
        return None  # JSON values carry no schema id


@dataclass(frozen=True)
class KernelTransforms:
    """What the kernel does for a topic's transforms (:func:`kernel_transforms`): the declared
    fields it leaves out of every body, and the constants it appends after it (renames and
    casts change no bytes)."""

    drops: tuple[str, ...] = ()
    constants: tuple[tuple[str, Any], ...] = ()
    """``(field, value)`` of each ``add`` of a constant, in order."""
    digits: tuple[str, ...] = ()
    """Int or long fields ``cast`` to string: written as their decimal digits."""

    def constants_encoding(self, output_schema: Mapping[str, Any]) -> bytes:
        """The constants' Avro encoding under their types in the derived ``output_schema``
        (its last fields, in order): what fastavro writes after the other fields."""
        types = {f["name"]: f["type"] for f in output_schema["fields"]}
        fields = [{"name": name, "type": types[name]} for name, _ in self.constants]
        record = {"type": "record", "name": "KbqeConstants", "fields": fields}
        body = BytesIO()
        schemaless_writer(body, parse_schema(record, _write_hint=False), dict(self.constants))
        return body.getvalue()


def kernel_kinds(transforms: Any) -> bool:
    """Whether every one of ``transforms`` is of a kind the kernel can do (a rename, a drop,
    an ``add`` of a constant): what :func:`kernel_transforms` then checks against a schema."""
    return all(
        isinstance(spec, (RenameField, DropFields, CastField))
        or (isinstance(spec, AddField) and spec.header is None and spec.message is None)
        for spec in transforms
    )


def kernel_transforms(
    transforms: Any, schema: Mapping[str, Any], wanted: Any
) -> KernelTransforms | None:
    """What the kernel does to stage a topic with ``transforms`` exactly, or None when it
    cannot (the Python path's). It can when they only rename and drop top-level fields and
    add constants: a rename keeps the field's position and type, a drop removes the field's
    encoding, an added field comes last, so the record's Avro bytes are the declared schema's
    without the dropped fields' and with the constants' after them; only the files' schema
    and id (the derived schema's) differ. Not when routing or event time reads a renamed,
    dropped or added name (they read the transformed record), when a renamed field has a
    default other than null (a value without the field is encoded with its default as
    declared, but as null once renamed: ``record.pop(old, None)``), or when a rename or a drop
    names a renamed or added field (a chain). A ``cast`` too when it changes no bytes
    (:func:`cast_keeps_bytes`: to the field's own type, or an ``int`` to ``long``) or casts an
    int or long to a string (:func:`cast_to_digits`), not after another cast of the field."""
    declared = {f.get("name"): f for f in schema.get("fields") or ()}
    read = {path.split(".")[0] for path in wanted}
    present = set(declared)  # declared names not yet renamed or dropped
    dropped: list[str] = []
    constants: list[tuple[str, Any]] = []
    cast: set[str] = set()
    digits: list[str] = []
    for spec in transforms:
        if isinstance(spec, RenameField):
            field = declared.get(spec.rename)
            if spec.rename not in present or field is None or field.get("default") is not None:
                return None
            if spec.rename in read or spec.to in read:
                return None
            present.discard(spec.rename)
        elif isinstance(spec, DropFields):
            if any(name not in present or name in read for name in spec.drop):
                return None
            present.difference_update(spec.drop)
            dropped += spec.drop
        elif isinstance(spec, CastField):
            field = declared.get(spec.cast)
            if spec.cast not in present or field is None or spec.cast in read:
                return None
            if spec.cast in cast:
                return None  # a chain: the second reads the first's value
            cast.add(spec.cast)
            if cast_to_digits(field, spec.to.value):
                digits.append(spec.cast)
            elif not cast_keeps_bytes(field, spec.to.value):
                return None
        elif isinstance(spec, AddField) and spec.header is None and spec.message is None:
            if spec.add in read:
                return None
            constants.append((spec.add, spec.value))
        else:
            return None
    return KernelTransforms(tuple(dropped), tuple(constants), tuple(digits))


def cast_keeps_bytes(field: Mapping[str, Any], to: str) -> bool:
    """Whether ``{cast: field, to: to}`` leaves every record's bytes as declared. The step
    (core/transforms/kinds.py ``_cast``) types the field ``to`` (``["null", to]`` when it may
    be null) and converts each non-null value; a value that is the same (``to`` is its own
    type: the identity) or encodes the same (an ``int`` as a ``long``: both zig-zag varints,
    and every int is a long) gives the same bytes only when the derived type has the declared
    union layout (``["long", "null"]`` becomes ``["null", "long"]``: another branch index).
    Not a field with a default other than null: absent, it is encoded with its default as
    declared, but the step fails it (``is missing from the record``)."""
    if field.get("default") is not None:
        return False
    declared = field.get("type")
    if isinstance(declared, list):
        widened: Any = ["long" if t == "int" else t for t in declared]
    else:
        widened = "long" if declared == "int" else declared
    return widened == to or widened == ["null", to]


def cast_to_digits(field: Mapping[str, Any], to: str) -> bool:
    """Whether ``{cast: field, to: to}`` turns an int or long (``["null", T]`` too: the derived
    ``["null", "string"]`` keeps its branch indexes) into the string ``str(value)``, which the
    kernel writes as the digits of the value it checked as declared. A JSON integer that fits
    the type is a Python int (fastavro's validator takes no bool or float for it), so ``str``
    is its digits. Not a field with a default other than null (see :func:`cast_keeps_bytes`)."""
    if to != "string" or field.get("default") is not None:
        return False
    declared = field.get("type")
    return declared in ("int", "long", ["null", "int"], ["null", "long"])


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
            if done is not None and done.constants:
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
