"""User-decoded topics (``format: decoder``): each message goes through the topic's decoder
(core/formats/decoders.py), which returns an Avro record and its schema; the record is then staged
like a ``format: json`` record under that schema.

Per message: the null and oversized rules of the Avro path, then the decoder on a
:class:`~kbqe_dagster.core.formats.decoders.RawMessage` (a ``DecodeError`` is ``decoder_rejected``,
any other exception or a result that is not ``(record, schema)`` is ``decoder_error``), then
the schema's derived form — parsed schema, file schema, declared-schema id, full name — made
once per distinct schema, then the record checked against it and encoded with fastavro
(``decoder_schema_mismatch`` naming the field path), then routing, event time, enrichment and
the range's files and commit exactly as on the Avro path. Files carry the declared-schema id
of the decoder's schema (core/formats/source_format.py) and their schema in the header, so the load needs
nothing new. The native kernel never sees these topics: the decoder is Python.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Mapping
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_writer
from fastavro.validation import ValidationError, validate

from kbqe_dagster.core.errors import (
    BadInputError,
    DecodeError,
    DecoderFailedError,
    DecoderSchemaMismatchError,
    UnsupportedSchemaError,
)
from kbqe_dagster.core.formats.avro_names import record_full_name
from kbqe_dagster.core.formats.decoders import RawMessage, resolve_decoder
from kbqe_dagster.core.formats.source_format import declared_schema_id
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.reasons import Reason
from kbqe_dagster.core.record.enrichment import EnrichmentConfig, extended_schema
from kbqe_dagster.core.transforms.compiler import field_values
from kbqe_dagster.formats.transform_stage import TransformingStager
from kbqe_dagster.staging.context import StageContext

MAX_SCHEMAS_PER_RANGE = 1_000
"""Distinct schemas one range may meet. Each gets files of its own (an open file handle per
destination), so a decoder that builds a new schema per message would exhaust the task's
file handles and fail the range on every retry; past this many, new schemas are bad input."""
_IDENTITY_CACHE = 256
_REASONS = frozenset(str(r) for r in Reason)


@dataclass(frozen=True)
class _Schema:
    """What one decoder schema needs, derived once."""

    parsed: Any
    checked: Any
    """``parsed`` with every union's ``null`` branch last: what records are validated against
    (see :func:`_null_last`)."""
    file_schema: dict
    schema_id: int
    full_name: str | None
    names: frozenset[str]
    """The record's field names: a top-level key outside them is a mismatch, not dropped."""


class DecoderRangeStager(TransformingStager):
    """Decode with the user's function; with ``transforms``, the decoded record takes the
    shared transform step (formats/transform_stage.py) keyed by its schema's declared id."""

    native_kernel = False  # the decoder is user Python: the Python path

    def __init__(self, ctx: StageContext, rng: OffsetRange, workdir: Path) -> None:
        super().__init__(ctx, rng, workdir)
        self.spec = str(self.topic.decoder)
        # Imported again here, in the task: an executor that cannot import it fails the
        # range with the ConfigError (a deployment problem, not the messages').
        self.decoder = resolve_decoder(self.spec)
        self.wanted = self.topic.required_fields
        self.schemas: dict[str, _Schema | BadInputError] = {}
        # id(schema) → (the schema object, its derived form). Decoders return one constant
        # per record type, so this skips the canonical JSON per message; the object is held,
        # so its id cannot be reused by another schema while cached.
        self._by_identity: dict[int, tuple[Any, _Schema]] = {}

    def stage(self, msg: Any) -> None:
        value = self.checked_value(msg)  # null and oversized values as on the Avro path
        ts_type, ts = msg.timestamp()
        raw = RawMessage(
            value,
            msg.key(),
            tuple(msg.headers() or ()),
            ts if ts_type != 0 else None,
            msg.topic(),
            msg.partition(),
            msg.offset(),
        )
        record, schema = self._run_decoder(raw)
        derived = self._schema(schema)
        if self.reshapes:
            _check(record, derived)  # the decoder's own mismatch first, then the transforms
            self.place_record(msg, record, derived.schema_id, schema)
            return
        body = _encode(record, derived)
        fields = field_values(record, self.wanted)
        self.place(msg, fields, body, derived.schema_id, derived.file_schema, derived.full_name)

    def _run_decoder(self, raw: RawMessage) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
        try:
            result = self.decoder(raw)
        except BadInputError as error:
            if error.reason in _REASONS and not isinstance(error, DecodeError):
                raise  # a kbqe bad input the decoder met (e.g. core.wire's), reason kept
            raise DecodeError(str(error)) from None  # reasons stay a closed set
        except Exception as error:  # noqa: BLE001 - the rule of core/formats/decoders.py
            raise DecoderFailedError(
                f"decoder {self.spec!r} raised {type(error).__name__}{_where(error)}: {error}"
            ) from None
        if (
            not isinstance(result, tuple)
            or len(result) != 2
            or not isinstance(result[0], Mapping)
            or not isinstance(result[1], Mapping)
        ):
            raise DecoderFailedError(
                f"decoder {self.spec!r} returned {_describe(result)}, expected (record, schema)"
            )
        return result

    def _schema(self, schema: Mapping[str, Any]) -> _Schema:
        known = self._by_identity.get(id(schema))
        if known is not None and known[0] is schema:
            return known[1]
        try:
            canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"))
        except (TypeError, ValueError) as error:
            raise UnsupportedSchemaError(f"decoder schema is not JSON: {error}") from None
        derived = self.schemas.get(canonical)
        if derived is None:
            if len(self.schemas) >= MAX_SCHEMAS_PER_RANGE:
                raise UnsupportedSchemaError(
                    f"decoder {self.spec!r} returned more than {MAX_SCHEMAS_PER_RANGE} distinct "
                    "schemas in one range: return one schema per record type"
                )
            derived = self.schemas[canonical] = _derive(json.loads(canonical), self.enrichment)
        if isinstance(derived, BadInputError):
            raise type(derived)(str(derived))
        if len(self._by_identity) < _IDENTITY_CACHE:
            self._by_identity[id(schema)] = (schema, derived)
        return derived

    @staticmethod
    def framed_schema_id(value: bytes | None) -> int | None:
        return None  # decoded values carry no registry schema id


