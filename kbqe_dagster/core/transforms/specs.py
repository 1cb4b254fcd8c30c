"""What ``topics[].transforms`` declares: one frozen dataclass per transform kind, and reading
them from the pipeline file with their key paths (``topics[0].transforms[2].to``).

Each list item is a mapping with exactly one *kind key* (``add``, ``rename``, ``drop``,
``mask``, ``cast``, ``timestamp``, ``compute``, ``function``) whose value is the field the
transform works on; the item's other keys are that kind's options::

    transforms:
      - {add: source, value: web}                 # a constant (type from the value, or `type`)
      - {add: trace_id, header: trace-id}         # a Kafka header (UTF-8 string, null if absent)
      - {add: kafka_key, message: key}            # key | topic | partition | offset | timestamp
      - {rename: amt, to: amount}
      - {drop: [debug, internal_note]}
      - {mask: email, key_env: KBQE_MASK_KEY}     # HMAC-SHA-256 hex; the key from the env var
      - {mask: phone, method: "null"}             # null out (the field becomes nullable)
      - {cast: amount, to: double}                # string <-> long / double / boolean
      - {timestamp: created, epoch_unit: ms, to: string, zone: Europe/Paris}
      - {compute: total, expression: "amount * quantity", type: double}
      - {function: "my_pkg.transforms:enrich", fields: {segment: "string?"}}

Transforms apply in order, each to the previous one's output, on top-level fields. Declared
types (``type``, ``fields``) are ``string``, ``long``, ``int``, ``double``, ``float``,
``boolean``, ``bytes``, ``date``, ``timestamp-millis``, ``timestamp-micros``; a trailing ``?``
makes one nullable (``["null", T]``, default null).

Rules that need no schema are checked here (a config error at the item's key path); the rules
that need the record schema are checked by :func:`kbqe_dagster.core.transforms.compiler.compile_transforms`
(see that module for when).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.record.routing import resolve_function  # one importer of user functions

FIELD_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TYPE_RE = re.compile(
    r"(string|long|int|double|float|boolean|bytes|date|timestamp-millis|"
    r"timestamp-micros)(\?)?"
)
_FUNCTION_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


class MessageSource(StrEnum):
    """What of the Kafka message an ``add`` copies into the record."""

    KEY = "key"
    TOPIC = "topic"
    PARTITION = "partition"
    OFFSET = "offset"
    TIMESTAMP = "timestamp"


class MaskMethod(StrEnum):
    HMAC_SHA256 = "hmac_sha256"
    NULL = "null"


class CastType(StrEnum):
    STRING = "string"
    LONG = "long"
    DOUBLE = "double"
    BOOLEAN = "boolean"


class TimeFormat(StrEnum):
    """A timestamp's representation: epoch numbers, Avro timestamps, or a formatted string."""

    EPOCH_S = "epoch_s"
    EPOCH_MS = "epoch_ms"
    EPOCH_US = "epoch_us"
    TIMESTAMP_MILLIS = "timestamp_millis"
    TIMESTAMP_MICROS = "timestamp_micros"
    STRING = "string"


class EpochUnit(StrEnum):
    S = "s"
    MS = "ms"
    US = "us"


@dataclass(frozen=True)
class AddField:
    """``{add: FIELD, ...}``: a new field holding a constant (``value``), a Kafka header
    (``header``) or a part of the message (``message``); exactly one of the three."""

    add: str
    """The new field's name; it must not exist yet (rename or drop the old one first)."""
    value: Any = None
    """A constant. Its type is ``type`` if given, else the value's: text ``string``, whole
    number ``long``, decimal ``double``, true/false ``boolean``; ``null`` needs ``type``."""
    header: str | None = None
    """The name of a Kafka header; the last header of that name is taken, null if absent."""
    message: MessageSource | None = None
    """``key`` (null if absent), ``topic`` (string), ``partition`` (int), ``offset`` (long),
    ``timestamp`` (nullable timestamp-millis; null when Kafka has none)."""
    type: str | None = None
    """The field's type: a declared type (``string``, ``long``, ``double``, ``boolean``,
    ``timestamp-millis``, ...; ``string?`` is nullable). For ``header`` and ``message: key`` it
    is ``string`` (UTF-8; a value that is not UTF-8 fails) or ``bytes``, always nullable."""

    def __post_init__(self) -> None:
        given = [k for k in ("value", "header", "message") if getattr(self, k) is not None]
        if len(given) > 1:
            raise ValueError(f"give one of value, header, message; got {', '.join(given)}")
        if self.type is None and self.value is None and not given:
            raise ValueError("needs value, header or message (a null value needs type)")
        raw = self.header is not None or self.message is MessageSource.KEY
        if raw and self.type not in (None, "string", "bytes"):
            raise ValueError(f"type of a key or header is string or bytes, got {self.type!r}")
        if self.message not in (None, MessageSource.KEY) and self.type is not None:
            raise ValueError(f"type is fixed for message: {self.message}")


