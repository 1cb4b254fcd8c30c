"""Kafka Connect ``JsonConverter`` messages with an embedded schema, as the Avro that
``AvroConverter`` would have written for the same record. Pure; derived once per schema.

With ``schemas.enable=true`` (Connect's default) every JSON key and value is an envelope
``{"schema": <Connect schema>, "payload": <the data>}`` (Kafka's JsonConverter/JsonSchema). A
Debezium connector configured with that converter writes its change events this way instead of
as Confluent-framed Avro. :func:`connect_avro` turns the Connect schema into the Avro schema
Confluent's (or Apicurio's) ``AvroConverter`` registers for it — ``AvroData.fromConnectSchema``
with its default configuration — and :meth:`ConnectAvro.datum` turns the JSON payload into the
datum of that schema, so the rest of the stage path (keyed/changes.py cuts the change out of
the encoded body) sees exactly what it sees for the Avro converter's messages.

The rules, AvroData's (io.confluent.connect.avro.AvroData, ``connect.meta.data=true``,
``enhanced.avro.schema.support=false``, ``scrub.invalid.names=false``):

=======================================  ==============================================================
Connect                                  Avro
=======================================  ==============================================================
int8 / int16                             ``int`` with ``connect.type: int8`` / ``int16``
int32 / int64                            ``int`` / ``long``
float32 / float64 / boolean / string     ``float`` / ``double`` / ``boolean`` / ``string``
bytes (base64 in the JSON payload)       ``bytes``; with ``connect.fixed.size`` and a name: ``fixed``
array                                    ``array`` of the items' type
map with string keys                     ``map`` of the values' type
map with other keys (JSON: [[k, v]...])  ``array`` of records ``key``/``value`` named
                                         ``io.confluent.connect.avro.MapEntry`` (or the map's name)
struct                                   ``record`` named by the Connect ``name`` (namespace: up to the
                                         last dot); unnamed ones ``io.confluent.connect.avro.ConnectDefault``,
                                         ``ConnectDefault2``, ... in the order met
optional T                               ``["null", T]``, field default ``null``; ``[T, "null"]`` when the
                                         schema has a default (then the field's default is it)
org.apache.kafka.connect.data.Decimal    ``bytes``, ``logicalType: decimal``, ``scale``, ``precision`` from
                                         ``connect.decimal.precision`` (AvroData's default: 64)
...Date / ...Time / ...Timestamp         ``int`` date / ``int`` time-millis / ``long`` timestamp-millis
any other name (io.debezium.time.*,      its plain type, with ``connect.name`` (semantic types are
io.debezium.data.Json, ...)              for the BigQuery mapping to read)
=======================================  ==============================================================

Every non-union type carries AvroData's properties: ``connect.doc``, ``connect.version``,
``connect.parameters`` (the Connect parameters, strings), ``connect.default`` (the schema's
default, in Avro's JSON form), ``connect.name``, ``connect.type``, and parameters whose key
starts with ``avro`` copied as is. A non-optional schema met a second time is the first one's
Avro type again (a named type: a reference by its full name), as AvroData's ``schemaMap`` does:
the envelope's ``after`` is the ``Value`` record ``before`` defined.

Payloads (Kafka's ``JsonConverter.convertToConnect``): a null or missing value takes the
schema's default (``replace.null.with.default``, on by default), else null when optional, else
it is a mismatch; a Decimal is base64 of its unscaled two's-complement bytes
(``decimal.format=BASE64``, the default) or a JSON number (``NUMERIC``); Date, Time and Timestamp
are integers (days, milliseconds of the day, epoch milliseconds); float ``"NaN"``,
``"Infinity"``, ``"-Infinity"`` (how Jackson quotes them) are those floats. A payload that does
not fit its schema is :class:`~kbqe_dagster.core.errors.JsonSchemaMismatchError` naming the
field path; a schema with no Avro form (an unknown type, a named type defined twice
differently) is :class:`~kbqe_dagster.core.errors.UnsupportedSchemaError`.

:func:`connect_envelope` splits a message into its schema and payload and says what is wrong
with one that is not such an envelope (``schemas.enable=false`` values have no schema: they
are refused with the setting to change). :class:`ConnectJsonReader` caches the conversion per
distinct schema text (messages repeat their schema; it is parsed and converted once).
"""

