"""Rows of a staged Avro file as the BigQuery Storage Write API takes them: a protobuf
``DescriptorProto`` for the file's schema, and each record serialized as that message.

The fields are the BigQuery columns the load path derives from the same Avro schema
(``resources/bigquery/schema.py``, BigQuery's "Avro conversions" with logical types on):
same names in the same order, same nesting, REPEATED as ``repeated``, an Avro map as a
repeated ``{key, value}`` message. So a table created by a load job takes appended rows of
the same file schema, and a table created for appends takes later loads: one table contract
for both deliveries. The enrichment columns (core/record/enrichment.py) are ordinary fields
of the file schema and map like any other: ``_event_date`` DATE, ``_kafka_timestamp`` and
``_event_hour`` TIMESTAMP, ``_kafka_headers`` a repeated record.

Types (the Storage Write API's "Supported protocol buffer data types" table):

=========================== ================ ===================================================
BigQuery column             proto field      value
=========================== ================ ===================================================
BOOLEAN                     ``bool``
INTEGER (int, long)         ``int64``        INTEGER is 64-bit whatever the Avro width
FLOAT (float, double)       ``double``       an Avro float widened exactly, as a load does
STRING (string, enum, uuid) ``string``       an enum's symbol; a uuid's canonical text
BYTES (bytes, fixed)        ``bytes``
DATE                        ``int32``        days since 1970-01-01 (the API's preferred form)
TIMESTAMP                   ``int64``        microseconds since the epoch (millis × 1000)
DATETIME (local-timestamp)  ``string``       ``YYYY-MM-DD HH:MM:SS.ffffff`` literal
TIME                        ``string``       ``HH:MM:SS.ffffff`` literal
NUMERIC / BIGNUMERIC        ``string``       the decimal in plain notation (never exponent):
                                             the API also takes a BigDecimalByteStringEncoder
                                             ``bytes`` form, which only the Java client ships
RECORD                      nested message   declared in ``nested_type`` of its parent: the
                                             API wants one self-contained descriptor
=========================== ================ ===================================================

Modes: the descriptor is proto2; NULLABLE and REQUIRED columns are both ``optional`` fields
and a null is an unset field. REQUIRED is BigQuery's to enforce: a ``required`` label would
make the client refuse to serialize the row, hiding the API's own reason for refusing it
(which the dead-letter path records). A record decoded under its Avro schema always has a
value for a non-null field anyway. REPEATED columns cannot hold a null: an array item that
is null (``array<[null, T]>``, which BigQuery maps to REPEATED T) raises
:class:`RowEncodeError`, as a load job of that file fails.

Values: what fastavro decodes (``datetime``/``date``/``time``, ``Decimal``, ``UUID``) or the
raw Avro values (ints, bytes) alike.

Pure: protobuf is a data library (descriptors, messages); nothing here talks to a system.
"""

from __future__ import annotations

import datetime as dt
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from itertools import count
from typing import TYPE_CHECKING, Any, TypeAlias

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from kbqe_dagster.core.errors import RowEncodeError, UnsupportedSchemaError
from kbqe_dagster.core.formats.avro_names import NamedTypes, namespace_of

__all__ = [
    "MAX_REQUEST_BYTES",
    "ProtoRows",
    "RowEncodeError",
    "batches",
    "encode_rows",
    "proto_rows",
    "proto_schema",
]

MAX_REQUEST_BYTES = 9_000_000
"""Serialized rows per AppendRows request: the API refuses a request over 10 MB (its rows,
the writer schema and the stream name); 1 MB is left for the rest."""

F = descriptor_pb2.FieldDescriptorProto
if TYPE_CHECKING:
    _ProtoType: TypeAlias = descriptor_pb2.FieldDescriptorProto.Type.ValueType
_EPOCH_DATE = dt.date(1970, 1, 1)
_EPOCH = dt.datetime(1970, 1, 1, tzinfo=dt.UTC)
_MICRO = dt.timedelta(microseconds=1)


