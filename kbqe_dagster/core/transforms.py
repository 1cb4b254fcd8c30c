"""Per-record transforms (``topics[].transforms``): the output schema derived once per input
schema, then applied to every record of that schema (DESIGN.md §10).

:func:`compile_transforms` walks the specs (core/transform_specs.py) over an Avro record
schema, checking each against the schema as the previous ones left it, and returns a
:class:`Compiled` with ``output_schema`` and ``apply(record, meta) -> record``. Transforms run
after decoding and before routing, event time and enrichment, so those read the transformed
fields.

Two kinds of failure, both ``transform_failed`` naming the transform as
``transforms[INDEX] (KIND)`` and the field:

- **Schema**: the transform cannot apply to the schema (renaming or casting a field that is
  not there, adding one that is, a plain number to a timestamp without ``epoch_unit``, an
  expression naming an unknown field). For ``format: json`` the schema is in the pipeline file,
  so this is a config error at ``topics[i].transforms[j]`` when the file is read. For Avro
  topics the schema comes with the first message of each schema id: :class:`TransformSchemaError`
  is raised then, and every message of that schema id goes to the bad-input policy with it
  (dead letters by default), like an ``unsupported_schema``. Dropping or renaming a field that
  routing reads is known without a schema: a config error.
- **Record**: one value cannot be transformed (a text that is not a number, a timestamp out of
  range, a function that raises, an expression that divides by zero):
  :class:`TransformFailedError` for that message only.

Only top-level fields are transformed; nested records pass through untouched. Output records
keep the input record's name and namespace, so ``schema_name`` routing is unchanged.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import Any, Callable, Mapping, NamedTuple, Sequence
from zoneinfo import ZoneInfo

from fastavro import parse_schema
from fastavro.validation import validate
from simpleeval import EvalWithCompoundTypes, InvalidExpression

from kbqe_dagster.core.errors import ConfigError, TransformFailedError, TransformSchemaError
from kbqe_dagster.core.routing import required_fields, resolve_function
from kbqe_dagster.core.transform_specs import (
    AddField,
    CastField,
    CastType,
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
    kind_of,
    removed_fields,
    target_field,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICROS = {"s": 10**6, "ms": 10**3, "us": 1, TimeFormat.EPOCH_S: 10**6,
           TimeFormat.EPOCH_MS: 10**3, TimeFormat.EPOCH_US: 1}  # fmt: skip
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


class MessageMeta(NamedTuple):
    """What a transform may read of the Kafka message besides its record."""

    topic: str
    partition: int
    offset: int
    timestamp_ms: int | None = None
    key: bytes | None = None
    headers: Sequence[tuple[str, bytes | None]] | None = None


Step = Callable[[dict, MessageMeta], None]
"""One compiled transform: changes the record dict in place; raises _Fail(field, why)."""


class _Fail(Exception):
    def __init__(self, field: str, why: str) -> None:
        super().__init__(why)
        self.field = field


@dataclass(frozen=True)
class Compiled:
    """The transforms of one topic over one input schema."""

    input_schema: Mapping[str, Any]
    output_schema: dict[str, Any]
    """The input record with each transform's change to its fields, same name and namespace."""
    steps: tuple[tuple[str, Step], ...]
    """``(label, step)`` per transform; the label is ``transforms[INDEX] (KIND)``."""

    def apply(self, record: Mapping[str, Any], meta: MessageMeta) -> dict[str, Any]:
        """The transformed record (a new dict; ``record`` is not changed). Raises
        :class:`TransformFailedError` naming the transform and the field."""
        out = dict(record)
        for label, step in self.steps:
            try:
                step(out, meta)
            except _Fail as failure:
                raise TransformFailedError(f"{label} field {failure.field!r}: {failure}") from None
        return out