from __future__ import annotations

import base64
import binascii
import copy
import decimal
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kbqe_dagster.core.errors import (
    BadInputError,
    JsonDecodeError,
    JsonSchemaMismatchError,
    UnsupportedSchemaError,
)
from kbqe_dagster.core.formats.source_format import declared_schema_id

NAMESPACE = "io.confluent.connect.avro"
DEFAULT_SCHEMA_NAME = "ConnectDefault"
MAP_ENTRY_TYPE_NAME = "MapEntry"
DECIMAL = "org.apache.kafka.connect.data.Decimal"
DATE = "org.apache.kafka.connect.data.Date"
TIME = "org.apache.kafka.connect.data.Time"
TIMESTAMP = "org.apache.kafka.connect.data.Timestamp"
DECIMAL_SCALE = "scale"
DECIMAL_PRECISION = "connect.decimal.precision"
DECIMAL_PRECISION_DEFAULT = 64
"""``AvroData.CONNECT_AVRO_DECIMAL_PRECISION_DEFAULT``: a Decimal without the parameter."""
FIXED_SIZE = "connect.fixed.size"
FIELD_DEFAULT_FLAG = NAMESPACE + ".field.default"
RECORD_DOC = NAMESPACE + ".record.doc"
FIELD_DOC_PREFIX = NAMESPACE + ".field.doc."
UNION_NAME = NAMESPACE + ".Union"
GENERALIZED_UNION = "org.apache.kafka.connect.data.Union"

_PRIMITIVES = {
    "int8": "int",
    "int16": "int",
    "int32": "int",
    "int64": "long",
    "float": "float",
    "double": "double",
    "boolean": "boolean",
    "string": "string",
    "bytes": "bytes",
}
_INT_RANGES = {"int8": 8, "int16": 16, "int32": 32, "int64": 64}
_LOGICAL = {DATE: "date", TIME: "time-millis", TIMESTAMP: "timestamp-millis"}
_SPECIAL_FLOATS = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}

Datum = Callable[[Any, str], Any]
"""A compiled payload converter: (JSON value, its field path) → the fastavro datum."""


@dataclass(frozen=True)
class ConnectAvro:
    """The Avro form of one Connect schema and the converter of its payloads."""

    connect: Mapping[str, Any]
    """The Connect schema, as the JSON envelope carries it."""
    avro: Any
    """The Avro schema ``AvroConverter`` registers for it (a record for a struct)."""
    schema_id: int
    """Stable per Connect schema (its canonical JSON): the declared-schema id its staging files
    carry (core/formats/source_format.py), the same on every run and machine."""
    _datum: Datum = field(repr=False, compare=False)

    def datum(self, payload: Any) -> Any:
        """The fastavro datum of ``payload`` (for a writer schema without logical types:
        :func:`plain_writer_schema`); raises JsonSchemaMismatchError naming the field path."""
        return self._datum(payload, "payload")


def connect_avro(connect: Mapping[str, Any]) -> ConnectAvro:
    """The Avro schema and payload converter of the Connect schema ``connect`` (see the module
    docstring); raises UnsupportedSchemaError when it has no Avro form."""
    if not isinstance(connect, Mapping):
        raise UnsupportedSchemaError(f"the Connect schema is not a JSON object: {connect!r:.80}")
    builder = _Builder()
    avro, datum = builder.convert(connect, "schema")
    return ConnectAvro(connect, avro, schema_id(connect), datum)


def schema_id(connect: Mapping[str, Any]) -> int:
    """The declared-schema id of a Connect schema (core/formats/source_format.py's rule over its
    canonical JSON; a non-integral default, parsed as a Decimal, written as a float)."""
    return declared_schema_id(json.loads(canonical_json(connect)))


def canonical_json(connect: Any) -> str:
    """The canonical JSON text of a parsed Connect schema (keys sorted, no spaces)."""
    return json.dumps(connect, sort_keys=True, separators=(",", ":"), default=_number)


