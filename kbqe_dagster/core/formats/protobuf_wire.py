"""The Confluent Protobuf frame after the schema id: the *message indexes* (``format: protobuf``).

    byte 0      magic byte 0x00                    (core/record/wire.py)
    bytes 1-4   schema id, big-endian              (core/record/wire.py)
    then        message indexes: a zigzag varint count N, then N zigzag varints
    then        the Protobuf binary of the message

One registered ``.proto`` file can declare several messages; the indexes say which one the
body is: the first index picks a top-level message of the file in declaration order, each
next one a nested message of the previous. The common case, the file's first message
(``[0]``), is written as the single byte ``0`` (a count of zero), as Confluent's serializers
do; an explicit ``[0]`` (count 1, index 0) means the same.

Indexes are zigzag-encoded (Confluent writes them with ``ByteUtils.writeVarint``, i.e. signed
zigzag varints), so a negative count or index, a varint longer than 10 bytes, or a count
larger than the bytes left is malformed: :class:`ProtobufDecodeError`.
"""

from __future__ import annotations

from kbqe_dagster.core.errors import ProtobufDecodeError

FIRST_MESSAGE = (0,)
_MAX_VARINT_BYTES = 10


def read_message_indexes(body: bytes | memoryview, start: int = 0) -> tuple[tuple[int, ...], int]:
    """The message indexes at ``body[start:]`` and the position of the Protobuf binary after
    them. A count of zero is ``[0]``, the file's first message."""
    count, position = _zigzag(body, start)
    if count < 0:
        raise ProtobufDecodeError(f"message indexes: negative count {count}")
    if count == 0:
        return FIRST_MESSAGE, position
    if count > len(body) - position:  # each index takes at least one byte
        raise ProtobufDecodeError(
            f"message indexes: a count of {count} with {len(body) - position} byte(s) left"
        )
    indexes = []
    for _ in range(count):
        index, position = _zigzag(body, position)
        if index < 0:
            raise ProtobufDecodeError(f"message indexes: negative index {index}")
        indexes.append(index)
    return tuple(indexes), position


def encode_message_indexes(indexes: tuple[int, ...] | list[int]) -> bytes:
    """The bytes Confluent's serializers write for ``indexes`` (``[0]`` as the single byte 0)."""
    if tuple(indexes) == FIRST_MESSAGE:
        return b"\x00"
    return b"".join(varint(_zig(n)) for n in (len(indexes), *indexes))


def _zigzag(data: bytes | memoryview, position: int) -> tuple[int, int]:
    value = shift = 0
    for _i in range(_MAX_VARINT_BYTES):
        if position >= len(data):
            raise ProtobufDecodeError("message indexes: the frame ends inside a varint")
        byte = data[position]
        position += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (value >> 1) ^ -(value & 1), position
        shift += 7
    raise ProtobufDecodeError(f"message indexes: a varint longer than {_MAX_VARINT_BYTES} bytes")


def _zig(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def varint(n: int) -> bytes:
    """``n`` (≥ 0) as a base-128 varint: Protobuf's, and Avro's after its zig-zag."""
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
