"""The Avro record a Protobuf message type is staged as, and the converter of its parsed
messages (``topics[].format: protobuf``). Derived once per (registry schema id, message
indexes); pure: it reads descriptor objects (``google.protobuf.descriptor.Descriptor``, or
anything with the same attributes) and messages through their attributes, and imports no
Protobuf runtime.

Mapping, field by field:

==================================================  ==========================================
Protobuf                                            Avro (BigQuery)
==================================================  ==========================================
message ``pkg.Outer.Inner``                         record named ``pkg.Outer.Inner`` (its full
                                                    name), fields in declaration order
``int32`` / ``sint32`` / ``sfixed32``               int (INTEGER)
``int64`` / ``sint64`` / ``sfixed64``               long (INTEGER)
``uint32`` / ``fixed32``                            long (INTEGER): 2^32-1 does not fit an int
``uint64`` / ``fixed64``                            long, range-checked: a value above 2^63-1
                                                    is ``protobuf_decode_error``
``float`` / ``double``                              float / double (FLOAT)
``bool`` / ``string`` / ``bytes``                   boolean / string / bytes
enum ``pkg.Color``                                  enum named ``pkg.Color``, its value names
                                                    as symbols (STRING)
``repeated T``                                      array of T's mapping (REPEATED)
``map<K, V>``                                       map of V's mapping; keys as strings:
                                                    integers in decimal, bools ``true`` /
                                                    ``false`` (Protobuf's JSON spelling);
                                                    entries sorted by key
message-typed field, ``oneof`` member,              ``["null", T]``, default null (NULLABLE)
proto3 ``optional``, proto2 ``optional``
``google.protobuf.Timestamp``                       long ``timestamp-micros`` (TIMESTAMP),
                                                    nullable as a message field; nanoseconds
                                                    truncated to microseconds
``google.protobuf.StringValue``, ``Int64Value``...  the wrapped scalar's mapping, nullable
(the nine wrappers)
==================================================  ==========================================

**Unset fields.** Protobuf (proto3) does not tell an unset scalar from its default: an unset
``int32`` is 0, a ``string`` is ``""``, an enum is its value numbered 0, a repeated field or
map is empty. Those are staged as Protobuf reads them (the default), never null. Only fields
with *presence* are null when unset: message-typed fields (wrappers and ``Timestamp``
included), ``oneof`` members (all but the one set), proto3 ``optional`` and proto2
``optional`` fields. A proto2 ``required`` field is never null (a message lacking it does not
parse). Elements of repeated fields and map values are never null.

**Map order.** A map's entries are written sorted by their Protobuf key (strings by code
point, integers by value, ``false`` before ``true``), not in the runtime's iteration order:
upb iterates a map in its hash table's order, which is seeded per process, so the same message
staged twice (a retried range, the native kernel's ``kernel/src/protobuf.rs``) would otherwise
give different file bytes.

**Order and evolution.** Fields are in declaration order, not field-number order: a new field
is appended at the end of its message by every style guide, so a later registry version's
record keeps the older one's columns first and the new one last, and the table widens
(``ALLOW_FIELD_ADDITION``) as for Avro. BigQuery matches loads by name, so a field declared
in the middle only changes where the new column shows.

**Refused** (:class:`UnmappableProtobufSchemaError`, naming the construct and the field path):
a recursive message (``google.protobuf.Struct`` / ``Value`` / ``ListValue`` are recursive too),
a message without fields (``google.protobuf.Empty`` included: BigQuery has no empty RECORD).
Other well-known types (``Duration``, ``Any``, ``FieldMask``...) map as the messages they are.
Extensions and unknown fields are not staged: a record has the columns its schema declares.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kbqe_dagster.core.errors import ProtobufDecodeError, UnmappableProtobufSchemaError

Converter = Callable[[Any], Any]

# FieldDescriptorProto.Type numbers (descriptor.proto; stable on the wire forever).
_DOUBLE, _FLOAT, _INT64, _UINT64, _INT32, _FIXED64, _FIXED32, _BOOL, _STRING = range(1, 10)
_GROUP, _MESSAGE, _BYTES, _UINT32, _ENUM, _SFIXED32, _SFIXED64, _SINT32, _SINT64 = range(10, 19)
_SCALARS = {
    _INT32: "int",
    _SINT32: "int",
    _SFIXED32: "int",
    _INT64: "long",
    _SINT64: "long",
    _SFIXED64: "long",
    _UINT32: "long",
    _FIXED32: "long",
    _UINT64: "long",
    _FIXED64: "long",
    _FLOAT: "float",
    _DOUBLE: "double",
    _BOOL: "boolean",
    _STRING: "string",
    _BYTES: "bytes",
}
_UNSIGNED_64 = {_UINT64, _FIXED64}
_LONG_MAX = 2**63 - 1
TIMESTAMP = "google.protobuf.Timestamp"
_WRAPPERS = {
    "google.protobuf.DoubleValue": _DOUBLE,
    "google.protobuf.FloatValue": _FLOAT,
    "google.protobuf.Int64Value": _INT64,
    "google.protobuf.UInt64Value": _UINT64,
    "google.protobuf.Int32Value": _INT32,
    "google.protobuf.UInt32Value": _UINT32,
    "google.protobuf.BoolValue": _BOOL,
    "google.protobuf.StringValue": _STRING,
    "google.protobuf.BytesValue": _BYTES,
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class ProtobufMapping:
    """A message type's Avro record and the converter of its parsed messages."""

    avro_schema: dict[str, Any]
    _convert: Converter

    def convert(self, message: Any) -> dict[str, Any]:
        """The Avro-form record of a parsed message; a value with no Avro form raises
        :class:`ProtobufDecodeError` naming the field."""
        record: dict[str, Any] = self._convert(message)
        return record