@dataclass(frozen=True)
class ProtoRows:
    """One AppendRows request's payload: the writer schema and the serialized rows, in order
    (a row's index here is the index the API's row errors name)."""

    descriptor: descriptor_pb2.DescriptorProto
    rows: tuple[bytes, ...]

    @property
    def size(self) -> int:
        return sum(len(r) for r in self.rows)


def proto_schema(
    avro_file_schema: Mapping[str, Any], source: str = "avro file"
) -> descriptor_pb2.DescriptorProto:
    """The writer schema (a self-contained proto2 ``DescriptorProto``) of rows of
    ``avro_file_schema``, a record schema as the stage path writes it. A fresh copy: the
    caller may modify it. Raises :class:`UnsupportedSchemaError` naming ``source`` and the
    field for a type BigQuery cannot hold (as the load path's schema mapping does)."""
    out = descriptor_pb2.DescriptorProto()
    out.CopyFrom(_compiled(_schema_key(avro_file_schema), source).descriptor)
    return out


def encode_rows(
    avro_file_schema: Mapping[str, Any],
    records: Iterable[Mapping[str, Any]],
    source: str = "avro file",
) -> list[bytes]:
    """Each record (a dict as fastavro decodes it) serialized as a message of
    :func:`proto_schema` ``(avro_file_schema)``. The compiled schema is cached per schema.
    Raises :class:`RowEncodeError` naming ``source``, the record's index and the field for a
    value the row cannot carry."""
    encode = row_encoder(avro_file_schema, source)
    return [encode(record, index) for index, record in enumerate(records)]


def row_encoder(
    avro_file_schema: Mapping[str, Any], source: str = "avro file"
) -> Callable[[Mapping[str, Any], int], bytes]:
    """:func:`encode_rows` for one record at a time, the schema compiled (and its cache key
    computed) once: ``encode(record, index)`` → the row; ``index`` names the record in a
    :class:`RowEncodeError`. For a file's records, one call per record."""
    compiled = _compiled(_schema_key(avro_file_schema), source)
    message_class, plan = compiled.message_class, compiled.plan

    def encode(record: Mapping[str, Any], index: int = 0) -> bytes:
        message = message_class()
        try:
            _fill(message, plan, record)
        except (TypeError, ValueError, AttributeError, KeyError, OverflowError) as exc:
            error = RowEncodeError(f"{source}: record {index}: {exc}")
            error.index = index
            raise error from exc
        data: bytes = message.SerializeToString()
        return data

    return encode


def proto_rows(
    avro_file_schema: Mapping[str, Any],
    records: Iterable[Mapping[str, Any]],
    source: str = "avro file",
) -> ProtoRows:
    """:func:`proto_schema` and :func:`encode_rows` together, as one request's payload."""
    return ProtoRows(
        proto_schema(avro_file_schema, source),
        tuple(encode_rows(avro_file_schema, records, source)),
    )


def batches(rows: Sequence[bytes], max_bytes: int = MAX_REQUEST_BYTES) -> Iterator[list[bytes]]:
    """``rows`` in order, cut into consecutive lists whose encoded size in a request (each
    row plus its field tag and length prefix) stays within ``max_bytes``. A row larger than
    ``max_bytes`` on its own comes alone in its batch: the API refuses it (the caller's row
    error, never an endless split)."""
    batch: list[bytes] = []
    size = 0
    for row in rows:
        cost = len(row) + 1 + _varint_size(len(row))
        if batch and size + cost > max_bytes:
            yield batch
            batch, size = [], 0
        batch.append(row)
        size += cost
    if batch:
        yield batch


