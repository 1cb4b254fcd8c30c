"""Value conversions of the ``cast`` and ``timestamp`` transforms (core/transforms/compiler.py): strict
text to number readings, and instants as integer microseconds since the epoch, so a
conversion between units never goes through a float."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from kbqe_dagster.core.transforms.specs import CastType, TimeFormat

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROS = {"s": 10**6, "ms": 10**3, "us": 1, TimeFormat.EPOCH_S: 10**6,
          TimeFormat.EPOCH_MS: 10**3, TimeFormat.EPOCH_US: 1}  # fmt: skip
"""Microseconds per unit of an epoch number (``epoch_unit`` values and ``to:`` formats)."""
_LONG_MIN, _LONG_MAX = -(2**63), 2**63 - 1


def converter(source: str, target: CastType) -> Callable[[Any], Any]:
    """``source`` (an Avro primitive: string, long, double, boolean) → ``target``; raises
    ValueError or OverflowError for a value that does not convert."""
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


def to_micros(moment: datetime) -> int:
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    delta = moment - EPOCH
    return (delta.days * 86_400 + delta.seconds) * 10**6 + delta.microseconds


def from_micros(micros: int) -> datetime:
    return EPOCH + timedelta(microseconds=micros)


def format_time(moment: datetime, pattern: str | None) -> str:
    return moment.strftime(pattern) if pattern else moment.isoformat()


def parse_time(text: str, pattern: str | None, zone: ZoneInfo) -> datetime:
    if pattern:
        moment = datetime.strptime(text, pattern)
    else:
        body, _, annotation = text.strip().partition("[")
        moment = datetime.fromisoformat(body)
        if annotation and moment.tzinfo is None:
            zone = ZoneInfo(annotation.rstrip("]"))
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=zone)