def _derive(schema: dict, enrichment: EnrichmentConfig) -> _Schema | BadInputError:
    """The derived form of a decoder schema, or the bad input every record of it is."""
    if schema.get("type") != "record":
        return UnsupportedSchemaError(
            f"decoder schema is not an Avro record schema: type {schema.get('type')!r}"
        )
    try:
        parsed = parse_schema(schema, _write_hint=False)
    except Exception as error:  # noqa: BLE001 - fastavro raises several types for a bad schema
        return UnsupportedSchemaError(f"decoder schema is not valid Avro: {error}")
    try:
        file_schema = extended_schema(schema, enrichment)
    except BadInputError as error:
        return error
    names = frozenset(f.get("name") for f in schema.get("fields", ()) if isinstance(f, dict))
    return _Schema(
        parsed,
        _null_last(parsed),
        file_schema,
        declared_schema_id(schema),
        record_full_name(schema),
        names,
    )


def _encode(record: Mapping[str, Any], schema: _Schema) -> bytes:
    """The record's Avro body (checked by :func:`_check` first)."""
    _check(record, schema)
    out = BytesIO()
    try:
        schemaless_writer(out, schema.parsed, record)
    except Exception as error:  # noqa: BLE001 - a value validate let through fastavro cannot write
        raise DecoderSchemaMismatchError(
            f"does not fit the decoder's schema: {type(error).__name__}: {error}"
        ) from None
    return out.getvalue()


def _check(record: Mapping[str, Any], schema: _Schema) -> None:
    """A field the record omits takes the schema's default (fastavro's rule); a top-level key
    the schema lacks is a mismatch, so no decoded value is dropped unseen (keys of nested
    records are not checked)."""
    extra = record.keys() - schema.names
    if extra:
        raise DecoderSchemaMismatchError(
            f"does not fit the decoder's schema: field(s) {sorted(map(str, extra))} not in "
            f"{schema.full_name}"
        )
    try:
        validate(record, schema.checked, raise_errors=True)
    except ValidationError as error:
        raise DecoderSchemaMismatchError(_mismatch(error)) from None


def _null_last(node: Any) -> Any:
    """A copy of a parsed schema whose unions list ``null`` last. A union accepts a value
    whatever the order of its branches, so validation is the same; but fastavro tries the
    branches in order and builds an error (a JSON dump) for each that fails, so with the usual
    ``["null", T]`` every present value paid for a failed ``null`` first: about a third of the
    stage time of a FIX record. Only validation uses it; the writer keeps the schema's own
    order (the branch index is part of the encoding)."""
    if isinstance(node, list):  # a union: the only list that is a type
        branches = [_null_last(branch) for branch in node]
        return [b for b in branches if b != "null"] + [b for b in branches if b == "null"]
    if not isinstance(node, dict):
        return node  # a primitive or a named type's name
    copy = dict(node)
    for key in ("type", "items", "values"):
        if key in copy:
            copy[key] = _null_last(copy[key])
    if isinstance(copy.get("fields"), list):
        copy["fields"] = [_null_last(f) for f in copy["fields"]]
    if isinstance(copy.get("__named_schemas"), dict):
        copy["__named_schemas"] = {n: _null_last(t) for n, t in copy["__named_schemas"].items()}
    return copy


def _mismatch(error: ValidationError) -> str:
    """fastavro names each failing field path; keep the first, on one line."""
    details = [str(e) for e in getattr(error, "errors", ())] or [str(error)]
    return "does not fit the decoder's schema: " + details[0].replace("\n", " ")


def _where(error: BaseException) -> str:
    """`` at file.py:42`` — the innermost frame that raised, so the dead letter points at the
    decoder's line."""
    frames = traceback.extract_tb(error.__traceback__)
    if not frames:
        return ""
    last = frames[-1]
    return f" at {Path(last.filename).name}:{last.lineno}"


def _describe(value: Any) -> str:
    if isinstance(value, tuple):
        return f"a tuple of {len(value)} ({', '.join(type(v).__name__ for v in value)})"
    return f"a {type(value).__name__}"