def map_protobuf_message(descriptor: Any) -> ProtobufMapping:
    """The mapping of one message type (a ``Descriptor``). Raises
    :class:`UnmappableProtobufSchemaError`."""
    avro, convert = _Mapper().record(descriptor, descriptor.full_name)
    return ProtobufMapping(avro, convert)


def message_at(file_descriptor: Any, indexes: tuple[int, ...]) -> Any:
    """The message type Confluent's message indexes name in a file (core/formats/protobuf_wire.py):
    the first picks a top-level message, each next one a nested message of the previous, in
    descriptor order: a map field's synthetic ``...Entry`` message counts where the field
    stands, as Confluent's serializers (Java and Python) count it."""
    types = file_descriptor.message_types_by_name
    candidates = list(types.values())
    descriptor = None
    for depth, index in enumerate(indexes):
        if index >= len(candidates):
            raise ProtobufDecodeError(
                f"message indexes {list(indexes)} name no message of {file_descriptor.name} "
                f"(level {depth} has {len(candidates)})"
            )
        descriptor = candidates[index]
        candidates = list(descriptor.nested_types)
    if descriptor is None:
        raise ProtobufDecodeError("message indexes: none given")
    return descriptor


class _Mapper:
    def __init__(self) -> None:
        # A named type (record or enum) is defined once in an Avro schema and referenced by its
        # full name afterwards; its converter is shared.
        self.converters: dict[str, Converter] = {}
        self.resolving: list[str] = []

    def record(self, descriptor: Any, path: str) -> tuple[Any, Converter]:
        name = descriptor.full_name
        if name in self.converters:
            return name, self.converters[name]
        if name in self.resolving:
            cycle = " → ".join([*self.resolving[self.resolving.index(name) :], name])
            raise UnmappableProtobufSchemaError(
                f"a recursive message ({cycle}) has no fixed column layout, at {path}"
            )
        if not descriptor.fields:
            raise UnmappableProtobufSchemaError(
                f"message {name} has no fields (BigQuery has no empty RECORD), at {path}"
            )
        self.resolving.append(name)
        fields, getters = [], []
        for field in descriptor.fields:
            avro, getter = self.field(field, f"{path}.{field.name}")
            fields.append(avro)
            getters.append((field.name, getter))
        self.resolving.pop()

        def convert(message: Any) -> dict[str, Any]:
            return {key: get(message) for key, get in getters}

        self.converters[name] = convert
        return {"type": "record", "name": name, "fields": fields}, convert

    def field(self, field: Any, path: str) -> tuple[dict[str, Any], Converter]:
        name = field.name
        entry = field.message_type
        if field.is_repeated and entry is not None and entry.GetOptions().map_entry:
            key_field, value_field = entry.fields_by_name["key"], entry.fields_by_name["value"]
            values, value_of = self.element(value_field, f"{path}.value")
            key_of = _map_key(key_field.type)
            return (
                {"name": name, "type": {"type": "map", "values": values}},
                lambda m: {key_of(k): value_of(v) for k, v in sorted(getattr(m, name).items())},
            )
        avro, convert = self.element(field, path)
        if field.is_repeated:
            return (
                {"name": name, "type": {"type": "array", "items": avro}},
                lambda m: [convert(v) for v in getattr(m, name)],
            )
        if field.has_presence and not field.is_required:
            return (
                {"name": name, "type": ["null", avro], "default": None},
                lambda m: convert(getattr(m, name)) if m.HasField(name) else None,
            )
        if convert is _same:
            return {"name": name, "type": avro}, lambda m: getattr(m, name)
        return {"name": name, "type": avro}, lambda m: convert(getattr(m, name))

    def element(self, field: Any, path: str) -> tuple[Any, Converter]:
        """The mapping of one present value of ``field`` (not its repetition or nullability)."""
        kind = field.type
        if kind in (_MESSAGE, _GROUP):
            full_name = field.message_type.full_name
            if full_name == TIMESTAMP:
                return {"type": "long", "logicalType": "timestamp-micros"}, _timestamp(path)
            if full_name in _WRAPPERS:
                wrapped = _WRAPPERS[full_name]
                scalar = _scalar(wrapped, path)
                return _SCALARS[wrapped], lambda m: scalar(m.value)
            return self.record(field.message_type, path)
        if kind == _ENUM:
            return self.enum(field.enum_type)
        if kind in _SCALARS:
            return _SCALARS[kind], _scalar(kind, path)
        raise UnmappableProtobufSchemaError(f"field type {kind} is not a Protobuf type, at {path}")

    def enum(self, descriptor: Any) -> tuple[Any, Converter]:
        name = descriptor.full_name
        symbols: dict[int, str] = {}
        for value in descriptor.values:  # with allow_alias, the first name of a number wins
            symbols.setdefault(value.number, value.name)

        def convert(number: int) -> str:
            try:
                return symbols[number]
            except KeyError:
                raise ProtobufDecodeError(f"enum {name} has no value numbered {number}") from None

        if name in self.converters:
            return name, self.converters[name]
        self.converters[name] = convert
        return {
            "type": "enum",
            "name": name,
            "symbols": [v.name for v in descriptor.values],
        }, convert


def _same(value: Any) -> Any:
    return value


def _scalar(kind: int, path: str) -> Converter:
    if kind not in _UNSIGNED_64:
        return _same

    def in_long_range(value: int) -> int:
        if value > _LONG_MAX:
            raise ProtobufDecodeError(
                f"{path}: {value} is above 2^63-1, the largest Avro long (a uint64 past it "
                "has no column type)"
            )
        return value

    return in_long_range


def _timestamp(path: str) -> Converter:
    def convert(value: Any) -> datetime:
        try:
            return _EPOCH + timedelta(seconds=value.seconds, microseconds=value.nanos // 1000)
        except OverflowError:
            raise ProtobufDecodeError(
                f"{path}: Timestamp {value.seconds}s {value.nanos}ns is outside years 1-9999"
            ) from None

    return convert


def _map_key(kind: int) -> Converter:
    if kind == _STRING:
        return _same
    if kind == _BOOL:
        return lambda key: "true" if key else "false"
    return str