def _varint_size(n: int) -> int:
    return max(1, (n.bit_length() + 6) // 7)


# --- compiling a schema ----------------------------------------------------------------------
@dataclass
class _FieldPlan:
    name: str
    kind: str  # "scalar" | "message"
    repeated: bool
    convert: Callable[[Any], Any] | None  # scalars: Avro value → proto value
    nested: _MessagePlan | None = None  # messages
    entries: bool = False  # a map: dict → [{"key", "value"}]


@dataclass
class _MessagePlan:
    fields: list[_FieldPlan]


@dataclass
class _Compiled:
    descriptor: descriptor_pb2.DescriptorProto
    plan: _MessagePlan
    message_class: type


def _schema_key(schema: Mapping[str, Any]) -> str:
    return json.dumps(schema, sort_keys=True, separators=(",", ":"))


_file_numbers = count()
_cache: OrderedDict[str, _Compiled] = OrderedDict()
_cache_lock = threading.Lock()
_CACHE_SIZE = 128


def _compiled(schema_key: str, source: str) -> _Compiled:
    """The compiled schema, cached by the schema alone (``source`` only names it in errors:
    every file of one schema shares one entry)."""
    with _cache_lock:
        found = _cache.get(schema_key)
        if found is not None:
            _cache.move_to_end(schema_key)
            return found
    compiled = _compile(schema_key, source)
    with _cache_lock:
        _cache[schema_key] = compiled
        while len(_cache) > _CACHE_SIZE:
            _cache.popitem(last=False)
    return compiled


def _compile(schema_key: str, source: str) -> _Compiled:
    schema = json.loads(schema_key)
    if not isinstance(schema, dict) or schema.get("type") not in ("record", "error"):
        raise UnsupportedSchemaError(f"{source}: the Avro schema is not a record schema")
    builder = _Builder(source)
    descriptor = descriptor_pb2.DescriptorProto(name=_message_name(schema))
    plan = builder.record(descriptor, schema, path="", namespace=None)
    pool = descriptor_pool.DescriptorPool()
    file_name = f"kbqe_avro_proto_{next(_file_numbers)}.proto"
    file = descriptor_pb2.FileDescriptorProto(name=file_name, syntax="proto2")
    file.message_type.add().CopyFrom(descriptor)
    # types-protobuf leaves DescriptorPool's methods unannotated.
    pool.Add(file)  # type: ignore[no-untyped-call]
    message_class = message_factory.GetMessageClass(pool.FindMessageTypeByName(descriptor.name))  # type: ignore[no-untyped-call]
    return _Compiled(descriptor, plan, message_class)


def _message_name(record: Mapping[str, Any]) -> str:
    name = str(record.get("name") or "Row").rpartition(".")[2]
    return name or "Row"


_PRIMITIVES: dict[str, tuple[_ProtoType, Callable[[Any], Any]]] = {
    "boolean": (F.TYPE_BOOL, bool),
    "int": (F.TYPE_INT64, int),
    "long": (F.TYPE_INT64, int),
    "float": (F.TYPE_DOUBLE, float),
    "double": (F.TYPE_DOUBLE, float),
    "bytes": (F.TYPE_BYTES, bytes),
    "string": (F.TYPE_STRING, str),
}


class _Builder:
    """Walks an Avro record schema as ``resources/bigquery/schema.py`` does (named types
    resolved by full name, unions ``[null, T]`` only) and emits descriptor fields and the
    plan that fills them."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.names = NamedTypes()  # named types met so far, for references by name

    def record(
        self,
        message: descriptor_pb2.DescriptorProto,
        record: Mapping[str, Any],
        path: str,
        namespace: str | None,
    ) -> _MessagePlan:
        self.names.remember(record, namespace)
        return self._fields(
            message, record.get("fields") or (), path, namespace_of(record, namespace)
        )

    def _fields(
        self,
        message: descriptor_pb2.DescriptorProto,
        fields: Sequence[Any],
        path: str,
        namespace: str | None,
    ) -> _MessagePlan:
        taken = {str(f["name"]) for f in fields}
        return _MessagePlan(
            [
                self.field(
                    message,
                    taken,
                    number,
                    str(f["name"]),
                    f["type"],
                    f"{path}.{f['name']}" if path else str(f["name"]),
                    namespace,
                )
                for number, f in enumerate(fields, start=1)
            ]
        )

    def field(
        self,
        message: descriptor_pb2.DescriptorProto,
        taken: set[str],
        number: int,
        name: str,
        avro: Any,
        path: str,
        namespace: str | None,
    ) -> _FieldPlan:
        avro = self.names.resolve(self._non_null(avro, path), namespace)
        repeated = entries = False
        if isinstance(avro, dict) and avro.get("type") == "array":
            repeated = True
            # BigQuery has no NULL inside an array: [null, T] → T (a null item: RowEncodeError)
            avro = self.names.resolve(self._non_null(avro["items"], f"{path}[]"), namespace)
            if isinstance(avro, dict) and avro.get("type") in ("array", "map"):
                raise UnsupportedSchemaError(f"{self.source}: field {path} is an array of arrays")
        elif isinstance(avro, dict) and avro.get("type") == "map":
            repeated = entries = True
        proto = message.field.add(
            name=name, number=number, label=F.LABEL_REPEATED if repeated else F.LABEL_OPTIONAL
        )
        if entries or (isinstance(avro, dict) and avro.get("type") in ("record", "error")):
            nested = message.nested_type.add(name=_free_name(name, taken))
            taken.add(nested.name)
            proto.type = F.TYPE_MESSAGE
            proto.type_name = nested.name
            if entries:  # BigQuery's map: REPEATED RECORD (key STRING, value T)
                entry = [
                    {"name": "key", "type": "string"},
                    {"name": "value", "type": avro["values"]},
                ]
                plan = self._fields(nested, entry, path, namespace)
            else:
                plan = self.record(nested, avro, path, namespace)
            return _FieldPlan(name, "message", repeated, None, plan, entries)
        proto.type, convert = self.scalar(avro, path, namespace)
        return _FieldPlan(name, "scalar", repeated, convert)

    def _non_null(self, avro: Any, path: str) -> Any:
        if not isinstance(avro, list):
            return avro
        branches = [b for b in avro if b != "null"]
        if len(branches) != 1:
            raise UnsupportedSchemaError(
                f"{self.source}: field {path} is a union of {len(branches)} non-null types; "
                "BigQuery takes only [null, T] unions"
            )
        return branches[0]

    def scalar(
        self, avro: Any, path: str, namespace: str | None
    ) -> tuple[_ProtoType, Callable[[Any], Any]]:
        if isinstance(avro, str):
            if avro in _PRIMITIVES:
                return _PRIMITIVES[avro]
            raise UnsupportedSchemaError(
                f"{self.source}: field {path} has unknown Avro type {avro!r}"
            )
        if not isinstance(avro, dict):
            raise UnsupportedSchemaError(
                f"{self.source}: field {path} has an unreadable Avro type {avro!r}"
            )
        kind = avro.get("type")
        logical = avro.get("logicalType")
        if kind == "enum":
            self.names.remember(avro, namespace)
            return F.TYPE_STRING, str
        if kind == "fixed":
            self.names.remember(avro, namespace)
            if logical == "decimal":
                return F.TYPE_STRING, _decimal_text(avro, path, self.source)
            return F.TYPE_BYTES, bytes
        if kind == "bytes" and logical == "decimal":
            return F.TYPE_STRING, _decimal_text(avro, path, self.source)
        special = _LOGICAL.get((kind, logical))
        if special is not None:
            return special
        if isinstance(kind, (str, dict, list)):  # {"type": "long"}, or an unknown logical type
            resolved = self.names.resolve(kind, namespace)
            if isinstance(resolved, dict) and resolved.get("type") in ("record", "array", "map"):
                raise UnsupportedSchemaError(
                    f"{self.source}: field {path} wraps a {resolved['type']} in a type object"
                )
            return self.scalar(resolved, path, namespace)
        raise UnsupportedSchemaError(
            f"{self.source}: field {path} has an unreadable Avro type {avro!r}"
        )


def _free_name(field_name: str, taken: set[str]) -> str:
    """A nested message's name: fields and nested types share one scope in a descriptor."""
    name = f"{field_name[:1].upper()}{field_name[1:]}Message"
    while name in taken:
        name += "_"
    return name


# --- values ----------------------------------------------------------------------------------
def _date_days(value: Any) -> int:
    if isinstance(value, dt.datetime):
        value = value.date()
    if isinstance(value, dt.date):
        return (value - _EPOCH_DATE).days
    return int(value)


def _micros(value: Any, per_unit: int) -> int:
    """An instant as microseconds since the epoch: a datetime (naive is UTC, as fastavro
    writes it) exactly, or a raw Avro count of ``1 / per_unit``-second units."""
    if isinstance(value, dt.datetime):
        if value.tzinfo is None:
            value = value.replace(tzinfo=dt.UTC)
        micros: int = (value - _EPOCH) // _MICRO
        return micros
    return int(value) * (1_000_000 // per_unit)


def _local_datetime_text(per_unit: int) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        if not isinstance(value, dt.datetime):
            value = dt.datetime(1970, 1, 1) + dt.timedelta(
                microseconds=int(value) * (1_000_000 // per_unit)
            )
        text: str = value.replace(tzinfo=None).isoformat(sep=" ", timespec="microseconds")
        return text

    return convert


def _time_text(per_unit: int) -> Callable[[Any], str]:
    def convert(value: Any) -> str:
        if not isinstance(value, dt.time):
            micros = int(value) * (1_000_000 // per_unit)
            seconds, micro = divmod(micros, 1_000_000)
            minutes, second = divmod(seconds, 60)
            hour, minute = divmod(minutes, 60)
            value = dt.time(hour, minute, second, micro)
        text: str = value.replace(tzinfo=None).isoformat(timespec="microseconds")
        return text

    return convert


def _decimal_text(avro: Mapping[str, Any], path: str, source: str) -> Callable[[Any], str]:
    precision = int(avro.get("precision", 0))
    scale = int(avro.get("scale", 0))
    digits = precision - scale
    if not (0 <= scale <= 38 and 1 <= digits <= 38):
        raise UnsupportedSchemaError(
            f"{source}: field {path} is decimal({precision}, {scale}); BigQuery's NUMERIC "
            "and BIGNUMERIC cannot hold it"
        )

    def convert(value: Any) -> str:
        if isinstance(value, (bytes, bytearray)):  # the raw Avro two's-complement unscaled int
            value = Decimal(int.from_bytes(value, "big", signed=True)).scaleb(-scale)
        return format(Decimal(value), "f")

    return convert


_LOGICAL: dict[tuple[Any, Any], tuple[_ProtoType, Callable[[Any], Any]]] = {
    ("int", "date"): (F.TYPE_INT32, _date_days),
    ("int", "time-millis"): (F.TYPE_STRING, _time_text(1_000)),
    ("long", "time-micros"): (F.TYPE_STRING, _time_text(1_000_000)),
    ("long", "timestamp-millis"): (F.TYPE_INT64, lambda v: _micros(v, 1_000)),
    ("long", "timestamp-micros"): (F.TYPE_INT64, lambda v: _micros(v, 1_000_000)),
    ("long", "local-timestamp-millis"): (F.TYPE_STRING, _local_datetime_text(1_000)),
    ("long", "local-timestamp-micros"): (F.TYPE_STRING, _local_datetime_text(1_000_000)),
    ("string", "uuid"): (F.TYPE_STRING, str),  # a UUID's str is its canonical text
}


def _fill(message: Any, plan: _MessagePlan, record: Mapping[str, Any], path: str = "") -> None:
    for field in plan.fields:
        value: Any = record.get(field.name)
        if value is None:
            continue  # a null; an absent REPEATED value is an empty one
        where = f"{path}.{field.name}" if path else field.name
        if field.entries:
            value = [{"key": k, "value": v} for k, v in value.items()]
        convert = field.convert
        if convert is not None:  # a scalar
            if field.repeated:
                getattr(message, field.name).extend(convert(_item(v, where)) for v in value)
            else:
                setattr(message, field.name, convert(value))
            continue
        nested = field.nested
        assert nested is not None  # a message field has its plan
        if field.repeated:
            container = getattr(message, field.name)
            for item in value:
                _fill(container.add(), nested, _item(item, where), where)
        else:
            child = getattr(message, field.name)
            child.SetInParent()  # a record with only null fields is still not NULL
            _fill(child, nested, value, where)


def _item(value: Any, path: str) -> Any:
    if value is None:
        raise ValueError(
            f"field {path} holds a null array item; BigQuery's REPEATED columns cannot hold NULL"
        )
    return value
