"""Kafka Connect's and Debezium's semantic types as the BigQuery types a user expects.

A Kafka Connect source (Debezium above all) writes a Postgres ``date`` as an Avro ``int`` whose
schema says ``"connect.name": "io.debezium.time.Date"``; BigQuery reads only Avro logical types
(``use_avro_logical_types``), so without this module that column lands as INT64. The Avro
converters (Confluent's, Apicurio's) put Connect's schema name in ``connect.name``; the
JSON-with-schema reader (``keyed/connect_json.py``) writes the same property, so one
mapping serves both encodings.

:func:`semantic_mapping` derives, once per writer schema, the record schema the staged files
carry and, where the bytes must change, a converter of decoded values. Most types need no new
bytes, only a logical type (the encoding is the same), so their columns keep the byte-slicing
fast path (DESIGN.md §5) and the native kernel:

============================================ ========= ============================= =========
``connect.name`` (Avro type)                 Postgres  BigQuery                      bytes
============================================ ========= ============================= =========
io.debezium.time.Date (int)                  date      DATE                          same
io.debezium.time.Time (int, ms)              time(0-3) TIME                          same
io.debezium.time.MicroTime (long)            time      TIME                          same
io.debezium.time.NanoTime (long)             —         TIME (to µs, floor)           converted
io.debezium.time.Timestamp (long, ms)        timestamp TIMESTAMP (wall clock as UTC) same
io.debezium.time.MicroTimestamp (long)       timestamp TIMESTAMP (wall clock as UTC) same
io.debezium.time.NanoTimestamp (long)        —         TIMESTAMP (to µs, floor)      converted
io.debezium.time.ZonedTimestamp (string)     timestamptz TIMESTAMP                   converted
io.debezium.time.ZonedTime (string)          timetz    STRING (no zoned TIME type)   same
io.debezium.time.MicroDuration (long)        interval  INT64 microseconds            same
io.debezium.data.Json (string)               json(b)   JSON (``sqlType: JSON``)      same
io.debezium.data.VariableScaleDecimal        numeric   NUMERIC (scale 9)             converted
org.apache.kafka.connect.data.Decimal        numeric(p,s) NUMERIC / BIGNUMERIC       same
org.apache.kafka.connect.data.Date/Time/     (connect  DATE / TIME / TIMESTAMP       same
Timestamp                                    mode)
Uuid, Enum, EnumSet, Xml, Bits, Year, ...    …         STRING / BYTES / INT64 as sent same
============================================ ========= ============================= =========

Why TIMESTAMP, not DATETIME, for a ``timestamp`` without zone: the open BigQuery sink's
Debezium converters make the same choice (teams moving over keep their column types), a
TIMESTAMP partitions and clusters like every other time column, and BigQuery's DATETIME from
Avro (``local-timestamp-*``) cannot be loaded by the local emulator, so the product could not
be tested as it runs. The value is the source's wall clock read as UTC, as Debezium sends it.
Why NUMERIC for ``numeric`` without a scale: it is exact for every value of at most 29 integer
and 9 fractional digits, and BIGNUMERIC cannot be created on the local emulator; a value that
does not fit exactly is never rounded: it is bad input naming the column
(:class:`UnconvertibleValueError`, dead-lettered by the topic's policy).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from kbqe_dagster.core.errors import UnconvertibleValueError
from kbqe_dagster.core.formats.avro_names import AVRO_PRIMITIVES, NamedTypes, namespace_of

CONNECT_NAME = "connect.name"
JSON_SQL_TYPE = "JSON"

NUMERIC_PRECISION = 38
NUMERIC_SCALE = 9
_NUMERIC_LIMIT = 10**NUMERIC_PRECISION

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROS = 1_000_000
# BigQuery's TIMESTAMP range, 0001-01-01 to 9999-12-31 23:59:59.999999, in microseconds.
_MIN_MICROS = -62_135_596_800_000_000
_MAX_MICROS = 253_402_300_799_999_999

Converter = Callable[[Any], Any]


def _logical(avro_type: str, logical: str) -> Callable[[Mapping[str, Any]], dict[str, Any]]:
    def mapped(node: Mapping[str, Any]) -> dict[str, Any]:
        if node.get("type") != avro_type:
            raise _Unexpected(node, avro_type)
        return {**node, "logicalType": logical}

    return mapped


def _json_column(node: Mapping[str, Any]) -> dict[str, Any]:
    if node.get("type") != "string":
        raise _Unexpected(node, "string")
    return {**node, "sqlType": JSON_SQL_TYPE}


def _connect_decimal(node: Mapping[str, Any]) -> dict[str, Any]:
    """Connect's Decimal: the converters usually set ``logicalType: decimal`` already; the
    precision is ``connect.decimal.precision`` when the source knows it."""
    if node.get("type") != "bytes":
        raise _Unexpected(node, "bytes")
    parameters = node.get("connect.parameters") or {}
    scale = int(node.get("scale", parameters.get("scale", 0)))
    precision = node.get("precision", parameters.get("connect.decimal.precision"))
    if precision is None:
        return dict(node)  # no precision known: the bytes stay BYTES, as sent
    return {**node, "logicalType": "decimal", "precision": int(precision), "scale": scale}


class _Unexpected(Exception):
    def __init__(self, node: Mapping[str, Any], wanted: str) -> None:
        super().__init__(
            f"{node.get(CONNECT_NAME)} is declared on {node.get('type')!r}, expected {wanted!r}"
        )


SAME_BYTES: dict[str, Callable[[Mapping[str, Any]], dict[str, Any]]] = {
    "io.debezium.time.Date": _logical("int", "date"),
    "io.debezium.time.Time": _logical("int", "time-millis"),
    "io.debezium.time.MicroTime": _logical("long", "time-micros"),
    "io.debezium.time.Timestamp": _logical("long", "timestamp-millis"),
    "io.debezium.time.MicroTimestamp": _logical("long", "timestamp-micros"),
    "io.debezium.data.Json": _json_column,
    "org.apache.kafka.connect.data.Date": _logical("int", "date"),
    "org.apache.kafka.connect.data.Time": _logical("int", "time-millis"),
    "org.apache.kafka.connect.data.Timestamp": _logical("long", "timestamp-millis"),
    "org.apache.kafka.connect.data.Decimal": _connect_decimal,
}
"""Semantic types whose encoding is already the logical type's: only the schema changes."""


