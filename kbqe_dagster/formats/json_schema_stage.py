"""Registry JSON Schema topics (``format: json_schema``): Confluent-framed JSON (magic byte 0,
the schema id, UTF-8 JSON text) validated against the JSON Schema the registry holds under
that id, staged under the Avro record derived from it (core/formats/json_schema_avro.py).

Per schema id, once: the registry's schema (an Avro or Protobuf id is ``non_json_schema``),
its validator (``jsonschema``, the draft its ``$schema`` names, draft 7 when none), and its
Avro mapping (``unmappable_json_schema`` naming the construct when there is none). A schema id
that fails either is remembered, so each of its messages is dead-lettered without asking again.

Per message: the frame as on the Avro path (``bad_magic``, ``too_short``,
``unknown_schema_id`` unchanged), the body decoded as UTF-8 JSON (``json_decode_error``),
validated (``json_schema_mismatch`` naming the JSON pointer of the most relevant error, as
``jsonschema.exceptions.best_match`` picks it), converted to its Avro form and encoded with
fastavro; routing and event time read the JSON values (a ``date-time`` string as written,
offset included, which the ``local`` date rule honours). Files carry the framed registry id,
so each schema version has files of its own, and a version that appends an optional property
widens the table. Like ``format: json`` this decodes and encodes every record (JSON has no
binary form to slice).
``format`` is annotation only here: ``jsonschema`` does not assert it, but ``date-time`` and
``date`` values must convert, so a bad one is a mismatch all the same.

**The native kernel** (``kernel/src/json_schema.rs``) does the same for a topic without
destinations whose transforms, if any, only rename, drop and add constant fields as the JSON
kernel does them (core/transforms/kernel_transforms.py, ``kernel_transforms``), of a schema whose values
routing and event time read are the same in JSON and Avro form (:func:`_reads_alike`):
:class:`JsonSchemaKernelStaging`, this stager's ``native_driver``,
gives it each schema id's JSON Schema and derived Avro record the first time the id is met,
and it parses, validates, converts and encodes each value in Rust. It validates a subset of
JSON Schema (a schema using more stays here whole) and only ever says "valid": every message
that does not validate, or that it is not certain about, comes back here and is staged or
dead-lettered by :meth:`JsonSchemaRangeStager.stage`, which stays the reference: the files,
dead letters, reasons and counts are this path's, byte for byte (docs/architecture.md, "The
JSON Schema kernel").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_writer
from jsonschema.exceptions import SchemaError, best_match
from jsonschema.validators import Draft7Validator, validator_for

from kbqe_dagster.core.errors import (
    JsonDecodeError,
    JsonSchemaMismatchError,
    NonJsonSchemaError,
    UnmappableJsonSchemaError,
)
from kbqe_dagster.core.formats.avro_names import record_full_name
from kbqe_dagster.core.formats.json_schema_avro import (
    JsonSchemaMapping,
    kernel_record,
    map_json_schema,
)
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.enrichment import extended_schema
from kbqe_dagster.core.record.wire import HEADER_SIZE
from kbqe_dagster.core.transforms.compiler import field_values
from kbqe_dagster.core.transforms.kernel_transforms import kernel_kinds, kernel_transforms
from kbqe_dagster.formats.transform_stage import StagedSchema, TransformingStager
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging


@dataclass
class _JsonSchemaDecoder:
    """What one registry JSON Schema needs: its validator, its Avro mapping and file schema."""

    validator: Any
    mapping: JsonSchemaMapping
    parsed: Any
    schema: dict
    full_name: str | None


class JsonSchemaRangeStager(TransformingStager):
    """Validate against the registry JSON Schema, convert to the derived Avro record; with
    ``transforms``, that record takes the shared transform step (formats/transform_stage.py),
    whose routing and event time then read the transformed (Avro-form) fields."""

    def __init__(self, ctx: StageContext, rng: OffsetRange, workdir: Path) -> None:
        super().__init__(ctx, rng, workdir)
        self.wanted = self.topic.required_fields
        self.root_name = rng.topic  # the root record's name when the schema has no title
        # Transforms and destinations reshape records in Python: those topics stay here, but
        # for renames, drops and constants the kernel stages exactly (kernel_transforms, per
        # schema id: JsonSchemaKernelStaging._add_schema).
        self.native_kernel = not self.reshapes or (
            self.fan_out is None and kernel_kinds(self.transforms, rewrites=True)
        )

    @property
    def native_driver(self) -> type[NativeStaging]:
        return JsonSchemaKernelStaging  # a property: the driver class is defined below

    def stage(self, msg: Any) -> None:
        value = self.checked_value(msg)  # null and oversized values as on the Avro path
        known = self.frame(value)  # frame reasons as on the Avro path
        schema_id, decoder = known
        record = _decode(value[HEADER_SIZE:])
        first = next(decoder.validator.iter_errors(record), None)
        if first is not None:
            raise JsonSchemaMismatchError(_mismatch(first, decoder.validator, record))
        if self.reshapes:
            self.place_record(
                msg, decoder.mapping.convert(record), schema_id, decoder.mapping.avro_schema
            )
            return
        body = _encode(decoder.mapping.convert(record), decoder.parsed)
        fields = field_values(record, self.wanted)
        self.place(msg, fields, body, schema_id, decoder.schema, decoder.full_name)

    def staged_schema(self, schema_id: int, decoder: _JsonSchemaDecoder) -> StagedSchema:
        """What the records of ``schema_id`` stage as with transforms (what :meth:`stage`'s
        ``place_record`` derives); raises the BadInputError of transforms that do not apply."""
        return self.staged_schema_of(schema_id, decoder.mapping.avro_schema, None)

    def new_decoder(self, schema_id: int) -> _JsonSchemaDecoder:
        registered = self.registered_schema(
            schema_id, "JSON", NonJsonSchemaError, "; a json_schema topic needs a JSON Schema"
        )
        try:
            schema = json.loads(registered.schema)
            cls = validator_for(schema, default=Draft7Validator)
            cls.check_schema(schema)
        except (ValueError, SchemaError) as error:
            raise UnmappableJsonSchemaError(
                f"schema id {schema_id} is not a valid JSON Schema: {_one_line(error)}"
            ) from None
        try:
            mapping = map_json_schema(schema, self.root_name)
        except UnmappableJsonSchemaError as error:
            raise UnmappableJsonSchemaError(
                f"schema id {schema_id} has no Avro form: {error}"
            ) from None
        avro = mapping.avro_schema
        return _JsonSchemaDecoder(
            cls(schema),
            mapping,
            parse_schema(avro, _write_hint=False),
            extended_schema(avro, self.enrichment),
            record_full_name(avro),
        )


def _decode(body: bytes) -> Any:
    try:
        return json.loads(body.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError as error:
        raise JsonDecodeError(f"not UTF-8: {error}") from None
    except ValueError as error:
        raise JsonDecodeError(f"not JSON: {error}") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not JSON")


def _mismatch(first: Any, validator: Any, record: Any) -> str:
    """The most relevant error (``best_match`` over all of them: the first met may be a
    branch's), with the JSON pointer of the value it is about."""
    error = best_match(validator.iter_errors(record)) or first
    pointer = "".join(
        f"/{str(p).replace('~', '~0').replace('/', '~1')}" for p in error.absolute_path
    )
    return f"does not validate against its JSON Schema at {pointer or 'the root'}: {_one_line(error.message)}"


def _encode(record: Mapping[str, Any], parsed: Any) -> bytes:
    out = BytesIO()
    try:
        schemaless_writer(out, parsed, record)
    except (TypeError, ValueError, OverflowError) as error:
        # The value validated and converted, so this is a gap between the two schemas; the
        # message is still bad input for this schema, not a reason to stop the range.
        raise JsonSchemaMismatchError(
            f"does not encode as its Avro form: {_one_line(error)}"
        ) from None
    return out.getvalue()


def _one_line(error: Any) -> str:
    return str(getattr(error, "message", error)).replace("\n", " ")[:500]


class JsonSchemaKernelStaging(NativeStaging):
    """The native kernel's driver for ``format: json_schema`` (staging/native_kernel.py's
    loop): like the Avro driver it learns each schema id when the kernel first stops at it,
    here giving it the registry JSON Schema and the Avro record derived from it."""

    KERNEL_METHOD = "add_json_schema_id"

    stager: JsonSchemaRangeStager

    @classmethod
    def for_range(cls, stager: Any, extension: Any) -> NativeStaging | None:
        if not cls.append_rules_allow(stager):
            return None  # transforms or destinations, function routing
        if stager.transforms and not hasattr(extension.StageKernel, TRANSFORMED):
            return None  # a kernel built before json_schema transforms
        return cls(stager, extension)

    def _file_of(self, schema_id: int, decoder: Any) -> tuple[str | None, int, dict]:
        if not self.stager.transforms:
            return decoder.full_name, schema_id, decoder.schema
        staged = self.stager.staged_schema(schema_id, decoder)  # the derived schema's files
        return staged.full_name, staged.schema_id, staged.file_schema

    def _add_schema(
        self, header: bytes, schema_id: int, decoder: Any, constant: int | None
    ) -> None:
        stager = self.stager
        registered = stager.lookup.get(schema_id)
        if registered is None:  # frame() found it: not here
            raise ValueError(f"schema id {schema_id} is not in the lookup")
        keys, keyed = kernel_record(registered.schema, decoder.parsed)
        if not stager.transforms:
            self.kernel.add_json_schema_id(header, registered.schema, keyed, constant)
            return
        avro = decoder.mapping.avro_schema
        done = kernel_transforms(stager.transforms, avro, stager.wanted, stager.hmac_keys)
        if done is None:
            raise ValueError("transforms the kernel does not do for this schema")
        done = done.digits_rewritten(avro)  # the JSON encoder's own digits: rewrites here
        if done.rewrites and not hasattr(self.kernel, REWRITTEN):
            raise ValueError("a kernel built before masks and timestamps")
        _reads_alike(avro, keys, stager.wanted)
        staged = stager.staged_schema(schema_id, decoder)
        constants = b""
        if done.parts:  # appended per message, the constants among them
            if not hasattr(self.kernel, "append_message_parts") or staged.compiled is None:
                raise ValueError("a kernel built before message parts")
            output, rng = staged.compiled.output_schema, stager.rng
            self.kernel.append_message_parts(done.appended(output, rng.topic, rng.partition))
        elif done.constants and staged.compiled is not None:
            constants = done.constants_encoding(staged.compiled.output_schema)
        drops = [keys.get(name, name) for name in done.drops]  # the kernel finds members by key
        if done.rewrites:
            rewrites = [(keys.get(r.field, r.field), r.spec(), r.key) for r in done.rewrites]
            self.kernel.add_rewritten_json_schema_id(
                header, registered.schema, keyed, drops, constants, rewrites, constant
            )
            return
        self.kernel.add_transformed_json_schema_id(
            header, registered.schema, keyed, drops, constants, constant
        )


REWRITTEN = "add_rewritten_json_schema_id"
"""The ``StageKernel`` method of schemas with ``mask`` or numeric ``timestamp`` transforms."""
TRANSFORMED = "add_transformed_json_schema_id"
"""The ``StageKernel`` method of schemas with transforms: a kernel built before it leaves
a topic with transforms on the Python path."""

# Avro types whose converted value is the JSON value itself (json_values: copied as parsed).
_ALIKE = ("string", "boolean")


def _reads_alike(avro: Mapping[str, Any], keys: Mapping[str, str], wanted: Any) -> None:
    """Raise ValueError unless every path routing and event time read (``wanted``) has the
    same value in the JSON object and in its converted record. Without transforms both read
    the JSON values; with them the Python path reads the converted, transformed record
    (transform_stage.py's ``place_record``) while the kernel reads JSON: a ``date-time``
    there is epoch microseconds, a ``number`` a float, ``3.0`` of an ``integer`` the int 3,
    and a property renamed for Avro has another name. So each step of the path must be a
    declared field named as its JSON key, the last one a string (or string enum) or a
    boolean, each before it a record, any of them nullable."""
    for path in wanted:
        node: Any = avro
        for i, part in enumerate(path.split(".")):
            fields = node.get("fields") if isinstance(node, Mapping) else None
            field = next((f for f in fields or () if f["name"] == part), None)
            if field is None or keys.get(part, part) != part:
                raise ValueError(f"{path!r} is not a field named as its JSON key")
            node = field["type"]
            if isinstance(node, list) and len(node) == 2 and "null" in node:
                node = next(t for t in node if t != "null")
            last = i == len(path.split(".")) - 1
            plain = node in _ALIKE or (isinstance(node, Mapping) and node.get("type") == "enum")
            if last and not plain:
                raise ValueError(f"{path!r} reads a value converted from its JSON form")
