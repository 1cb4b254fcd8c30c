"""JSON values to their Avro form (core/formats/json_schema_avro.py compiles one converter per
schema from these pieces; pure).

A converter takes a value its JSON Schema has validated and returns what fastavro writes:
a ``date-time`` string (RFC 3339: a UTC offset or ``Z`` is required; fraction digits beyond
microseconds are truncated) becomes microseconds since the epoch, a ``date`` (``YYYY-MM-DD``)
days since the epoch, an integer a long (outside 64 bits: refused; ``3.0`` is an integer to
JSON Schema from draft 6 on). Records, arrays and maps convert only the members that need it:
a member whose schema needs no conversion is copied, not called. A value that does not
convert raises :class:`JsonSchemaMismatchError` naming its JSON pointer, which is built only
on that path (each container adds its key as the error unwinds).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from datetime import UTC, date, datetime
from typing import Any

from kbqe_dagster.core.errors import JsonSchemaMismatchError

Converter = Callable[[Any], Any]

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_DAY = date(1970, 1, 1).toordinal()
_LONG = (-(1 << 63), (1 << 63) - 1)


class ValueProblem(ValueError):
    """A value that does not convert; ``path`` is filled in (innermost first) as it unwinds."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.path: list[Any] = []

    def mismatch(self) -> JsonSchemaMismatchError:
        """The bad input it is, naming the JSON pointer of the value."""
        pointer = "".join(f"/{escape(str(p))}" for p in reversed(self.path))
        return JsonSchemaMismatchError(f"{self} at {pointer or 'the root'}")


def record_converter(steps: list[tuple[str, str, Converter | None]]) -> Converter:
    """A JSON object → the record dict; ``steps`` are (JSON key, Avro field name, converter or
    None to copy). Keys the schema does not declare are left out."""
    plain = tuple((key, name) for key, name, convert in steps if convert is None)
    converted = tuple((key, name, convert) for key, name, convert in steps if convert is not None)

    def convert(value: Mapping[str, Any]) -> dict[str, Any]:
        get = value.get
        out = {name: get(key) for key, name in plain}
        for key, name, step in converted:
            item = get(key)
            if item is None:
                out[name] = None
                continue
            try:
                out[name] = step(item)
            except ValueProblem as problem:
                problem.path.append(key)
                raise
        return out

    return convert


def array_converter(step: Converter | None) -> Converter | None:
    """Each item converted; None (copy the list) when the items need no conversion."""
    if step is None:
        return None

    def convert(items: list[Any]) -> list[Any]:
        out = []
        for index, item in enumerate(items):
            try:
                out.append(step(item))
            except ValueProblem as problem:
                problem.path.append(index)
                raise
        return out

    return convert


def map_converter(step: Converter | None) -> Converter | None:
    """Each value converted; None (copy the object) when the values need no conversion."""
    if step is None:
        return None

    def convert(entries: Mapping[str, Any]) -> dict[str, Any]:
        out = {}
        for key, item in entries.items():
            try:
                out[key] = None if item is None else step(item)
            except ValueProblem as problem:
                problem.path.append(key)
                raise
        return out

    return convert


def timestamp_micros(text: str) -> int:
    try:
        moment = datetime.fromisoformat(text)
    except (TypeError, ValueError):
        raise ValueProblem(f"{text!r} is not an RFC 3339 date-time") from None
    if moment.tzinfo is None:
        raise ValueProblem(f"date-time {text!r} has no UTC offset (RFC 3339 requires one)")
    delta = moment - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1_000_000 + delta.microseconds


def days(text: str) -> int:
    try:
        if not _DATE.fullmatch(text):
            raise ValueError
        return date.fromisoformat(text).toordinal() - _EPOCH_DAY
    except (TypeError, ValueError):
        raise ValueProblem(f"{text!r} is not a date (YYYY-MM-DD)") from None


def long_value(number: Any) -> int:
    value = int(number)  # 3.0 is an integer to JSON Schema (draft 6 on)
    if not _LONG[0] <= value <= _LONG[1]:
        raise ValueProblem(f"{number} is outside the 64-bit integer range")
    return value


def escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")
