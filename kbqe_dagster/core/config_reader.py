"""Reading untrusted configuration mappings: key paths, unknown keys, typed values.

``core/config/pipeline.py`` declares *what* the pipeline file holds; this module owns *how* a raw
mapping (from YAML) is checked: every problem is collected with the key path it concerns
(``topics[2].routing.mode``), unknown keys get a did-you-mean, and nothing stops at the first
error, so one run of the validator shows everything to fix.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Callable, Hashable, Mapping
from dataclasses import replace
from datetime import date, timedelta
from enum import Enum
from typing import Any

from kbqe_dagster.core.errors import ConfigError

Converter = Callable[[Any], Any]

_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_DURATION_UNITS = {
    "ms": timedelta(milliseconds=1),
    "s": timedelta(seconds=1),
    "m": timedelta(minutes=1),
    "h": timedelta(hours=1),
    "d": timedelta(days=1),
}
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMG]i?B|B)?")
_SIZE_UNITS = {
    None: 1,
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
}


class Invalid(Exception):
    """A value is wrong; ``subpath`` (``[1]``, ``.key``) locates it inside the value."""

    def __init__(self, message: str, subpath: str = "") -> None:
        super().__init__(message)
        self.subpath = subpath


class Problems:
    """Problems found so far: ``items`` each prefixed by its key path, ``located`` the same
    as ``(key path, message)`` pairs."""

    def __init__(self) -> None:
        self.items: list[str] = []
        self.located: list[tuple[str, str]] = []

    def add(self, path: str, message: str) -> None:
        self.items.append(f"{path}: {message}" if path else message)
        self.located.append((path, message))

    def __bool__(self) -> bool:
        return bool(self.items)


def join(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def describe(value: Any) -> str:
    """``'feild'``, ``int 7``, ``a list``: how a wrong value is shown in a message."""
    if isinstance(value, str):
        return repr(value)
    if value is None:
        return "null"
    if isinstance(value, (list, tuple)):
        return "a list"
    if isinstance(value, Mapping):
        return "a mapping"
    return f"{type(value).__name__} {value!r}"


def read_section(
    raw: Any,
    path: str,
    spec: Mapping[str, Converter],
    problems: Problems,
    *,
    required: tuple[str, ...] = (),
) -> dict[str, Any]:
    """Check ``raw`` against ``spec`` (key → converter) and return the converted values of the
    keys present and valid. ``None`` (an empty YAML section) reads as ``{}``; a key given as
    ``null`` is passed to its converter, which refuses it unless it is :func:`nullable`."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        problems.add(path, f"expected a mapping, got {describe(raw)}")
        return {}
    for key in raw:
        if key not in spec:
            problems.add(join(path, str(key)), unknown_key_message(str(key), spec))
    for key in required:
        if key not in raw:
            problems.add(join(path, key), "required")
    values: dict[str, Any] = {}
    for key, convert in spec.items():
        if key in raw:
            try:
                values[key] = convert(raw[key])
            except Invalid as error:
                problems.add(join(path, key) + error.subpath, str(error))
    return values


