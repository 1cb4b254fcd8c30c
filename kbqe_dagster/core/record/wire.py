"""The Confluent wire format of a Kafka message value (DESIGN.md §2).

    byte 0      magic byte 0x00
    bytes 1-4   schema id, big-endian
    bytes 5-    the Avro binary body, written with that schema

Decisions:

- The schema id is read **unsigned** and must be ``0 <= id <= 2**31 - 1``. Registries store ids
  as Java ``int``; Confluent's serializers write them with a signed ``>i``. An id with the top
  bit set is therefore negative for every producer and registry and can never be resolved: it
  is rejected here, without a registry round trip, as :class:`InvalidSchemaIdError` with the
  same reason as an id the registry does not know (``unknown_schema_id``).
- ``too_short`` means fewer than 5 bytes: the header itself is incomplete. A 5-byte value is a
  well-formed frame with an **empty body**, and an empty body is a valid Avro encoding (a record
  with no fields, or whose fields all encode to zero bytes, e.g. ``null``). Whether it fits its
  schema is the decoder's call: it reports ``body_decode_error`` if it does not.
- The body is a zero-copy ``memoryview`` of the value: on the hot path it is appended as-is to
  an Avro container file (DESIGN.md §5), so no copy is made unless the caller asks for one.

Errors carry no topic/partition/offset (this function never sees them); the stage task adds
that location when it reports or raises them.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from kbqe_dagster.core.errors import (
    BadMagicError,
    FrameTooShortError,
    InvalidSchemaIdError,
    TombstoneError,
)

MAGIC_BYTE = 0x00
HEADER_SIZE = 5
MAX_SCHEMA_ID = 2**31 - 1

_HEADER = struct.Struct(">BI")


class Frame(NamedTuple):
    """A parsed message value. A ``NamedTuple`` rather than a frozen dataclass: it is built once
    per message on the hot path and is measurably cheaper to construct, and just as immutable."""

    schema_id: int
    body: memoryview


def parse_frame(value: bytes | bytearray | memoryview | None) -> Frame:
    """Split a Kafka message value into its schema id and Avro body.

    Raises :class:`TombstoneError` (``None``), :class:`FrameTooShortError` (< 5 bytes),
    :class:`BadMagicError` (byte 0 is not 0x00) or :class:`InvalidSchemaIdError` (id >= 2**31).
    """
    if value is None:
        raise TombstoneError("tombstone: the message value is null")
    if len(value) < HEADER_SIZE:
        raise FrameTooShortError(
            f"too short: {len(value)} byte(s), a Confluent frame needs at least {HEADER_SIZE}"
        )
    magic, schema_id = _HEADER.unpack_from(value)
    if magic != MAGIC_BYTE:
        raise BadMagicError(f"bad magic byte 0x{magic:02x}, expected 0x{MAGIC_BYTE:02x}")
    if schema_id > MAX_SCHEMA_ID:
        raise InvalidSchemaIdError(
            f"schema id 0x{schema_id:08x} has its top bit set (negative as a signed int): "
            "no registry can hold it"
        )
    return Frame(schema_id, memoryview(value)[HEADER_SIZE:])


def encode_frame(schema_id: int, body: bytes | bytearray | memoryview) -> bytes:
    """The Confluent-framed value for ``body`` written with ``schema_id`` (producers, tests)."""
    if not 0 <= schema_id <= MAX_SCHEMA_ID:
        raise ValueError(f"schema id {schema_id} is outside 0..{MAX_SCHEMA_ID}")
    return _HEADER.pack(MAGIC_BYTE, schema_id) + bytes(body)
