"""The writer schema of a staged avro file, read from its container header only.

Only the first bytes of the file are fetched (a ranged read on GCS): the header is the magic
``Obj\\x01`` and a metadata map holding ``avro.schema``, usually a few KiB, while the file can
be hundreds of MiB. The load step needs the schema only when a destination table does not
exist yet (see ``resources/bigquery/schema.py`` for why).
"""

from __future__ import annotations

import json
from typing import Any

from kbqe_dagster.core.errors import LoadError
from kbqe_dagster.resources.staging_store import StagingStore

_MAGIC = b"Obj\x01"
FIRST_READ = 64 * 1024
MAX_HEADER = 64 * 1024 * 1024


class _Truncated(Exception):
    """The bytes read so far end inside the header."""


def read_avro_schema(store: StagingStore, name: str) -> dict[str, Any]:
    """The writer schema in the header of avro file ``name``; :class:`LoadError` naming the
    file when it is not an Avro container file."""
    size = FIRST_READ
    while True:
        head = store.read_head(name, size)
        try:
            metadata = parse_header(head, complete=len(head) < size)
        except _Truncated:
            if size >= MAX_HEADER:
                raise LoadError(
                    f"{store.uri(name)}: Avro header larger than {MAX_HEADER} bytes"
                ) from None
            size *= 4
            continue
        except LoadError as error:
            raise LoadError(f"{store.uri(name)}: {error}") from None
        break
    try:
        return json.loads(metadata["avro.schema"])
    except (KeyError, ValueError) as error:
        raise LoadError(f"{store.uri(name)}: no readable avro.schema in the header") from error


def parse_header(data: bytes, complete: bool = True) -> dict[str, bytes]:
    """The metadata map of an Avro container header at the start of ``data``.

    ``complete``: ``data`` is the whole file, so running out of bytes is corruption, not a
    short read."""
    if len(data) < len(_MAGIC):
        if not complete:
            raise _Truncated
        raise LoadError("not an Avro container file (too short)")
    if data[:4] != _MAGIC:
        raise LoadError("not an Avro container file (bad magic bytes)")
    reader = _Reader(data, 4, complete)
    metadata: dict[str, bytes] = {}
    while True:
        count = reader.long()
        if count == 0:
            return metadata
        if count < 0:  # a negative count is followed by the block's size in bytes
            count = -count
            reader.long()
        for _ in range(count):
            key = reader.raw(reader.long()).decode("utf-8", "replace")
            metadata[key] = reader.raw(reader.long())


class _Reader:
    def __init__(self, data: bytes, position: int, complete: bool) -> None:
        self.data = data
        self.position = position
        self.complete = complete

    def _end(self) -> None:
        if not self.complete:
            raise _Truncated
        raise LoadError("Avro header ends early (truncated or corrupt file)")

    def long(self) -> int:
        shift = result = 0
        while True:
            if self.position >= len(self.data):
                self._end()
            byte = self.data[self.position]
            self.position += 1
            result |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return (result >> 1) ^ -(result & 1)
            shift += 7
            if shift > 63:
                raise LoadError("Avro header holds an invalid varint")

    def raw(self, size: int) -> bytes:
        if size < 0:
            raise LoadError("Avro header holds a negative length")
        if self.position + size > len(self.data):
            self._end()
        chunk = self.data[self.position : self.position + size]
        self.position += size
        return chunk