@dataclass(frozen=True)
class RenameField:
    """``{rename: FIELD, to: NEW}``: the field keeps its type and value under a new name. On a
    keyed topic a key field may be renamed: the key column takes the new name in the changelog,
    the current table and the history, and the MERGE keys on it."""

    rename: str
    """The field to rename; it must be in the schema at this point."""
    to: str
    """The new name; no other field may have it."""


@dataclass(frozen=True)
class DropFields:
    """``{drop: FIELD}`` or ``{drop: [F1, F2]}``: the fields leave the record and its schema.
    Never a keyed topic's key field (a row without its key cannot be merged)."""

    drop: tuple[str, ...]
    """The fields to remove; each must be in the schema at this point."""


@dataclass(frozen=True)
class MaskField:
    """``{mask: FIELD, key_env: VAR}``: the value becomes the lowercase hex HMAC-SHA-256 of its
    UTF-8 text (bytes as they are), keyed with the value of environment variable ``key_env``
    (the key is never in the pipeline file, nor logged); null stays null. The field becomes a
    ``string``. ``{mask: FIELD, method: "null"}`` nulls it out instead (it becomes nullable).
    A keyed topic's key field may take hmac (the same input gives the same digest: the key
    keeps its identity while the HMAC key stays the same), never ``"null"``."""

    mask: str
    """The field to mask: a string, bytes, int or long (or a nullable one)."""
    method: MaskMethod = MaskMethod.HMAC_SHA256
    """``hmac_sha256`` (needs ``key_env``) or ``"null"`` (quote it in YAML, or write null)."""
    key_env: str | None = None
    """The environment variable holding the HMAC key, read where the stage task runs; unset
    there, the stage run fails naming it (nothing is staged unmasked)."""

    def __post_init__(self) -> None:
        if self.method is MaskMethod.HMAC_SHA256 and not self.key_env:
            raise ValueError("hmac_sha256 needs key_env: the environment variable of the key")
        if self.method is MaskMethod.NULL and self.key_env:
            raise ValueError('key_env is not used with method "null"')


@dataclass(frozen=True)
class CastField:
    """``{cast: FIELD, to: TYPE}``: string ↔ long / double / boolean, and between long, double
    and boolean. Text is read strictly (``" 42"`` is a long, ``"4x"`` fails naming the value;
    booleans are ``true``/``false`` in any case); a double becomes a long only when whole;
    a number becomes a boolean only from 0 or 1. Null stays null. A keyed topic's key field
    casts to ``string`` only (distinct values keep distinct texts; text read as a number or a
    boolean, or a long as a double, could make two keys one)."""

    cast: str
    """The field to convert: a string, int, long, float, double or boolean (or nullable)."""
    to: CastType
    """``string``, ``long``, ``double`` or ``boolean``; nullability is kept."""


@dataclass(frozen=True)
class ConvertTimestamp:
    """``{timestamp: FIELD, to: FORMAT}``: converts a point in time between representations.
    The input's representation comes from the schema: an Avro ``timestamp-millis/micros`` is a
    timestamp; a plain ``long``/``int`` is an epoch number in ``epoch_unit``; a ``string`` is
    ISO-8601 (``Z``, an offset, or an RFC 9557 ``[Zone/Id]`` suffix) or ``input_format``, and
    is read in ``zone`` when it has no offset. Zones are IANA names (``zoneinfo``). Never a
    keyed topic's key field (a coarser unit, a zone or a format could make two keys one)."""

    timestamp: str
    """The field to convert."""
    to: TimeFormat
    """``epoch_s``, ``epoch_ms``, ``epoch_us`` (long; floor division), ``timestamp_millis``,
    ``timestamp_micros`` (Avro logical types, BigQuery TIMESTAMP) or ``string`` (in ``zone``)."""
    epoch_unit: EpochUnit | None = None
    """Unit of a plain numeric input: ``s``, ``ms`` or ``us``. Required for such an input."""
    zone: str = "UTC"
    """IANA zone a ``string`` output is written in, and a string input without offset read in."""
    format: str | None = None
    """``strftime`` pattern of a ``string`` output; default ISO-8601 with the offset."""
    input_format: str | None = None
    """``strptime`` pattern of a ``string`` input; default ISO-8601."""

    def __post_init__(self) -> None:
        try:
            ZoneInfo(self.zone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"zone {self.zone!r} is not an IANA time zone") from None
        if self.format is not None and self.to is not TimeFormat.STRING:
            raise ValueError("format is only for to: string")


