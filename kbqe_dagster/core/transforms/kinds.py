"""One compiler per transform kind (core/transforms/specs.py): each checks its spec against the
record schema's fields as the previous transforms left them, changes those fields (the
derived schema) and returns the step that changes each record the same way. A step raises
:class:`StepFailure` naming the field; core/transforms/compiler.py turns it into the error naming the
transform."""

from __future__ import annotations

import hmac
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, NamedTuple
from zoneinfo import ZoneInfo

from fastavro import parse_schema
from fastavro.validation import validate
from simpleeval import EvalWithCompoundTypes, InvalidExpression

from kbqe_dagster.core.record.dead_letter_record import MAX_TIMESTAMP_MS
from kbqe_dagster.core.record.routing import resolve_function
from kbqe_dagster.core.transforms.specs import (
    AddField,
    CastField,
    ComputeField,
    ConvertTimestamp,
    DropFields,
    FunctionTransform,
    MaskField,
    MaskMethod,
    MessageSource,
    RenameField,
    TimeFormat,
    avro_type,
    expression_names,
    target_field,
)
from kbqe_dagster.core.transforms.values import (
    EPOCH,
    MICROS,
    converter,
    format_time,
    from_micros,
    parse_time,
    to_micros,
)


class MessageMeta(NamedTuple):
    """What a transform may read of the Kafka message besides its record."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None = None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] | None = None


def message_meta(msg: Any) -> MessageMeta:
    """The :class:`MessageMeta` of a consumed Kafka message (confluent-kafka's ``Message``, or
    anything that answers like it); a timestamp of type 0, "not available", is None."""
    ts_type, ts = msg.timestamp()
    return MessageMeta(
        msg.topic(),
        msg.partition(),
        msg.offset(),
        ts if ts_type != 0 else None,
        msg.key(),
        msg.headers(),
    )


Step = Callable[[dict[str, Any], MessageMeta], None]
"""One compiled transform: changes the record dict in place; raises StepFailure(field, why)."""


class StepFailure(Exception):
    """A transform cannot apply to a field (of a schema, or of a record)."""

    def __init__(self, field: str, why: str) -> None:
        super().__init__(why)
        self.field = field


# --- schema helpers ----------------------------------------------------------------------------
def _find(fields: list[dict[str, Any]], name: str) -> int:
    for position, item in enumerate(fields):
        if item["name"] == name:
            return position
    raise StepFailure(name, "is not in the record schema at this point")


def _absent(fields: list[dict[str, Any]], name: str) -> None:
    if any(item["name"] == name for item in fields):
        raise StepFailure(name, "already exists (rename or drop it first)")


def _split_null(avro: Any) -> tuple[Any, bool]:
    """(the non-null branch, nullable) of a type: T or [null, T] / [T, null]."""
    if isinstance(avro, list):
        others = [t for t in avro if t != "null"]
        if len(others) == 1:
            return others[0], len(others) < len(avro)
        return avro, "null" in avro
    return avro, False


def _base_name(avro: Any) -> tuple[str, str | None]:
    """(primitive type, logical type) of a non-union type."""
    if isinstance(avro, dict):
        return str(avro.get("type")), avro.get("logicalType")
    return str(avro), None


def _nullable(avro: Any) -> Any:
    base, nullable = _split_null(avro)
    return avro if nullable else ["null", base]


def _new_field(name: str, avro: Any) -> dict[str, Any]:
    entry = {"name": name, "type": avro}
    if isinstance(avro, list) and avro and avro[0] == "null":
        entry["default"] = None
    return entry


def _set_type(fields: list[dict[str, Any]], position: int, avro: Any) -> None:
    """Give a field a new type; an old default may not fit it, a nullable one defaults null."""
    entry = {k: v for k, v in fields[position].items() if k != "default"}
    entry["type"] = avro
    if isinstance(avro, list) and avro and avro[0] == "null":
        entry["default"] = None
    fields[position] = entry


def _wrap(base: Any, nullable: bool) -> Any:
    return ["null", base] if nullable else base


# --- one compiler per kind: check the schema, change ``fields``, return the step ------------
def _add(spec: AddField, fields: list[dict[str, Any]], _key: bytes | None) -> Step:
    _absent(fields, spec.add)
    if spec.header is not None or spec.message is MessageSource.KEY:
        return _add_raw(spec, fields)
    if spec.message is not None:
        return _add_meta(spec.add, spec.message, fields)
    return _add_constant(spec, fields)


def _add_raw(spec: AddField, fields: list[dict[str, Any]]) -> Step:
    """The key or a header: nullable string (UTF-8) or bytes."""
    name, header, as_bytes = spec.add, spec.header, spec.type == "bytes"
    fields.append(_new_field(name, ["null", "bytes" if as_bytes else "string"]))

    def raw(record: dict[str, Any], meta: MessageMeta) -> None:
        raw_value = meta.key if header is None else _last_header(meta.headers, header)
        value: bytes | str | None = raw_value
        if raw_value is not None and not as_bytes:
            try:
                value = bytes(raw_value).decode("utf-8")
            except UnicodeDecodeError:
                raise StepFailure(name, "the value is not UTF-8 text (use type: bytes)") from None
        record[name] = value

    return raw


_META_TYPES: dict[MessageSource, Any] = {
    MessageSource.TOPIC: "string", MessageSource.PARTITION: "int", MessageSource.OFFSET: "long",
    MessageSource.TIMESTAMP: ["null", {"type": "long", "logicalType": "timestamp-millis"}],
}  # fmt: skip


def _add_meta(name: str, source: MessageSource, fields: list[dict[str, Any]]) -> Step:
    fields.append(_new_field(name, _META_TYPES[source]))
    if source is not MessageSource.TIMESTAMP:
        attribute = source.value

        def coordinate(record: dict[str, Any], meta: MessageMeta) -> None:
            record[name] = getattr(meta, attribute)

        return coordinate

    def timestamp(record: dict[str, Any], meta: MessageMeta) -> None:
        # Null when Kafka has none (-1) or past year 9999, as the enrichment column does.
        ts = meta.timestamp_ms
        known = ts is not None and 0 <= ts <= MAX_TIMESTAMP_MS
        record[name] = EPOCH + timedelta(milliseconds=ts) if ts is not None and known else None

    return timestamp


def _add_constant(spec: AddField, fields: list[dict[str, Any]]) -> Step:
    name, value = spec.add, spec.value
    avro = avro_type(spec.type) if spec.type else _constant_type(value, name)
    if not validate(
        value, avro if isinstance(avro, str) else parse_schema(avro), raise_errors=False
    ):
        raise StepFailure(name, f"the constant {value!r} is not a {spec.type or avro}")
    fields.append(_new_field(name, avro))

    def constant(record: dict[str, Any], _meta: MessageMeta) -> None:
        record[name] = value

    return constant


def _constant_type(value: Any, name: str) -> str:
    for kind, avro in ((bool, "boolean"), (int, "long"), (float, "double"), (str, "string")):
        if isinstance(value, kind):
            return avro
    raise StepFailure(name, f"cannot tell the type of {value!r}; give type")


def _last_header(headers: Sequence[tuple[str, bytes | None]] | None, name: str) -> bytes | None:
    found = None
    for key, value in headers or ():
        if key == name:
            found = value  # Kafka's convention: the last header of a name wins
    return found


def _rename(spec: RenameField, fields: list[dict[str, Any]], _key: bytes | None) -> Step:
    position = _find(fields, spec.rename)
    _absent(fields, spec.to)
    fields[position] = {**fields[position], "name": spec.to}
    fields[position].pop("aliases", None)
    old, new = spec.rename, spec.to

    def rename(record: dict[str, Any], _meta: MessageMeta) -> None:
        record[new] = record.pop(old, None)

    return rename


def _drop(spec: DropFields, fields: list[dict[str, Any]], _key: bytes | None) -> Step:
    for name in spec.drop:
        del fields[_find(fields, name)]
    names = spec.drop

    def drop(record: dict[str, Any], _meta: MessageMeta) -> None:
        for name in names:
            record.pop(name, None)

    return drop


_MASKABLE = {"string", "bytes", "int", "long"}


def _mask(spec: MaskField, fields: list[dict[str, Any]], key: bytes | None) -> Step:
    name = spec.mask
    position = _find(fields, name)
    base, nullable = _split_null(fields[position]["type"])
    if spec.method is MaskMethod.NULL:
        _set_type(fields, position, _nullable(fields[position]["type"]))

        def null_out(record: dict[str, Any], _meta: MessageMeta) -> None:
            record[name] = None

        return null_out
    primitive, logical = _base_name(base)
    if primitive not in _MASKABLE or logical is not None:
        raise StepFailure(name, f"is a {_describe(base)}; hmac masks string, bytes, int or long")
    _set_type(fields, position, _wrap("string", nullable))
    assert key is not None, "hmac_keys() provides the key of every hmac mask"

    def digest(value: Any) -> str:
        data = value if isinstance(value, bytes) else str(value).encode("utf-8")
        return hmac.digest(key, data, "sha256").hex()  # one-shot: OpenSSL's fast path

    return _replace_value(name, nullable, digest)


def _replace_value(name: str, nullable: bool, convert: Callable[[Any], Any],
                   errors: tuple[type[Exception], ...] = (),
                   failure: Callable[[Any, Exception], str] | None = None) -> Step:  # fmt: skip
    """The step that replaces field ``name`` by ``convert(value)``: a null stays null where the
    field may be null and is a missing field otherwise; ``errors`` from ``convert`` fail the
    record with ``failure(value, error)``."""

    def step(record: dict[str, Any], _meta: MessageMeta) -> None:
        value = record.get(name)
        if value is None:
            if not nullable:
                raise StepFailure(name, "is missing from the record")
            return
        try:
            record[name] = convert(value)
        except errors as error:
            raise StepFailure(name, failure(value, error) if failure else str(error)) from None

    return step


def _describe(avro: Any) -> str:
    primitive, logical = _base_name(avro)
    return f"{primitive} ({logical})" if logical else primitive


_CASTABLE = {"string": "string", "int": "long", "long": "long", "float": "double",
             "double": "double", "boolean": "boolean"}  # fmt: skip


def _cast(spec: CastField, fields: list[dict[str, Any]], _key: bytes | None) -> Step:
    name = spec.cast
    position = _find(fields, name)
    base, nullable = _split_null(fields[position]["type"])
    primitive, logical = _base_name(base)
    source = _CASTABLE.get(primitive) if logical is None else None
    if source is None:
        raise StepFailure(
            name, f"is a {_describe(base)}; cast reads string, int, long, float, double or boolean"
        )
    _set_type(fields, position, _wrap(spec.to.value, nullable))
    convert = converter(source, spec.to)

    return _replace_value(
        name,
        nullable,
        convert,
        (ValueError, OverflowError),
        lambda value, error: f"{value!r} is not a {spec.to.value}: {error}",
    )


def _timestamp(spec: ConvertTimestamp, fields: list[dict[str, Any]], _key: bytes | None) -> Step:
    name = spec.timestamp
    position = _find(fields, name)
    base, nullable = _split_null(fields[position]["type"])
    read = _time_reader(spec, base, name)
    write = _time_writer(spec)
    _set_type(fields, position, _wrap(_TIME_TYPES[spec.to], nullable))

    return _replace_value(
        name,
        nullable,
        lambda value: write(read(value)),
        (ValueError, OverflowError, TypeError, KeyError, AttributeError),
        lambda value, error: f"{value!r} is not a timestamp here: {error}",
    )


_TIME_TYPES: dict[TimeFormat, Any] = {
    TimeFormat.EPOCH_S: "long", TimeFormat.EPOCH_MS: "long", TimeFormat.EPOCH_US: "long",
    TimeFormat.TIMESTAMP_MILLIS: {"type": "long", "logicalType": "timestamp-millis"},
    TimeFormat.TIMESTAMP_MICROS: {"type": "long", "logicalType": "timestamp-micros"},
    TimeFormat.STRING: "string",
}  # fmt: skip


def _time_reader(spec: ConvertTimestamp, base: Any, name: str) -> Callable[[Any], int]:
    """A function from the input value to microseconds since the epoch."""
    primitive, logical = _base_name(base)
    if logical in ("timestamp-millis", "timestamp-micros"):
        # fastavro hands aware datetimes; a JSON topic's values are still numbers.
        per = 10**3 if logical == "timestamp-millis" else 1
        return lambda value: to_micros(value) if isinstance(value, datetime) else int(value) * per
    if primitive in ("long", "int") and logical is None:
        if spec.epoch_unit is None:
            raise StepFailure(name, f"is a plain {primitive}: give epoch_unit (s, ms or us)")
        per = MICROS[spec.epoch_unit.value]
        return lambda value: int(value) * per
    if primitive == "string" and logical is None:
        zone = ZoneInfo(spec.zone)
        pattern = spec.input_format
        return lambda value: to_micros(parse_time(value, pattern, zone))
    raise StepFailure(
        name,
        f"is a {_describe(base)}; timestamp reads a timestamp, a long or int epoch, or a string",
    )


def _time_writer(spec: ConvertTimestamp) -> Callable[[int], Any]:
    if spec.to in MICROS:
        per = MICROS[spec.to]
        return lambda micros: micros // per
    if spec.to is TimeFormat.STRING:
        zone = ZoneInfo(spec.zone)
        pattern = spec.format
        return lambda micros: format_time(from_micros(micros).astimezone(zone), pattern)
    return from_micros


def _none_first(*values: Any) -> Any:
    return next((value for value in values if value is not None), None)


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "str": str, "int": int, "float": float, "bool": bool, "len": len, "abs": abs,
    "round": round, "min": min, "max": max, "lower": lambda s: s.lower(),
    "upper": lambda s: s.upper(), "strip": lambda s: s.strip(), "coalesce": _none_first,
}  # fmt: skip
"""The functions an expression may call: no I/O, no imports, no randomness (a range staged
twice must give the same records)."""
_CONSTANTS = {"True", "False", "None"}


def _compute(spec: ComputeField, fields: list[dict[str, Any]], _key: bytes | None) -> Step:
    name = spec.compute
    known = {item["name"] for item in fields}
    unknown = expression_names(spec.expression) - known - FUNCTIONS.keys() - _CONSTANTS
    if unknown:
        raise StepFailure(
            name,
            f"the expression reads {', '.join(sorted(unknown))}, not in the "
            "record schema at this point",
        )
    avro = avro_type(spec.type)
    check = _checker(avro)
    evaluator = EvalWithCompoundTypes(functions=FUNCTIONS)
    parsed = evaluator.parse(spec.expression.strip())
    fields[:] = [item for item in fields if item["name"] != name]
    fields.append(_new_field(name, avro))

    def compute(record: dict[str, Any], _meta: MessageMeta) -> None:
        evaluator.names = record
        try:
            value = evaluator.eval(spec.expression, previously_parsed=parsed)
        except (
            InvalidExpression,
            ArithmeticError,
            TypeError,
            ValueError,
            AttributeError,
            KeyError,
            IndexError,
        ) as error:
            why = f"{spec.expression!r} failed: {type(error).__name__}: {error}"
            raise StepFailure(name, why) from None
        record[name] = check(name, value)

    return compute


def _checker(avro: Any) -> Callable[[str, Any], Any]:
    """Checks a computed value against its declared type (ints widen to double)."""
    base, nullable = _split_null(avro)
    primitive, _ = _base_name(base)
    parsed = parse_schema(avro) if not isinstance(avro, str) else avro

    def check(name: str, value: Any) -> Any:
        whole = isinstance(value, int) and not isinstance(value, bool)
        if primitive in ("double", "float") and whole:
            value = float(value)
        if isinstance(value, bool) and primitive in ("int", "long", "double", "float"):
            raise StepFailure(name, f"gave {value!r} (bool), not a {primitive}")
        if not validate(value, parsed, raise_errors=False):
            raise StepFailure(
                name,
                f"gave {value!r} ({type(value).__name__}), not a "
                f"{'nullable ' if nullable else ''}{primitive}",
            )
        return value

    return check


def _function(spec: FunctionTransform, fields: list[dict[str, Any]], _key: bytes | None) -> Step:
    for name in spec.fields:
        _absent(fields, name)
    function = resolve_function(spec.function)
    checks = {name: _checker(avro_type(type_name)) for name, type_name in spec.fields.items()}
    fields.extend(_new_field(name, avro_type(t)) for name, t in spec.fields.items())
    expected = {item["name"] for item in fields}
    declared = set(spec.fields)
    first = target_field(spec)

    def call(record: dict[str, Any], _meta: MessageMeta) -> None:
        try:
            out = function(dict(record))
        except Exception as error:  # noqa: BLE001 - a user function's failure fails its record
            why = f"{spec.function} raised {type(error).__name__}: {error}"
            raise StepFailure(first, why) from None
        if not isinstance(out, Mapping):
            raise StepFailure(first, f"{spec.function} returned a {type(out).__name__}, not a dict")
        out = dict(out)
        # A JSON record may omit an optional field or carry keys outside its schema: what came
        # in may come back, and what the schema has must not get lost.
        extra = out.keys() - expected - record.keys()
        missing = ((record.keys() & expected) | declared) - out.keys()
        if extra or missing:
            raise StepFailure(
                first,
                f"{spec.function} returned undeclared field(s) "
                f"{sorted(extra)} / lost field(s) {sorted(missing)}",
            )
        for name, check in checks.items():
            out[name] = check(name, out.get(name))
        record.clear()
        record.update(out)

    return call


COMPILERS: dict[type, Callable[[Any, list[dict[str, Any]], bytes | None], Step]] = {
    AddField: _add, RenameField: _rename, DropFields: _drop, MaskField: _mask,
    CastField: _cast, ConvertTimestamp: _timestamp, ComputeField: _compute,
    FunctionTransform: _function,
}  # fmt: skip