def _number(value: Any) -> Any:
    if isinstance(value, decimal.Decimal):
        return float(value)
    raise TypeError(f"not JSON: {value!r}")


def plain_writer_schema(avro: Any) -> Any:
    """``avro`` without its logical types: the encoding is the same, and fastavro then takes
    the payload's integers and bytes as they are (no date or Decimal objects)."""
    if isinstance(avro, list):
        return [plain_writer_schema(branch) for branch in avro]
    if not isinstance(avro, dict):
        return avro
    out = {k: v for k, v in avro.items() if k != "logicalType"}
    if "fields" in out:
        out["fields"] = [{**f, "type": plain_writer_schema(f["type"])} for f in out["fields"]]
    for key in ("items", "values"):
        if key in out:
            out[key] = plain_writer_schema(out[key])
    return out


def connect_envelope(value: bytes) -> tuple[Mapping[str, Any], Any]:
    """The Connect schema and payload of one JsonConverter message; raises JsonDecodeError when
    it is not JSON text of one object, UnsupportedSchemaError when it has no schema."""
    try:
        message = json.loads(value, parse_float=decimal.Decimal)
    except (UnicodeDecodeError, ValueError) as error:
        raise JsonDecodeError(f"not JSON: {error}") from None
    if not isinstance(message, dict):
        raise JsonDecodeError(f"expected a JSON object, got {type(message).__name__}")
    if set(message) == {"schema", "payload"} and message["schema"] is None:
        raise UnsupportedSchemaError(
            "the JSON value's embedded schema is null (a schemaless record): a keyed topic's "
            "values need their Connect schema"
        )
    if set(message) != {"schema", "payload"} or not isinstance(message["schema"], dict):
        raise UnsupportedSchemaError(
            'a JSON value without an embedded Connect schema ({"schema": ..., "payload": '
            "...}): the connector's JsonConverter has schemas.enable=false; set "
            "value.converter.schemas.enable=true (and key.converter.schemas.enable=true), or "
            "use the Avro converter"
        )
    return message["schema"], message["payload"]


def connect_key_fields(key: bytes | None) -> tuple[str, ...] | None:
    """The field names of a JsonConverter key's struct schema (a Debezium ``...Key``), or None
    when ``key`` is not such a key."""
    if not key or not is_json_value(key):
        return None
    try:
        schema, _ = connect_envelope(key)
    except (JsonDecodeError, UnsupportedSchemaError):
        return None
    fields = schema.get("fields")
    if schema.get("type") != "struct" or not isinstance(fields, list):
        return None
    return tuple(f["field"] for f in fields if isinstance(f, dict) and "field" in f)


def is_json_value(value: bytes) -> bool:
    """Whether a message value is JSON text of an object (``{`` after optional whitespace),
    not a Confluent frame (which starts with the magic byte 0x00)."""
    return _JSON_OBJECT.match(value) is not None


_JSON_OBJECT = re.compile(rb"[ \t\r\n]*\{")


# --- the reader: one conversion per distinct schema -------------------------------------------
_PAYLOAD = b',"payload":'
_SCHEMA = b'{"schema":'


