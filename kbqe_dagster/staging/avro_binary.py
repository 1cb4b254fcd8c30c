"""Avro's zig-zag longs, both ways: the binary primitive the container writer
(``avro_container.py``), the record probe (``probe/``) and the keyed path's value skippers
(``keyed/avro_skip.py``) share.

Reading is exact (the probe's rules: at most 10 varint bytes, within int64) and raises
:class:`Invalid`, the probe's error type, when a body breaks an encoding rule.
"""

from __future__ import annotations

__all__ = ["Invalid", "encode_long", "varint"]


class Invalid(Exception):
    """The body breaks an Avro encoding rule; the message says which."""


def encode_long(value: int) -> bytes:
    """An Avro long: zig-zag, then base-128 varint."""
    n = (value << 1) ^ (value >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def varint(buf: bytes, pos: int) -> tuple[int, int]:
    """A zigzag long at ``pos``: (value, next position). At most 10 bytes, within int64."""
    b = buf[pos]
    pos += 1
    n = b & 0x7F
    shift = 7
    while b & 0x80:
        if shift == 70:
            raise Invalid("varint longer than 10 bytes")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        shift += 7
    if n >> 64:
        raise Invalid("long out of the int64 range")
    return (n >> 1) ^ -(n & 1), pos