def compile_transforms(specs: Sequence[Any], input_schema: Mapping[str, Any],
                       hmac_keys: Mapping[int, bytes] | None = None) -> Compiled:
    """Derive the output schema and the per-record steps of ``specs`` over ``input_schema``.
    ``hmac_keys`` holds the key of every hmac ``mask`` by its index (:func:`hmac_keys` reads
    them from the environment). Raises :class:`TransformSchemaError` naming the transform."""
    fields: list[dict[str, Any]] = copy.deepcopy(list(input_schema.get("fields", ())))
    steps = []
    for index, spec in enumerate(specs):
        label = f"transforms[{index}] ({kind_of(spec)})"
        try:
            step = _COMPILERS[type(spec)](spec, fields, (hmac_keys or {}).get(index))
        except _Fail as failure:
            name = input_schema.get("name", "?")
            error = TransformSchemaError(
                f"{label} field {failure.field!r}: {failure} (record schema {name})"
            )
            error.index = index
            raise error from None
        steps.append((label, step))
    output = {k: v for k, v in input_schema.items() if k != "fields"}
    output["fields"] = fields
    return Compiled(input_schema, output, tuple(steps))


def hmac_keys(specs: Sequence[Any], environ: Mapping[str, str], where: str) -> dict[int, bytes]:
    """The HMAC key of every hmac ``mask``, by index, from ``environ``. A variable that is
    unset is a :class:`ConfigError` naming the key path (``where`` is the list's, e.g.
    ``topics[0].transforms``) and the variable, never a value: the stage run stops rather than
    stage data unmasked or masked with a wrong key."""
    keys = {}
    for index, spec in enumerate(specs):
        if isinstance(spec, MaskField) and spec.method is MaskMethod.HMAC_SHA256:
            value = environ.get(spec.key_env or "")
            if not value:
                raise ConfigError(f"{where}[{index}].key_env: environment variable "
                                  f"{spec.key_env} is not set (or empty) where the stage runs")
            keys[index] = value.encode()
    return keys