class ConnectJsonReader:
    """Reads JsonConverter messages, converting each distinct schema once (``make``: what a
    schema becomes for the caller, from its :class:`ConnectAvro`; its BadInputError is cached
    and raised again for every message of that schema).

    JsonConverter writes ``{"schema":...,"payload":...}`` compactly, schema first, so the
    bytes before ``,"payload":`` identify the schema: a message whose prefix was seen has only
    its payload parsed. Any other layout (spaces, another order) is parsed whole and its schema
    identified by its canonical JSON."""

    MAX_SCHEMAS = 256  # schemas come from data: keep the caches bounded

    def __init__(self, make: Callable[[ConnectAvro], Any]) -> None:
        self.make = make
        self._by_prefix: dict[bytes, Any] = {}
        self._by_canonical: dict[str, Any] = {}
        self._decoder = json.JSONDecoder(parse_float=decimal.Decimal)

    def read(self, value: bytes) -> tuple[Any, Any]:
        """``(make(schema's ConnectAvro), payload)`` of one message; raises the message's or its
        schema's BadInputError."""
        cut = value.find(_PAYLOAD) if value.startswith(_SCHEMA) else -1
        if cut > 0:
            known = self._by_prefix.get(value[:cut])
            if known is not None:
                payload = self._payload(value, cut)
                if payload is not _UNREAD:
                    return _raise_or(known), payload
        schema, payload = connect_envelope(value)
        canonical = canonical_json(schema)
        entry = self._by_canonical.get(canonical)
        if entry is None:
            entry = self._entry(schema)
            self._remember(self._by_canonical, canonical, entry)
        if cut > 0 and _same_schema(value[len(_SCHEMA) : cut], schema):
            self._remember(self._by_prefix, value[:cut], entry)
        return _raise_or(entry), payload

    def _entry(self, schema: Mapping[str, Any]) -> Any:
        try:
            return self.make(connect_avro(schema))
        except BadInputError as error:  # the schema's verdict, for each of its messages
            return error

    def _remember(self, cache: dict[Any, Any], key: Any, entry: Any) -> None:
        if len(cache) >= self.MAX_SCHEMAS:
            cache.clear()
        cache[key] = entry

    def _payload(self, value: bytes, cut: int) -> Any:
        """The payload after a known schema prefix, or ``_UNREAD`` when it is not JsonConverter's
        compact ``<payload>}`` (the whole message is then parsed, and judged, as any other)."""
        try:
            text = value[cut + len(_PAYLOAD) :].decode()
            payload, end = self._decoder.raw_decode(text)
        except (UnicodeDecodeError, ValueError):
            return _UNREAD
        return payload if text[end:].strip() == "}" else _UNREAD


_UNREAD = object()


def _raise_or(entry: Any) -> Any:
    if isinstance(entry, Exception):
        raise type(entry)(str(entry))
    return entry


def _same_schema(text: bytes, schema: Any) -> bool:
    try:
        return bool(json.loads(text, parse_float=decimal.Decimal) == schema)
    except (UnicodeDecodeError, ValueError):
        return False


# --- the schema conversion ---------------------------------------------------------------------
def _canonical(node: Mapping[str, Any]) -> str:
    """The identity of a Connect schema, as ConnectSchema.equals sees it: everything but the
    field name the JSON form keeps in it, non-optional (AvroData's schemaMap holds those)."""
    return canonical_json({k: v for k, v in node.items() if k not in ("field", "optional")})


def _split_name(name: str) -> tuple[str | None, str]:
    namespace, dot, short = name.rpartition(".")
    return (namespace, short) if dot else (None, name)