@dataclass(frozen=True)
class ComputeField:
    """``{compute: FIELD, expression: EXPR, type: TYPE}``: a field computed from the record by
    a ``simpleeval`` expression (a safe subset of Python expressions, never ``eval``): field
    names, literals, arithmetic, comparisons, ``and``/``or``/``not``, ``x if c else y``, and the
    functions ``str int float bool len abs round min max lower upper strip coalesce``. A field
    of that name is replaced (never a keyed topic's key field)."""

    compute: str
    """The field to write."""
    expression: str
    """The expression, e.g. ``amount * quantity`` or ``lower(country) + "-" + str(store)``."""
    type: str
    """The result's declared type (``long``, ``double``, ``string?``, ...); a result of another
    type fails (a whole number is accepted for a double)."""


@dataclass(frozen=True)
class FunctionTransform:
    """``{function: "pkg.mod:func", fields: {NAME: TYPE}}``: a Python function of yours gets
    the record as a dict and returns the record as a dict: the input's fields plus the declared
    ones (it may change values; it may not add undeclared fields or lose any). An exception it
    raises fails that record with the exception's message. Not on keyed topics (it may change
    any field, the key's included)."""

    function: str
    """``"package.module:function"``, importable where the stage runs."""
    fields: Mapping[str, str] = field(default_factory=dict)
    """The fields it adds, in order: name → declared type (``string``, ``long?``, ...)."""


TransformSpec = (
    AddField
    | RenameField
    | DropFields
    | MaskField
    | CastField
    | ConvertTimestamp
    | ComputeField
    | FunctionTransform
)

KINDS: dict[str, type] = {
    "add": AddField, "rename": RenameField, "drop": DropFields, "mask": MaskField,
    "cast": CastField, "timestamp": ConvertTimestamp, "compute": ComputeField,
    "function": FunctionTransform,
}  # fmt: skip


def kind_of(spec: Any) -> str:
    """The kind key of a spec (``rename``), as in the pipeline file and error messages."""
    return next(kind for kind, cls in KINDS.items() if isinstance(spec, cls))


def target_field(spec: Any) -> str:
    """The field a transform is about, for messages (a function's: its first declared)."""
    if isinstance(spec, DropFields):
        return ", ".join(spec.drop)
    if isinstance(spec, FunctionTransform):
        return ", ".join(spec.fields) or "(none declared)"
    return str(getattr(spec, kind_of(spec)))


def avro_type(spec: Any) -> Any:
    """The Avro type of a declared type name (``long``, ``string?``); raises ValueError."""
    match = _TYPE_RE.fullmatch(spec) if isinstance(spec, str) else None
    if match is None:
        raise ValueError(
            f"unknown type {spec!r}; expected one of string, long, int, double, "
            "float, boolean, bytes, date, timestamp-millis, timestamp-micros, "
            "optionally followed by ?"
        )
    name, nullable = match.groups()
    base: Any = name
    if name == "date":
        base = {"type": "int", "logicalType": "date"}
    elif name.startswith("timestamp-"):
        base = {"type": "long", "logicalType": name}
    return ["null", base] if nullable else base