def transform_config_problems(specs: Sequence[Any], routing: Any,
                              schema: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """``([INDEX], problem)`` of what can be judged when the pipeline file is read: a transform
    that removes a field routing reads, and, when the schema is declared there (``format:
    json``), every schema rule of :func:`compile_transforms`."""
    problems = []
    removed = removed_fields(tuple(specs))
    for path in required_fields(routing):
        top = path.split(".")[0]
        if top in removed:
            kind = kind_of(specs[removed[top]])
            problems.append((f"[{removed[top]}]", f"{kind} removes field {top!r}, which routing "
                             f"reads ({path}); route on another field or transform later"))
    if schema is not None:
        placeholder_keys = dict.fromkeys(range(len(specs)), b"config-check")
        try:
            compile_transforms(specs, schema, placeholder_keys)
        except TransformSchemaError as error:
            text = str(error).split(" ", 2)[2]  # the key path says which transform
            problems.append((f"[{error.index}]", f"{kind_of(specs[error.index])} {text}"))
    return problems


def field_values(record: Mapping[str, Any], paths: Sequence[str]) -> dict[str, Any]:
    """Dotted path → value (None when absent) of a decoded record: what routing and event
    time read."""
    out = {}
    for path in paths:
        node: Any = record
        for part in path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        out[path] = node
    return out


# --- schema helpers ----------------------------------------------------------------------------
def _find(fields: list[dict], name: str) -> int:
    for position, item in enumerate(fields):
        if item["name"] == name:
            return position
    raise _Fail(name, "is not in the record schema at this point")


def _absent(fields: list[dict], name: str) -> None:
    if any(item["name"] == name for item in fields):
        raise _Fail(name, "already exists (rename or drop it first)")


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


def _set_type(fields: list[dict], position: int, avro: Any) -> None:
    """Give a field a new type; an old default may not fit it, a nullable one defaults null."""
    entry = {k: v for k, v in fields[position].items() if k != "default"}
    entry["type"] = avro
    if isinstance(avro, list) and avro and avro[0] == "null":
        entry["default"] = None
    fields[position] = entry


def _wrap(base: Any, nullable: bool) -> Any:
    return ["null", base] if nullable else base


# --- one compiler per kind: check the schema, change ``fields``, return the step ------------
def _add(spec: AddField, fields: list[dict], _key: bytes | None) -> Step:
    name = spec.add
    _absent(fields, name)
    if spec.header is not None or spec.message is MessageSource.KEY:
        as_bytes = spec.type == "bytes"
        fields.append(_new_field(name, ["null", "bytes" if as_bytes else "string"]))
        header = spec.header

        def raw(record: dict, meta: MessageMeta) -> None:
            value = meta.key if header is None else _last_header(meta.headers, header)
            if value is not None and not as_bytes:
                try:
                    value = bytes(value).decode("utf-8")
                except UnicodeDecodeError:
                    raise _Fail(name, "the value is not UTF-8 text (use type: bytes)") from None
            record[name] = value

        return raw
    if spec.message is not None:
        source = spec.message
        avro = {MessageSource.TOPIC: "string", MessageSource.PARTITION: "int",
                MessageSource.OFFSET: "long",
                MessageSource.TIMESTAMP: ["null", {"type": "long",
                                                   "logicalType": "timestamp-millis"}]}[source]
        fields.append(_new_field(name, avro))

        def meta_field(record: dict, meta: MessageMeta) -> None:
            if source is MessageSource.TIMESTAMP:
                ts = meta.timestamp_ms
                record[name] = _EPOCH + timedelta(milliseconds=ts) if ts is not None and ts >= 0 else None
            else:
                record[name] = getattr(meta, source.value)

        return meta_field
    avro = avro_type(spec.type) if spec.type else _constant_type(spec.value, name)
    if not validate(spec.value, avro if isinstance(avro, str) else parse_schema(avro),
                    raise_errors=False):
        raise _Fail(name, f"the constant {spec.value!r} is not a {spec.type}")
    fields.append(_new_field(name, avro))
    value = spec.value

    def constant(record: dict, _meta: MessageMeta) -> None:
        record[name] = value

    return constant


def _constant_type(value: Any, name: str) -> str:
    for kind, avro in ((bool, "boolean"), (int, "long"), (float, "double"), (str, "string")):
        if isinstance(value, kind):
            return avro
    raise _Fail(name, f"cannot tell the type of {value!r}; give type")


def _last_header(headers: Sequence[tuple[str, bytes | None]] | None, name: str) -> bytes | None:
    found = None
    for key, value in headers or ():
        if key == name:
            found = value  # Kafka's convention: the last header of a name wins
    return found


def _rename(spec: RenameField, fields: list[dict], _key: bytes | None) -> Step:
    position = _find(fields, spec.rename)
    _absent(fields, spec.to)
    fields[position] = {**fields[position], "name": spec.to}
    fields[position].pop("aliases", None)
    old, new = spec.rename, spec.to

    def rename(record: dict, _meta: MessageMeta) -> None:
        record[new] = record.pop(old, None)

    return rename


def _drop(spec: DropFields, fields: list[dict], _key: bytes | None) -> Step:
    for name in spec.drop:
        del fields[_find(fields, name)]
    names = spec.drop

    def drop(record: dict, _meta: MessageMeta) -> None:
        for name in names:
            record.pop(name, None)

    return drop


_MASKABLE = {"string", "bytes", "int", "long"}


def _mask(spec: MaskField, fields: list[dict], key: bytes | None) -> Step:
    name = spec.mask
    position = _find(fields, name)
    base, nullable = _split_null(fields[position]["type"])
    if spec.method is MaskMethod.NULL:
        _set_type(fields, position, _nullable(fields[position]["type"]))

        def null_out(record: dict, _meta: MessageMeta) -> None:
            record[name] = None

        return null_out
    primitive, logical = _base_name(base)
    if primitive not in _MASKABLE or logical is not None:
        raise _Fail(name, f"is a {_describe(base)}; hmac masks string, bytes, int or long")
    _set_type(fields, position, _wrap("string", nullable))
    assert key is not None, "hmac_keys() provides the key of every hmac mask"

    def mask(record: dict, _meta: MessageMeta) -> None:
        value = record.get(name)
        if value is None:
            if not nullable:
                raise _Fail(name, "is missing from the record")
            return
        data = value if isinstance(value, bytes) else str(value).encode("utf-8")
        record[name] = hmac.new(key, data, hashlib.sha256).hexdigest()

    return mask


def _describe(avro: Any) -> str:
    primitive, logical = _base_name(avro)
    return f"{primitive} ({logical})" if logical else primitive


_CASTABLE = {"string": "string", "int": "long", "long": "long", "float": "double",
             "double": "double", "boolean": "boolean"}  # fmt: skip


def _cast(spec: CastField, fields: list[dict], _key: bytes | None) -> Step:
    name = spec.cast
    position = _find(fields, name)
    base, nullable = _split_null(fields[position]["type"])
    primitive, logical = _base_name(base)
    source = _CASTABLE.get(primitive) if logical is None else None
    if source is None:
        raise _Fail(name, f"is a {_describe(base)}; cast reads string, int, long, float, "
                    "double or boolean")
    _set_type(fields, position, _wrap(spec.to.value, nullable))
    convert = _converter(source, spec.to)

    def cast(record: dict, _meta: MessageMeta) -> None:
        value = record.get(name)
        if value is None:
            if not nullable:
                raise _Fail(name, "is missing from the record")
            return
        try:
            record[name] = convert(value)
        except (ValueError, OverflowError) as error:
            raise _Fail(name, f"{value!r} is not a {spec.to.value}: {error}") from None

    return cast


def _converter(source: str, target: CastType) -> Callable[[Any], Any]:
    if source == target.value:
        return lambda value: value
    if target is CastType.STRING:
        if source == "boolean":
            return lambda value: "true" if value else "false"
        return repr if source == "double" else str
    if target is CastType.LONG:
        return _to_long
    if target is CastType.DOUBLE:
        return _to_double
    return _to_boolean


def _to_long(value: Any) -> int:
    if isinstance(value, str):
        text = value.strip()
        if not text.lstrip("+-").isdigit() or not text.isascii():
            raise ValueError("not a whole number")
        number = int(text)
    elif isinstance(value, float):
        if not value.is_integer():
            raise ValueError("not a whole number")
        number = int(value)
    else:
        number = int(value)
    if not _LONG_MIN <= number <= _LONG_MAX:
        raise ValueError("outside the 64-bit range")
    return number


def _to_double(value: Any) -> float:
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            raise ValueError("not a number") from None
    return float(value)


def _to_boolean(value: Any) -> bool:
    if isinstance(value, str):
        text = value.strip().lower()
        if text not in ("true", "false"):
            raise ValueError("expected true or false")
        return text == "true"
    if value in (0, 1):
        return bool(value)
    raise ValueError("only 0 and 1 are booleans")


def _timestamp(spec: ConvertTimestamp, fields: list[dict], _key: bytes | None) -> Step:
    name = spec.timestamp
    position = _find(fields, name)
    base, nullable = _split_null(fields[position]["type"])
    read = _time_reader(spec, base, name)
    write = _time_writer(spec)
    _set_type(fields, position, _wrap(_TIME_TYPES[spec.to], nullable))

    def convert(record: dict, _meta: MessageMeta) -> None:
        value = record.get(name)
        if value is None:
            if not nullable:
                raise _Fail(name, "is missing from the record")
            return
        try:
            record[name] = write(read(value))
        except (ValueError, OverflowError, TypeError, KeyError, AttributeError) as error:
            raise _Fail(name, f"{value!r} is not a timestamp here: {error}") from None

    return convert


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
        return lambda value: _micros(value) if isinstance(value, datetime) else int(value) * per
    if primitive in ("long", "int") and logical is None:
        if spec.epoch_unit is None:
            raise _Fail(name, f"is a plain {primitive}: give epoch_unit (s, ms or us)")
        per = _MICROS[spec.epoch_unit.value]
        return lambda value: int(value) * per
    if primitive == "string" and logical is None:
        zone = ZoneInfo(spec.zone)
        pattern = spec.input_format
        return lambda value: _micros(_parse_time(value, pattern, zone))
    raise _Fail(name, f"is a {_describe(base)}; timestamp reads a timestamp, a long or int "
                "epoch, or a string")


def _time_writer(spec: ConvertTimestamp) -> Callable[[int], Any]:
    if spec.to in _MICROS:
        per = _MICROS[spec.to]
        return lambda micros: micros // per
    if spec.to is TimeFormat.STRING:
        zone = ZoneInfo(spec.zone)
        pattern = spec.format
        return lambda micros: _text(_datetime(micros).astimezone(zone), pattern)
    return _datetime


def _micros(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=timezone.utc)
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 10**6 + delta.microseconds


def _datetime(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


def _text(moment: datetime, pattern: str | None) -> str:
    return moment.strftime(pattern) if pattern else moment.isoformat()


def _parse_time(text: str, pattern: str | None, zone: ZoneInfo) -> datetime:
    if pattern:
        moment = datetime.strptime(text, pattern)
    else:
        body, _, annotation = text.strip().partition("[")
        moment = datetime.fromisoformat(body)
        if annotation and moment.tzinfo is None:
            zone = ZoneInfo(annotation.rstrip("]"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=zone)


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


def _compute(spec: ComputeField, fields: list[dict], _key: bytes | None) -> Step:
    name = spec.compute
    known = {item["name"] for item in fields}
    unknown = expression_names(spec.expression) - known - FUNCTIONS.keys() - _CONSTANTS
    if unknown:
        raise _Fail(name, f"the expression reads {', '.join(sorted(unknown))}, not in the "
                    "record schema at this point")
    avro = avro_type(spec.type)
    check = _checker(avro)
    evaluator = EvalWithCompoundTypes(functions=FUNCTIONS)
    parsed = evaluator.parse(spec.expression.strip())
    fields[:] = [item for item in fields if item["name"] != name]
    fields.append(_new_field(name, avro))

    def compute(record: dict, _meta: MessageMeta) -> None:
        evaluator.names = record
        try:
            value = evaluator.eval(spec.expression, previously_parsed=parsed)
        except (InvalidExpression, ArithmeticError, TypeError, ValueError, AttributeError,
                KeyError, IndexError) as error:
            raise _Fail(name, f"{spec.expression!r} failed: {type(error).__name__}: {error}") from None
        record[name] = check(name, value)

    return compute


def _checker(avro: Any) -> Callable[[str, Any], Any]:
    """Checks a computed value against its declared type (ints widen to double)."""
    base, nullable = _split_null(avro)
    primitive, _ = _base_name(base)
    parsed = parse_schema(avro) if not isinstance(avro, str) else avro

    def check(name: str, value: Any) -> Any:
        if primitive in ("double", "float") and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if isinstance(value, bool) and primitive in ("int", "long", "double", "float"):
            raise _Fail(name, f"gave {value!r} (bool), not a {primitive}")
        if not validate(value, parsed, raise_errors=False):
            raise _Fail(name, f"gave {value!r} ({type(value).__name__}), not a "
                        f"{'nullable ' if nullable else ''}{primitive}")
        return value

    return check


def _function(spec: FunctionTransform, fields: list[dict], _key: bytes | None) -> Step:
    for name in spec.fields:
        _absent(fields, name)
    function = resolve_function(spec.function)
    checks = {name: _checker(avro_type(type_name)) for name, type_name in spec.fields.items()}
    fields.extend(_new_field(name, avro_type(t)) for name, t in spec.fields.items())
    expected = {item["name"] for item in fields}
    declared = set(spec.fields)
    first = target_field(spec)

    def call(record: dict, _meta: MessageMeta) -> None:
        try:
            out = function(dict(record))
        except Exception as error:  # noqa: BLE001 - a user function's failure fails its record
            raise _Fail(first, f"{spec.function} raised {type(error).__name__}: {error}") from None
        if not isinstance(out, Mapping):
            raise _Fail(first, f"{spec.function} returned a {type(out).__name__}, not a dict")
        # A JSON record may omit an optional field: only what came in must come back.
        extra = out.keys() - expected
        missing = ((record.keys() & expected) | declared) - out.keys()
        if extra or missing:
            raise _Fail(first, f"{spec.function} returned undeclared field(s) "
                        f"{sorted(extra)} / lost field(s) {sorted(missing)}")
        for name, check in checks.items():
            out[name] = check(name, out.get(name))
        record.clear()
        record.update(out)

    return call


_COMPILERS: dict[type, Callable[[Any, list[dict], bytes | None], Step]] = {
    AddField: _add, RenameField: _rename, DropFields: _drop, MaskField: _mask,
    CastField: _cast, ConvertTimestamp: _timestamp, ComputeField: _compute,
    FunctionTransform: _function,
}  # fmt: skip