class _Builder:
    """One ``fromConnectSchema`` call: its named-type bookkeeping and reuse of converted types."""

    def __init__(self) -> None:
        self.reused: dict[str, tuple[Any, Datum]] = {}  # canonical non-optional → (avro, datum)
        self.defined: dict[str, str] = {}  # named type full name → canonical
        self.seen_named: set[str] = set()  # Connect names of fields met (AvroData.seenNamedTypes)
        self.name_index = 0

    def convert(self, node: Any, path: str) -> tuple[Any, Datum]:
        """The Avro type and payload converter of Connect schema ``node`` (``path``: where it is
        in the message's schema, for errors)."""
        if not isinstance(node, Mapping) or not isinstance(node.get("type"), str):
            raise UnsupportedSchemaError(f"{path}: a Connect schema needs a 'type'")
        optional = node.get("optional") is True
        default = node.get("default")
        name = node.get("name")
        if name in (UNION_NAME,) or GENERALIZED_UNION in (node.get("parameters") or {}):
            raise UnsupportedSchemaError(f"{path}: Connect unions are not supported")
        if not optional:
            known = self.reused.get(_canonical(node))
            if known is not None:
                avro, datum = known
                return (_reference(avro), datum)
        if node["type"] == "struct" and optional:
            avro, datum = self.convert({**node, "optional": False}, path)
            # AvroData: ["null", record] whatever the default (which Avro then drops).
            branch = _branch(_reference(avro), datum)
            dflt = None if default is None else _default_datum(branch, default, path)
            return ["null", avro], _optional(branch, dflt)
        annotated, datum = self._base(node, path)
        _annotate(annotated, node)
        # A primitive without properties is written by its name, as Avro writes it.
        base: Any = annotated["type"] if annotated.keys() == {"type"} else annotated
        dflt = None if default is None else _default_datum(datum, default, path)
        if optional:
            avro = [base, "null"] if default is not None else ["null", base]
            datum = _optional(datum, dflt)
        else:
            avro = base
            if default is not None:
                datum = _with_default(datum, dflt)
        if not optional:
            self.reused[_canonical(node)] = (avro, datum)
        return avro, datum

    def _base(self, node: Mapping[str, Any], path: str) -> tuple[dict[str, Any], Datum]:
        kind = node["type"]
        name = node.get("name")
        params = node.get("parameters") or {}
        if kind == "bytes" and name and FIXED_SIZE in params:
            namespace, short = self._name(name)
            size = int(params[FIXED_SIZE])
            fixed = self._named(
                {"type": "fixed", "name": short, "size": size}, namespace, node, path
            )
            return fixed, _fixed(size)
        if kind in _PRIMITIVES:
            base: dict[str, Any] = {"type": _PRIMITIVES[kind]}
            if name == DECIMAL:
                scale = int(params.get(DECIMAL_SCALE, 0))
                precision = int(params.get(DECIMAL_PRECISION, DECIMAL_PRECISION_DEFAULT))
                base.update(scale=scale, precision=precision, logicalType="decimal")
                return base, _decimal(scale)
            if name in _LOGICAL:
                base["logicalType"] = _LOGICAL[name]
            return base, _PRIMITIVE_DATUMS[kind]
        if kind == "array":
            items, item = self.convert(node.get("items"), f"{path}.items")
            return {"type": "array", "items": items}, _array(item)
        if kind == "map":
            return self._map(node, path)
        if kind == "struct":
            return self._record(node, path)
        raise UnsupportedSchemaError(f"{path}: unknown Connect type {kind!r}")

    def _map(self, node: Mapping[str, Any], path: str) -> tuple[dict[str, Any], Datum]:
        keys, values = node.get("keys"), node.get("values")
        if not isinstance(keys, Mapping):
            raise UnsupportedSchemaError(f"{path}: a map schema needs 'keys'")
        if keys.get("type") == "string" and not keys.get("optional"):
            avro, value = self.convert(values, f"{path}.values")
            return {"type": "map", "values": avro}, _string_map(value)
        name = node.get("name")
        namespace: str | None
        internal: str | None
        if name is None:
            namespace, short, internal = NAMESPACE, MAP_ENTRY_TYPE_NAME, None
        else:
            namespace, short = self._name(name)
            internal = MAP_ENTRY_TYPE_NAME
        entry: dict[str, Any] = {"type": "record", "name": short}
        key_field, key = self._field("key", keys, None, f"{path}.keys")
        value_field, value = self._field("value", values, None, f"{path}.values")
        entry["fields"] = [key_field, value_field]
        if internal:
            entry["connect.internal.type"] = internal
        entry = self._named(entry, namespace, node, path)
        return {"type": "array", "items": entry}, _pair_map(key, value)

    def _record(self, node: Mapping[str, Any], path: str) -> tuple[dict[str, Any], Datum]:
        namespace, short = self._name(node.get("name"))
        params = node.get("parameters") or {}
        record: dict[str, Any] = {"type": "record", "name": short}
        if params.get(RECORD_DOC) is not None:
            record["doc"] = params[RECORD_DOC]
        fields = node.get("fields")
        if not isinstance(fields, list):
            raise UnsupportedSchemaError(f"{path}: a struct schema's 'fields' is not a list")
        # Named before its fields, as AvroData does (unnamed structs are numbered in that order).
        record = self._named(record, namespace, node, path)
        avro_fields, datums = [], []
        for spec in fields:
            if not isinstance(spec, Mapping) or not isinstance(spec.get("field"), str):
                raise UnsupportedSchemaError(f"{path}: a struct field without a 'field' name")
            fname = spec["field"]
            doc = params.get(FIELD_DOC_PREFIX + fname)
            avro_field, datum = self._field(fname, spec, doc, f"{path}.{fname}")
            avro_fields.append(avro_field)
            datums.append((fname, datum))
        record["fields"] = avro_fields
        return record, _struct(tuple(datums))

    def _field(
        self, fname: str, spec: Any, doc: str | None, path: str
    ) -> tuple[dict[str, Any], Datum]:
        """AvroData.addAvroRecordField: the field, its default (the schema's, else null when
        optional) and, for a named type met again, its Connect parameters."""
        if not isinstance(spec, Mapping):
            raise UnsupportedSchemaError(f"{path}: not a Connect schema")
        name = spec.get("name")
        again = name is not None and name in self.seen_named
        if name is not None:
            self.seen_named.add(name)
        avro, datum = self.convert(spec, path)
        out: dict[str, Any] = {"name": fname, "type": avro}
        if doc is not None:
            out["doc"] = doc
        default = spec.get("default")
        if default is not None:
            avro_default = _avro_default(spec, default, path)
            if avro_default is not _INVALID and _default_fits(avro, avro_default):
                out["default"] = avro_default
        elif spec.get("optional") is True:
            out["default"] = None
        params = {
            k: v for k, v in (spec.get("parameters") or {}).items() if k != FIELD_DEFAULT_FLAG
        }
        if again and params and _is_named(avro):
            out["connect.parameters"] = params
        return out, datum

    def _name(self, name: Any) -> tuple[str | None, str]:
        if isinstance(name, str) and name:
            return _split_name(name)
        self.name_index += 1
        suffix = str(self.name_index) if self.name_index > 1 else ""
        return NAMESPACE, DEFAULT_SCHEMA_NAME + suffix

    def _named(
        self, avro: dict[str, Any], namespace: str | None, node: Mapping[str, Any], path: str
    ) -> dict[str, Any]:
        full = f"{namespace}.{avro['name']}" if namespace else avro["name"]
        canonical = _canonical(node)
        if self.defined.setdefault(full, canonical) != canonical:
            raise UnsupportedSchemaError(
                f"{path}: two different Connect schemas are both named {full!r} (Avro cannot "
                "define a name twice; AvroConverter refuses this schema too)"
            )
        avro["namespace"] = namespace or ""
        return avro