# --- types whose values change ----------------------------------------------------------------
def _nanos_to_micros(value: int) -> int:
    return value // 1000


def _zoned_timestamp(value: str) -> int:
    """Debezium's ZonedTimestamp (ISO 8601 with an offset, ``2024-01-02T03:04:05.123456Z``)
    as epoch microseconds."""
    try:
        moment = datetime.fromisoformat(value)
    except (TypeError, ValueError) as err:
        raise ValueError(f"{value!r} is not an ISO 8601 timestamp with an offset") from err
    if moment.tzinfo is None:
        raise ValueError(f"{value!r} has no UTC offset")
    delta = moment - _EPOCH
    micros = (delta.days * 86_400 + delta.seconds) * _MICROS + delta.microseconds
    if not _MIN_MICROS <= micros <= _MAX_MICROS:
        raise ValueError(f"{value!r} is outside BigQuery's TIMESTAMP range")
    return micros


def _variable_scale_decimal(value: Mapping[str, Any]) -> bytes:
    """Debezium's VariableScaleDecimal ``{scale, value}`` (big-endian two's complement
    unscaled bytes) as the unscaled bytes of a NUMERIC (scale 9), exactly or not at all."""
    scale = int(value["scale"])
    unscaled: int = int.from_bytes(value["value"], "big", signed=True)
    if unscaled == 0:
        return b"\x00"
    # Bound the powers of ten by the digits there are, so that no scale (an int32 from the
    # wire) makes a number of billions of digits: beyond them the answer is already known.
    digits = len(str(abs(unscaled)))
    if scale < NUMERIC_SCALE - NUMERIC_PRECISION or scale - NUMERIC_SCALE > digits:
        raise ValueError(
            f"a numeric of {digits} digits at scale {scale} has no exact NUMERIC (38 digits, "
            "9 decimal places)"
        )
    if scale <= NUMERIC_SCALE:
        unscaled *= int(10 ** (NUMERIC_SCALE - scale))
    else:
        divisor = 10 ** (scale - NUMERIC_SCALE)
        if unscaled % divisor:
            raise ValueError(
                f"{_decimal_text(unscaled, scale)} has more than {NUMERIC_SCALE} decimal "
                "places (NUMERIC); use a numeric(p,s) column or decimal.handling.mode=string"
            )
        unscaled //= divisor
    if abs(unscaled) >= _NUMERIC_LIMIT:
        raise ValueError(
            f"{_decimal_text(unscaled, NUMERIC_SCALE)} has more than "
            f"{NUMERIC_PRECISION - NUMERIC_SCALE} integer digits (NUMERIC)"
        )
    length = max(1, (unscaled.bit_length() + 8) // 8)  # room for the sign bit
    return unscaled.to_bytes(length, "big", signed=True)


def _decimal_text(unscaled: int, scale: int) -> str:
    sign, digits = ("-" if unscaled < 0 else ""), str(abs(unscaled)).rjust(scale + 1, "0")
    return f"{sign}{digits[: len(digits) - scale]}.{digits[len(digits) - scale :]}".rstrip(".")


@dataclass(frozen=True)
class _ValueRule:
    avro_type: str
    schema: Callable[[Mapping[str, Any]], Any]
    convert: Converter


def _keep_props(node: Mapping[str, Any], **avro: Any) -> dict[str, Any]:
    kept = {k: v for k, v in node.items() if k.startswith("connect.")}
    return {**avro, **kept}


NEW_BYTES: dict[str, _ValueRule] = {
    "io.debezium.time.NanoTime": _ValueRule(
        "long",
        lambda n: _keep_props(n, type="long", logicalType="time-micros"),
        _nanos_to_micros,
    ),
    "io.debezium.time.NanoTimestamp": _ValueRule(
        "long",
        lambda n: _keep_props(n, type="long", logicalType="timestamp-micros"),
        _nanos_to_micros,
    ),
    "io.debezium.time.ZonedTimestamp": _ValueRule(
        "string",
        lambda n: _keep_props(n, type="long", logicalType="timestamp-micros"),
        _zoned_timestamp,
    ),
    "io.debezium.data.VariableScaleDecimal": _ValueRule(
        "record",
        lambda n: _keep_props(
            n,
            type="bytes",
            logicalType="decimal",
            precision=NUMERIC_PRECISION,
            scale=NUMERIC_SCALE,
        ),
        _variable_scale_decimal,
    ),
}
"""Semantic types whose values must be re-encoded (decode, convert, encode)."""

KERNEL_KINDS: dict[str, str] = {
    "io.debezium.time.ZonedTimestamp": "zoned_timestamp",
    "io.debezium.data.VariableScaleDecimal": "variable_scale_decimal",
    "io.debezium.time.NanoTimestamp": "nanos_to_micros",
    "io.debezium.time.NanoTime": "nanos_to_micros",
}
"""The native kernel's name (kernel/src/connect_types.rs) of each :data:`NEW_BYTES` type: it
re-encodes such a top-level field, or a ``[null, T]`` union of one, of a keyed row itself."""


# --- the mapping of one record schema ---------------------------------------------------------
@dataclass(frozen=True)
class SemanticMapping:
    """What staging does with one writer record schema's semantic types."""

    writer: dict[str, Any]
    """The writer record schema, as the source sent it."""
    schema: dict[str, Any]
    """The record schema the staged files carry (the writer schema with logical types)."""
    converters: Mapping[str, Converter] = field(default_factory=dict)
    """Top-level field → converter of its decoded value, for the fields whose bytes change."""
    changed: bool = False
    """Whether :attr:`schema` differs from the writer schema at all."""
    kernel_kinds: Mapping[str, str] = field(default_factory=dict)
    """Top-level field → :data:`KERNEL_KINDS` kind, for the converted fields the native kernel
    re-encodes itself (the type, or a union of null and it); a converted field not here (a
    semantic value inside an array, a record, a wider union) is the Python path's."""

    def kernel_rewrites(self) -> tuple[tuple[int, str], ...]:
        """The converted fields as the native kernel takes them: (index among the writer's
        top-level fields, kind), in field order. ValueError when one is not the kernel's."""
        names = [f["name"] for f in self.writer["fields"]]
        missing = sorted(set(self.converters) - set(self.kernel_kinds))
        if missing:
            raise ValueError(f"semantic values the kernel does not re-encode in {missing}")
        return tuple((names.index(n), k) for n, k in self.kernel_kinds.items())

    @property
    def rewrites_values(self) -> bool:
        return bool(self.converters)

    def convert(self, record: Mapping[str, Any]) -> dict[str, Any]:
        """``record`` (decoded with the writer schema) with its values in :attr:`schema`'s
        form; :class:`UnconvertibleValueError` names the column of a value that has none."""
        out = dict(record)
        for name, convert in self.converters.items():
            try:
                out[name] = convert(out.get(name))
            except (ValueError, KeyError, TypeError, OverflowError) as err:
                raise UnconvertibleValueError(f"column {name!r}: {err}") from err
        return out


def semantic_mapping(record: Mapping[str, Any]) -> SemanticMapping:
    """The mapping of a record schema's semantic types (module docstring), or the schema as
    is when it has none. A ``connect.name`` on an Avro type it does not fit (a Date on a
    string) is left as sent: the column keeps the type the bytes have."""
    walker = _Walker()
    fields = []
    converters: dict[str, Converter] = {}
    kernel_kinds: dict[str, str] = {}
    namespace = namespace_of(record, None)
    walker.named.remember(record, None)
    for f in record["fields"]:
        mapped, convert = walker.map(f["type"], namespace)
        fields.append(_field(f, mapped, convert))
        if convert is not None:
            converters[f["name"]] = convert
            kind = _kernel_kind(f["type"], walker.named, namespace)
            if kind is not None:
                kernel_kinds[f["name"]] = kind
    if not walker.changed:
        return SemanticMapping(dict(record), dict(record))
    schema = {**copy.deepcopy(dict(record)), "fields": fields}
    return SemanticMapping(
        dict(record), schema, converters, changed=True, kernel_kinds=kernel_kinds
    )


def _kernel_kind(avro: Any, named: NamedTypes, namespace: str | None) -> str | None:
    """The :data:`KERNEL_KINDS` kind of a converted field's type: a :data:`NEW_BYTES` type (by
    definition or by name), alone or beside null in a two-branch union; None otherwise."""
    if isinstance(avro, list):
        if len(avro) != 2 or "null" not in avro or avro[0] == avro[1]:
            return None
        (avro,) = [b for b in avro if b != "null"]
    if isinstance(avro, str) and avro not in AVRO_PRIMITIVES:
        avro = named.resolve(avro, namespace)
    if not isinstance(avro, Mapping):
        return None
    name = avro.get(CONNECT_NAME)
    if name not in KERNEL_KINDS or avro.get("type") != NEW_BYTES[name].avro_type:
        return None
    return KERNEL_KINDS[name]


class _Walker:
    def __init__(self) -> None:
        self.named = NamedTypes()
        self.changed = False
        self._records: dict[str, tuple[Any, Converter | None]] = {}

    def map(self, avro: Any, namespace: str | None) -> tuple[Any, Converter | None]:
        if isinstance(avro, list):
            return self._union(avro, namespace)
        if isinstance(avro, str):
            if avro in AVRO_PRIMITIVES:
                return avro, None
            target = self.named.resolve(avro, namespace)
            full = target.get(CONNECT_NAME) if isinstance(target, Mapping) else None
            if full in NEW_BYTES:  # a reference to a converted named type: its new form
                return self.map(target, namespace)
            key = _full(target, namespace) if isinstance(target, Mapping) else avro
            if key in self._records:
                mapped, convert = self._records[key]
                return (avro if mapped is None else mapped), convert
            return avro, None
        if not isinstance(avro, Mapping):
            return avro, None
        name = avro.get(CONNECT_NAME)
        kind = avro.get("type")
        if name in NEW_BYTES and kind == NEW_BYTES[name].avro_type:
            rule = NEW_BYTES[name]
            if kind == "record":
                self.named.remember(avro, namespace)
            self.changed = True
            return rule.schema(avro), rule.convert
        if name in SAME_BYTES and "logicalType" not in avro:
            try:
                mapped = SAME_BYTES[name](avro)
            except _Unexpected:
                return avro, None
            self.changed = self.changed or mapped != avro
            return mapped, None
        if kind == "record":
            return self._record(avro, namespace)
        if kind == "array":
            items, convert = self.map(avro["items"], namespace)
            return {**avro, "items": items}, (None if convert is None else _each(convert))
        if kind == "map":
            values, convert = self.map(avro["values"], namespace)
            return {**avro, "values": values}, (None if convert is None else _each_value(convert))
        if kind in ("enum", "fixed"):
            self.named.remember(avro, namespace)
        return avro, None

    def _record(self, avro: Mapping[str, Any], namespace: str | None) -> tuple[Any, Any]:
        self.named.remember(avro, namespace)
        inner = namespace_of(avro, namespace)
        fields, converters = [], {}
        for f in avro["fields"]:
            mapped, convert = self.map(f["type"], inner)
            fields.append(_field(f, mapped, convert))
            if convert is not None:
                converters[f["name"]] = convert
        out = {**avro, "fields": fields}
        convert_record = _fields(converters) if converters else None
        self._records[_full(avro, namespace)] = (None, convert_record)
        return out, convert_record

    def _union(self, branches: list[Any], namespace: str | None) -> tuple[Any, Any]:
        mapped = [self.map(b, namespace) for b in branches]
        converting = [(i, c) for i, (_, c) in enumerate(mapped) if c is not None]
        non_null = [b for b in branches if b != "null"]
        if converting and len(non_null) > 1:
            # Which branch a decoded value took is not known here: leave the union as sent.
            return branches, None
        convert = converting[0][1] if converting else None
        return [m for m, _ in mapped], (None if convert is None else _unless_null(convert))


def _field(f: Mapping[str, Any], mapped: Any, convert: Converter | None) -> dict[str, Any]:
    """A field with its mapped type; a default of a converted type converted too (or dropped
    when it has no converted form: BigQuery never reads Avro defaults, fastavro would)."""
    out = {**f, "type": mapped}
    if convert is not None and out.get("default") is not None:
        try:
            out["default"] = convert(out["default"])
        except (ValueError, KeyError, TypeError, OverflowError):
            del out["default"]
        if isinstance(out.get("default"), bytes):
            out["default"] = out["default"].decode("latin-1")  # Avro JSON's bytes defaults
    return out


def _full(named: Mapping[str, Any], namespace: str | None) -> str:
    name = str(named.get("name", ""))
    if "." in name:
        return name
    ns = named.get("namespace", namespace)
    return f"{ns}.{name}" if ns else name


def _unless_null(convert: Converter) -> Converter:
    return lambda value: None if value is None else convert(value)


def _each(convert: Converter) -> Converter:
    return lambda values: None if values is None else [convert(v) for v in values]


def _each_value(convert: Converter) -> Converter:
    return lambda values: None if values is None else {k: convert(v) for k, v in values.items()}


def _fields(converters: Mapping[str, Converter]) -> Converter:
    def convert(value: Any) -> Any:
        if value is None:
            return None
        out = dict(value)
        for name, conv in converters.items():
            out[name] = conv(out.get(name))
        return out

    return convert