def unknown_key_message(key: str, known: Mapping[str, Any] | tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    return f"unknown key; expected one of {', '.join(sorted(known))}"


def nullable(convert: Converter) -> Converter:
    """``convert``, but an explicit ``null`` is accepted and means "none"."""

    def read(value: Any) -> Any:
        return None if value is None else convert(value)

    return with_schema(read, {"anyOf": [json_schema(convert), {"type": "null"}]})


# --- the JSON Schema of what a converter accepts (core/config/schema.py) ---------------------
def with_schema(convert: Converter, schema: Mapping[str, Any]) -> Converter:
    """``convert``, which accepts what the JSON Schema ``schema`` describes (for editors; the
    converter stays the judge: a schema cannot say "a legal Kafka topic name")."""
    convert.json_schema = dict(schema)  # type: ignore[attr-defined]
    return convert


def json_schema(convert: Converter) -> dict[str, Any]:
    """The JSON Schema of ``convert``'s values; ``{}`` (anything) for a converter that does
    not declare one (a section's key read by the section's own code)."""
    return dict(getattr(convert, "json_schema", {}))


# --- converters: each returns the typed value or raises Invalid ------------------------------
def string(value: Any) -> str:
    if not isinstance(value, str) or not value:
        raise Invalid(f"expected a non-empty string, got {describe(value)}")
    return value


def boolean(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Invalid(f"expected true or false, got {describe(value)}")
    return value


def integer(minimum: int | None = None, maximum: int | None = None) -> Converter:
    def read(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise Invalid(f"expected an integer, got {describe(value)}")
        if minimum is not None and value < minimum:
            raise Invalid(f"must be at least {minimum:,}, got {value:,}")
        if maximum is not None and value > maximum:
            raise Invalid(f"must be at most {maximum:,}, got {value:,}")
        return value

    bounds = {"minimum": minimum, "maximum": maximum}
    return with_schema(
        read, {"type": "integer", **{k: v for k, v in bounds.items() if v is not None}}
    )


def choice(enum: type[Enum], aliases: Mapping[Any, str] | None = None) -> Converter:
    """One of the enum's values; ``aliases`` maps other YAML scalars (e.g. ``None``) to one."""

    def read(value: Any) -> Enum:
        if aliases and isinstance(value, Hashable) and value in aliases:
            value = aliases[value]
        try:
            return enum(value)
        except ValueError:
            names = ", ".join(str(member.value) for member in enum)
            raise Invalid(f"expected one of {names}, got {describe(value)}") from None

    values = [member.value for member in enum]
    return with_schema(read, {"enum": values + [a for a in (aliases or {}) if a not in values]})


def duration(minimum: timedelta = timedelta(0)) -> Converter:
    """``30s``, ``15m``, ``1h``, ``1h30m``, ``500ms``, ``2d``. Bare numbers are refused: a unit
    is required, so nobody has to guess whether ``900`` means seconds or milliseconds."""

    def read(value: Any) -> timedelta:
        text = value.strip() if isinstance(value, str) else None
        parts = _DURATION_PART.findall(text) if text else []
        if not text or "".join(n + u for n, u in parts) != text.replace(" ", ""):
            raise Invalid(f"expected a duration such as '30s', '15m', '1h', got {describe(value)}")
        total = sum((float(n) * _DURATION_UNITS[u] for n, u in parts), timedelta(0))
        if total < minimum:
            raise Invalid(f"must be at least {format_duration(minimum)}, got {value!r}")
        return total

    return with_schema(read, {"type": "string", "pattern": DURATION_PATTERN})


DURATION_PATTERN = r"^\s*(\d+(\.\d+)?(ms|s|m|h|d)\s*)+$"
"""What :func:`duration` reads, as a JSON Schema pattern (editors)."""


def format_duration(value: timedelta) -> str:
    """The shortest exact spelling in the units :func:`duration` reads: ``15m``, ``1h30m``."""
    ms = round(value.total_seconds() * 1000)
    if ms == 0:
        return "0s"
    out = []
    for unit, size in (("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1000), ("ms", 1)):
        count, ms = divmod(ms, size)
        if count:
            out.append(f"{count}{unit}")
    return "".join(out)


def byte_size(minimum: int = 0) -> Converter:
    """An integer number of bytes, or ``"64MiB"``, ``"1MB"``, ``"512KiB"`` (KB/MB/GB are
    powers of 1000, KiB/MiB/GiB powers of 1024)."""

    def read(value: Any) -> int:
        if isinstance(value, int) and not isinstance(value, bool):
            size = value
        elif isinstance(value, str) and (match := _SIZE.fullmatch(value.strip())):
            size = int(float(match.group(1)) * _SIZE_UNITS[match.group(2)])
        else:
            raise Invalid(f"expected a size such as 1048576 or '64MiB', got {describe(value)}")
        if size < minimum:
            raise Invalid(f"must be at least {minimum:,} bytes, got {size:,}")
        return size

    return with_schema(
        read,
        {
            "anyOf": [
                {"type": "integer", "minimum": minimum},
                {"type": "string", "pattern": r"^\s*\d+(\.\d+)?\s*([KMG]i?B|B)?\s*$"},
            ]
        },
    )


def calendar_date(value: Any) -> date:
    """A YAML date (``2020-01-01`` unquoted) or an ISO date string."""
    if isinstance(value, date):
        return value
    if isinstance(value, str):
        try:
            return date.fromisoformat(value)
        except ValueError:
            pass
    raise Invalid(f"expected a date YYYY-MM-DD, got {describe(value)}")


def list_of(convert: Converter, *, non_empty: bool = False, unique: bool = True) -> Converter:
    def read(value: Any) -> tuple[Any, ...]:
        if isinstance(value, str) or not isinstance(value, (list, tuple)):
            raise Invalid(f"expected a list, got {describe(value)}")
        if non_empty and not value:
            raise Invalid("expected at least one entry, got an empty list")
        out = []
        for index, item in enumerate(value):
            try:
                out.append(convert(item))
            except Invalid as error:
                raise Invalid(str(error), f"[{index}]{error.subpath}") from None
            if unique and item in value[:index]:
                raise Invalid(f"duplicate entry {describe(item)}", f"[{index}]")
        return tuple(out)

    schema: dict[str, Any] = {"type": "array", "items": json_schema(convert)}
    if non_empty:
        schema["minItems"] = 1
    if unique:
        schema["uniqueItems"] = True
    return with_schema(read, schema)


def string_map(value: Any) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise Invalid(f"expected a mapping, got {describe(value)}")
    out: dict[str, str] = {}
    for key, item in value.items():
        try:
            out[string(key)] = string(item)
        except Invalid as error:
            raise Invalid(str(error), f".{key}") from None
    return out


def checked(convert: Converter, problem: Callable[[Any], str | None]) -> Converter:
    """``convert``, then refuse values for which ``problem`` returns a message."""

    def read(value: Any) -> Any:
        result = convert(value)
        message = problem(result)
        if message:
            raise Invalid(message)
        return result

    return with_schema(read, json_schema(convert))


with_schema(string, {"type": "string", "minLength": 1})
with_schema(boolean, {"type": "boolean"})
# A YAML date unquoted is a date to PyYAML and a string to editors (YAML 1.2).
with_schema(calendar_date, {"type": "string", "format": "date"})
with_schema(
    string_map, {"type": "object", "additionalProperties": {"type": "string", "minLength": 1}}
)


def identity(value: Any) -> Any:
    """A section key whose value is read by the section's own code."""
    return value


def read_value(
    section: Mapping[str, Any], key: str, convert: Converter, default: Any, problems: Problems,
    path: str = "",
) -> Any:  # fmt: skip
    """``section[key]`` converted, or ``default`` when absent or invalid (the problem noted)."""
    if key not in section:
        return default
    try:
        return convert(section[key])
    except Invalid as error:
        problems.add(join(path, key) + error.subpath, str(error))
        return default


def build_section(
    base: Any, raw: Any, path: str, spec: Mapping[str, Converter], problems: Problems
) -> Any:
    """``base`` with the valid keys of ``raw`` applied; cross-field errors land on ``path``."""
    before = len(problems.items)
    values = read_section(raw, path, spec, problems)
    if len(problems.items) > before:
        return base  # cross-field checks on a half-read section would only add noise
    try:
        return replace(base, **values)
    except (ValueError, TypeError, ConfigError) as error:  # ConfigError: a checked __post_init__
        problems.add(path, str(error).removeprefix(f"{path}: "))
        return base