def _annotate(base: dict[str, Any], node: Mapping[str, Any]) -> None:
    """AvroData's properties of a non-union type (``connect.meta.data=true``)."""
    params = node.get("parameters") or {}
    if node.get("doc") is not None:
        base["connect.doc"] = node["doc"]
    if isinstance(node.get("version"), int):
        base["connect.version"] = node["version"]
    kept = {k: v for k, v in params.items() if k != FIELD_DEFAULT_FLAG}
    if kept:
        base["connect.parameters"] = kept
    if node.get("default") is not None and FIELD_DEFAULT_FLAG not in params:
        value = _avro_default(node, node["default"], "default")
        base["connect.default"] = None if value is _INVALID else value
    if node.get("name") is not None:
        base["connect.name"] = node["name"]
    if node["type"] in ("int8", "int16"):
        base["connect.type"] = node["type"]
    for key, value in params.items():
        if key.startswith("avro"):
            base[key] = value


def _reference(avro: Any) -> Any:
    """A converted type used again: a named type by its full name, any other one again."""
    if isinstance(avro, dict) and avro.get("type") in ("record", "fixed", "enum"):
        namespace = avro.get("namespace")
        return f"{namespace}.{avro['name']}" if namespace else avro["name"]
    return copy.deepcopy(avro)


def _is_named(avro: Any) -> bool:
    branches = avro if isinstance(avro, list) else [avro]
    return any(
        (isinstance(b, dict) and b.get("type") in ("record", "fixed", "enum"))
        or (isinstance(b, str) and b not in _AVRO_PRIMITIVES)
        for b in branches
    )


_AVRO_PRIMITIVES = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
)
_INVALID = object()


def _avro_default(node: Mapping[str, Any], value: Any, path: str) -> Any:
    """A Connect default (JSON payload form) as AvroData.defaultValueFromConnect writes it:
    bytes as ISO-8859-1 text, logical types as their underlying values, a map with non-string
    keys as ``[[k, v], ...]``. ``_INVALID`` when the value does not fit its schema."""
    try:
        return _default_json(node, value, path)
    except (JsonSchemaMismatchError, UnsupportedSchemaError, TypeError, ValueError, KeyError):
        return _INVALID