def expression_names(expression: str) -> set[str]:
    """The bare names an expression reads (its fields and functions); raises ValueError."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as error:
        raise ValueError(f"not a valid expression: {error.msg}") from None
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name)}


# --- reading the pipeline file -----------------------------------------------------------------
def _field_name(value: Any) -> str:
    name = r.string(value)
    if not FIELD_NAME_RE.fullmatch(name):
        raise r.Invalid(
            f"{name!r} is not an Avro field name (letters, digits, underscores; "
            "transforms work on top-level fields)"
        )
    return name


def _field_names(value: Any) -> tuple[str, ...]:
    values = value if isinstance(value, list) else [value]
    if not values:
        raise r.Invalid("expected a field name or a non-empty list of them")
    out = []
    for index, item in enumerate(values):
        try:
            out.append(_field_name(item))
        except r.Invalid as error:
            raise r.Invalid(str(error), f"[{index}]" if isinstance(value, list) else "") from None
    return tuple(out)


def _type_name(value: Any) -> str:
    try:
        avro_type(value)
    except ValueError as error:
        raise r.Invalid(str(error)) from None
    name: str = value
    return name


def _any(value: Any) -> Any:
    if isinstance(value, (list, dict)):
        raise r.Invalid(f"expected a string, number, boolean or null, got {r.describe(value)}")
    return value


def _function(value: Any) -> str:
    spec = r.string(value)
    if not _FUNCTION_RE.fullmatch(spec):
        raise r.Invalid(f"expected 'package.module:function', got {spec!r}")
    try:
        resolve_function(spec)
    except ConfigError as error:
        raise r.Invalid(str(error).replace("routing function", "transform function")) from None
    return spec


def _declared_fields(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise r.Invalid(f"expected a mapping of field name to type, got {r.describe(value)}")
    out = {}
    for name, type_name in value.items():
        try:
            out[_field_name(name)] = _type_name(type_name)
        except r.Invalid as error:
            raise r.Invalid(str(error), f".{name}") from None
    return out


def read_expression(value: Any) -> str:
    """An expression (``compute``, a destination's ``when``), checked to parse."""
    text = r.string(value)
    try:
        expression_names(text)
    except ValueError as error:
        raise r.Invalid(str(error)) from None
    return text


_SPECS: dict[str, dict[str, Callable[[Any], Any]]] = {
    "add": {"add": _field_name, "value": _any, "header": r.string,
            "message": r.choice(MessageSource), "type": _type_name},
    "rename": {"rename": _field_name, "to": _field_name},
    "drop": {"drop": _field_names},
    "mask": {"mask": _field_name, "method": r.choice(MaskMethod, {None: "null"}),
             "key_env": r.string},
    "cast": {"cast": _field_name, "to": r.choice(CastType)},
    "timestamp": {"timestamp": _field_name, "to": r.choice(TimeFormat),
                  "epoch_unit": r.choice(EpochUnit), "zone": r.string, "format": r.string,
                  "input_format": r.string},
    "compute": {"compute": _field_name, "expression": read_expression, "type": _type_name},
    "function": {"function": _function, "fields": _declared_fields},
}  # fmt: skip
_REQUIRED = {"rename": ("to",), "cast": ("to",), "timestamp": ("to",),
             "compute": ("expression", "type")}  # fmt: skip


def read_transforms(raw: Any, path: str, problems: r.Problems) -> tuple[Any, ...]:
    """The specs of a ``transforms:`` list; every problem is added with its key path."""
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems.add(path, f"expected a list of transforms, got {r.describe(raw)}")
        return ()
    specs = []
    for index, item in enumerate(raw):
        spec = _read_one(item, f"{path}[{index}]", problems)
        if spec is not None:
            specs.append(spec)
    return tuple(specs)


def _read_one(item: Any, path: str, problems: r.Problems) -> Any:
    kinds = [k for k in KINDS if isinstance(item, Mapping) and k in item]
    if len(kinds) != 1:
        found = f"several: {', '.join(kinds)}" if kinds else r.describe(item)
        problems.add(path, f"expected a mapping with one of {', '.join(KINDS)}; got {found}")
        return None
    kind = kinds[0]
    before = len(problems.items)
    values = r.read_section(item, path, _SPECS[kind], problems, required=_REQUIRED.get(kind, ()))
    if len(problems.items) > before:
        return None
    if "value" in item and item["value"] is None:
        values["value"] = None  # an explicit null constant (needs type)
    try:
        return KINDS[kind](**values)
    except ValueError as error:
        problems.add(path, str(error))
        return None


def removed_fields(specs: tuple[Any, ...]) -> dict[str, int]:
    """Top-level field → index of the transform that removes or nulls it (drop, rename away,
    mask to null), for the config check that routing still finds its fields."""
    out: dict[str, int] = {}
    for index, spec in enumerate(specs):
        if isinstance(spec, DropFields):
            out.update(dict.fromkeys(spec.drop, index))
        elif isinstance(spec, RenameField):
            out[spec.rename] = index
            out.pop(spec.to, None)
        elif isinstance(spec, MaskField) and spec.method is MaskMethod.NULL:
            out[spec.mask] = index
        elif isinstance(spec, (AddField, ComputeField)):
            out.pop(getattr(spec, kind_of(spec)), None)
    return out
