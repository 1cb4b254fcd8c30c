"""What the probe's generated code calls at run time: varint decoders (the general one, and
the error type, are ``staging/avro_binary.py``'s, shared with the keyed path), the single-byte
length table and the value ranges of fastavro's logical converters.

Kept apart from the generator (``codegen.py``) because these run per record: they are
the slow paths of the generated code (multi-byte varints, negative block counts) and must be
exact — at most 10 varint bytes, int32/int64 ranges, no negative lengths.
"""

from __future__ import annotations

import re
import struct
from typing import Any

from kbqe_dagster.staging.avro_binary import Invalid, varint

PRIMITIVES = frozenset(("null", "boolean", "int", "long", "float", "double", "bytes", "string"))
# Arrays of zero-width items (null, empty records) could claim 2**62 items in one byte; no
# producer writes that many, and fastavro would try to build the list.
MAX_ZERO_WIDTH_ITEMS = 1_000_000


# Single-byte varints of non-negative values (even bytes below 0x80); -1 sends the generated
# code to the general decoder (multi-byte or negative).
LEN1 = tuple((b >> 1) if b < 0x80 and not b & 1 else -1 for b in range(256))


def int32(buf: bytes, pos: int) -> tuple[int, int]:
    value, pos = varint(buf, pos)
    if not -0x80000000 <= value <= 0x7FFFFFFF:
        raise Invalid(f"int {value} out of the int32 range")
    return value, pos


def skip_long(buf: bytes, pos: int) -> int:
    return varint(buf, pos)[1]


def skip_int(buf: bytes, pos: int) -> int:
    return int32(buf, pos)[1]


def length(buf: bytes, pos: int) -> tuple[int, int]:
    """A length or index: a long that must not be negative."""
    value, pos = varint(buf, pos)
    if value < 0:
        raise Invalid(f"negative length or index {value}")
    return value, pos


def block_count(buf: bytes, pos: int) -> tuple[int, int]:
    """An array/map block count; a negative count is followed by the block's byte size."""
    count, pos = varint(buf, pos)
    if count < 0:
        count = -count
        size, pos = varint(buf, pos)
        if size < 0:
            raise Invalid(f"negative block size {size}")
    return count, pos


# Exactly the values fastavro's date/timestamp converters accept (Python's date/datetime
# range, year 1 to 9999); checked as integers because skipping should not build objects.
RANGE_CHECKED = {
    "int-date": (-719_162, 2_932_896),
    "long-timestamp-millis": (-62_135_596_800_000, 253_402_300_799_999),
    "long-local-timestamp-millis": (-62_135_596_800_000, 253_402_300_799_999),
    "long-timestamp-micros": (-62_135_596_800_000_000, 253_402_300_799_999_999),
    "long-local-timestamp-micros": (-62_135_596_800_000_000, 253_402_300_799_999_999),
}
# The canonical text of a UUID, which ``uuid.UUID`` always accepts (it accepts more).
UUID_PATTERN = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# Converters that accept every value of their base type.
UNCHECKED = frozenset(("bytes-decimal", "fixed-decimal"))

HELPERS: dict[str, Any] = {
    "Invalid": Invalid,
    "LEN1": LEN1,
    "varint": varint,
    "int32": int32,
    "skip_long": skip_long,
    "skip_int": skip_int,
    "length": length,
    "block_count": block_count,
    "unpack_f": struct.Struct("<f").unpack_from,
    "unpack_d": struct.Struct("<d").unpack_from,
    "MAX_ZW": MAX_ZERO_WIDTH_ITEMS,
    "UUID_FORM": re.compile(UUID_PATTERN).fullmatch,
}