def _default_json(node: Mapping[str, Any], value: Any, path: str) -> Any:
    if value is None:
        return None
    kind = node["type"]
    if kind == "bytes":
        if node.get("name") == DECIMAL:
            scale = int((node.get("parameters") or {}).get(DECIMAL_SCALE, 0))
            raw = _decimal(scale)(value, path)
        else:
            raw = _PRIMITIVE_DATUMS["bytes"](value, path)
        return raw.decode("iso-8859-1")
    if kind in _PRIMITIVES:
        converted = _PRIMITIVE_DATUMS[kind](value, path)
        return float(converted) if kind in ("float", "double") else converted
    if kind == "array":
        return [_default_json(node["items"], v, path) for v in value]
    if kind == "map":
        keys = node["keys"]
        if keys.get("type") == "string" and not keys.get("optional"):
            return {k: _default_json(node["values"], v, path) for k, v in value.items()}
        return [[_default_json(keys, k, path), _default_json(node["values"], v, path)]
                for k, v in value]  # fmt: skip
    if kind == "struct":
        return {
            f["field"]: _default_json(f, value.get(f["field"], f.get("default")), path)
            for f in node["fields"]
        }
    raise ValueError(kind)


def _default_fits(avro: Any, value: Any, named: Mapping[str, Any] | None = None) -> bool:
    """Whether Avro takes ``value`` as the default of a field of type ``avro`` (a union's by
    its first branch): AvroData drops a default Avro refuses."""
    if isinstance(avro, list):
        return bool(avro) and _default_fits(avro[0], value)
    kind = avro.get("type") if isinstance(avro, dict) else avro
    if kind == "null":
        return value is None
    if kind == "boolean":
        return type(value) is bool
    if kind in ("int", "long"):
        return type(value) is int
    if kind in ("float", "double"):
        return type(value) in (int, float)
    if kind in ("bytes", "string", "fixed", "enum"):
        return isinstance(value, str)
    if kind == "array":
        return isinstance(value, list) and all(_default_fits(avro["items"], v) for v in value)
    if kind == "map":
        return isinstance(value, dict) and all(
            _default_fits(avro["values"], v) for v in value.values()
        )
    if kind == "record":
        return isinstance(value, dict) and all(
            _default_fits(f["type"], value[f["name"]]) if f["name"] in value else "default" in f
            for f in avro["fields"]
        )
    return value is not None  # a named type met before, by its name


# --- the payload conversion --------------------------------------------------------------------
def _mismatch(path: str, wanted: str, value: Any) -> JsonSchemaMismatchError:
    return JsonSchemaMismatchError(f"{path}: expected {wanted}, got {value!r:.60}")


def _int_datum(bits: int) -> Datum:
    low, high = -(1 << (bits - 1)), (1 << (bits - 1)) - 1

    def datum(value: Any, path: str) -> int:
        if type(value) is not int or not low <= value <= high:
            raise _mismatch(path, f"an int{bits}", value)
        return value

    return datum


def _float_datum(value: Any, path: str) -> float:
    if type(value) in (int, float, decimal.Decimal):
        return float(value)
    if isinstance(value, str) and value in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[value]
    raise _mismatch(path, "a number", value)


def _bool_datum(value: Any, path: str) -> bool:
    if type(value) is not bool:
        raise _mismatch(path, "a boolean", value)
    return value


def _string_datum(value: Any, path: str) -> str:
    if not isinstance(value, str):
        raise _mismatch(path, "a string", value)
    return value


def _bytes_datum(value: Any, path: str) -> bytes:
    if not isinstance(value, str):
        raise _mismatch(path, "base64 text (bytes)", value)
    try:
        return base64.b64decode(value, validate=True)
    except (binascii.Error, ValueError):
        raise _mismatch(path, "base64 text (bytes)", value) from None


_PRIMITIVE_DATUMS: dict[str, Datum] = {
    **{kind: _int_datum(bits) for kind, bits in _INT_RANGES.items()},
    "float": _float_datum,
    "double": _float_datum,
    "boolean": _bool_datum,
    "string": _string_datum,
    "bytes": _bytes_datum,
}


def _decimal(scale: int) -> Datum:
    """Decimal: base64 of the unscaled value's two's-complement bytes, or a JSON number
    (``decimal.format=NUMERIC``) scaled exactly to ``scale``; either way written as the Avro
    converter writes the BigDecimal it stands for (the shortest two's complement)."""

    def datum(value: Any, path: str) -> bytes:
        if isinstance(value, str):
            raw = _bytes_datum(value, path)
            if not raw:
                raise _mismatch(path, "a decimal's unscaled bytes", value)
            return _twos_complement(int.from_bytes(raw, "big", signed=True))
        if type(value) in (int, decimal.Decimal):
            unscaled = decimal.Decimal(value).scaleb(scale)
            if unscaled != unscaled.to_integral_value():
                raise _mismatch(path, f"a decimal of scale {scale}", value)
            return _twos_complement(int(unscaled))
        raise _mismatch(path, "a decimal (base64 bytes or a number)", value)

    return datum


def _twos_complement(n: int) -> bytes:
    """Java's BigInteger.toByteArray: the shortest big-endian two's complement."""
    return n.to_bytes(n.bit_length() // 8 + 1, "big", signed=True)


def _fixed(size: int) -> Datum:
    def datum(value: Any, path: str) -> bytes:
        raw = _bytes_datum(value, path)
        if len(raw) != size:
            raise _mismatch(path, f"{size} bytes", value)
        return raw

    return datum


def _default_datum(datum: Datum, default: Any, path: str) -> Any:
    try:
        return datum(default, f"{path}.default")
    except JsonSchemaMismatchError as error:
        raise UnsupportedSchemaError(f"the schema's default does not fit it: {error}") from None


def _branch(full_name: str, inner: Datum) -> Datum:
    """A record in a union, as fastavro's ``(name, record)`` tuple: the writer takes that
    branch without testing the record against each branch (most of its cost otherwise)."""

    def datum(value: Any, where: str) -> Any:
        return (full_name, inner(value, where))

    return datum


def _optional(inner: Datum, default: Any) -> Datum:
    def datum(value: Any, where: str) -> Any:
        if value is None:
            return default
        return inner(value, where)

    return datum


def _with_default(inner: Datum, default: Any) -> Datum:
    def datum(value: Any, where: str) -> Any:
        return default if value is None else inner(value, where)

    return datum


def _array(item: Datum) -> Datum:
    def datum(value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise _mismatch(path, "an array", value)
        return [item(v, f"{path}[{i}]") for i, v in enumerate(value)]

    return datum


def _string_map(item: Datum) -> Datum:
    def datum(value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _mismatch(path, "an object (a map with string keys)", value)
        return {k: item(v, f"{path}.{k}") for k, v in value.items()}

    return datum


def _pair_map(key: Datum, item: Datum) -> Datum:
    def datum(value: Any, path: str) -> list[Any]:
        if not isinstance(value, list):
            raise _mismatch(path, "an array of [key, value] pairs", value)
        out = []
        for i, pair in enumerate(value):
            if not isinstance(pair, list) or len(pair) != 2:
                raise _mismatch(f"{path}[{i}]", "a [key, value] pair", pair)
            out.append(
                {"key": key(pair[0], f"{path}[{i}]"), "value": item(pair[1], f"{path}[{i}]")}
            )
        return out

    return datum


def _struct(fields: tuple[tuple[str, Datum], ...]) -> Datum:
    def datum(value: Any, path: str) -> dict[str, Any]:
        if not isinstance(value, dict):
            raise _mismatch(path, "an object (a struct)", value)
        return {
            name: field_datum(value.get(name), f"{path}.{name}") for name, field_datum in fields
        }

    return datum


__all__ = [
    "ConnectAvro",
    "ConnectJsonReader",
    "connect_avro",
    "connect_envelope",
    "connect_key_fields",
    "is_json_value",
    "plain_writer_schema",
]
