"""A storage_write table's staged records as Storage Write rows: each record file of the range
(an Avro container in the task's work directory, memory bounded like any staged file) is read
back, every record encoded as a row of its file schema's writer schema
(core/formats/avro_proto.py) into a rows file beside it, and cut into requests under the API's
size limit. Reading and cutting are deterministic: a retry of the same range sends the same
requests at the same stream offsets, which is what makes ``ALREADY_EXISTS`` mean "ours".

Encoding takes the native kernel's ``RowEncoder`` (kernel/src/proto_rows.rs) when the
extension is built, ``KBQE_STAGE_KERNEL`` is not ``off`` and the kernel implements the file's
schema: it writes the same rows file byte for byte (docs/architecture.md, "Storage Write
rows natively"). Whatever it is not certain of (a schema outside its grammar, a value the
Python encoder would refuse or convert otherwise), it refuses, and the whole file is encoded
here in Python, the reference: dead letters and errors are always this path's.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path
from typing import Any

from fastavro import block_reader, parse_schema, reader, schemaless_writer

from kbqe_dagster.core.errors import RowEncodeError
from kbqe_dagster.core.formats.avro_proto import MAX_REQUEST_BYTES, batches, row_encoder
from kbqe_dagster.staging import native_kernel
from kbqe_dagster.staging.avro_binary import encode_long

CHUNK_RECORDS = 4096
"""Records encoded and cut into requests at a time (bounded memory; deterministic cuts)."""


@dataclass
class RowsFile:
    """The encodable records of one record file, as rows, each with its record's index."""

    path: Path
    rows: int = 0
    bytes: int = 0
    unencodable: tuple[tuple[int, str], ...] = ()
    """(record index, why) of records that cannot be rows: dead-lettered, never appended."""
    encoded_by: str = native_kernel.PYTHON
    """``native`` when the kernel wrote the rows file, else ``python``."""


def encode_file(
    records_path: Path, schema: dict, source: str, skip: tuple[str, frozenset[int]] | None = None
) -> RowsFile:
    """Encode every record of the Avro container ``records_path`` (written under ``schema``)
    into a rows file next to it; ``skip``: (offset column, Kafka offsets) of records that are
    not rows of this attempt (already in the table: an intent's ``delivered_before``)."""
    native = _encode_natively(records_path, schema, skip)
    if native is not None:
        return native
    out = RowsFile(records_path.with_suffix(".rows"))
    refused: list[tuple[int, str]] = []
    column, offsets = skip or ("", frozenset())
    encode = row_encoder(schema, source)
    with open(records_path, "rb") as src, open(out.path, "wb") as dst:
        for index, record in enumerate(reader(src)):
            if offsets and record.get(column) in offsets:
                continue
            try:
                row = encode(record, index)
            except RowEncodeError as error:
                refused.append((index, str(error)))
                continue
            dst.write(encode_long(index) + encode_long(len(row)) + row)
            out.rows += 1
            out.bytes += len(row)
    out.unencodable = tuple(refused)
    return out


_NATIVE_CACHE_SIZE = 128
_native_encoders: OrderedDict[str, Any] = OrderedDict()
_native_lock = threading.Lock()


def _native_encoder(schema: Mapping[str, Any]) -> Any | None:
    """The kernel's compiled ``RowEncoder`` of ``schema`` (cached per schema, a refusal too),
    or None: the extension is not built, the switch is off or the kernel refuses the schema."""
    extension = native_kernel.extension()
    if extension is None:
        return None
    key = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    with _native_lock:
        if key in _native_encoders:
            _native_encoders.move_to_end(key)
            return _native_encoders[key]
    try:
        encoder = extension.RowEncoder(key)
    except ValueError:  # a schema the kernel does not implement: the Python encoder's
        encoder = None
    with _native_lock:
        _native_encoders[key] = encoder
        while len(_native_encoders) > _NATIVE_CACHE_SIZE:
            _native_encoders.popitem(last=False)
    return encoder


def _encode_natively(
    records_path: Path, schema: dict, skip: tuple[str, frozenset[int]] | None
) -> RowsFile | None:
    """:func:`encode_file` by the kernel, block by block (fastavro reads the container and
    decompresses its blocks); None when the kernel is not certain of the file, whose
    partial rows file the Python path then writes over."""
    encoder = _native_encoder(schema)
    if encoder is None:
        return None
    column, offsets = skip or ("", frozenset())
    names = [field.get("name") for field in schema.get("fields") or ()]
    skip_field = names.index(column) if offsets and column in names else None
    out = RowsFile(records_path.with_suffix(".rows"), encoded_by=native_kernel.NATIVE)
    with open(records_path, "rb") as src, open(out.path, "wb") as dst:
        blocks = block_reader(src)
        # The rows follow the file's own writer schema: it must be the schema given.
        if json.loads(blocks.metadata["avro.schema"]) != schema:
            return None
        index = 0
        for block in blocks:
            done = encoder.encode_block(
                block.bytes_.getvalue(),
                block.num_records,
                index,
                skip_field,
                offsets if skip_field is not None else None,
            )
            if done is None:
                return None
            framed, rows, size = done
            dst.write(framed)
            out.rows += rows
            out.bytes += size
            index += block.num_records
    return out


def _read_long(handle: Any) -> int | None:
    shift = result = 0
    while True:
        byte = handle.read(1)
        if not byte:
            return None
        b = byte[0]
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1)
        shift += 7


def _rows(path: Path) -> Iterator[tuple[int, bytes]]:
    with open(path, "rb") as handle:
        while (index := _read_long(handle)) is not None:
            size = _read_long(handle)
            yield index, handle.read(size or 0)


def requests(
    rows: RowsFile, max_bytes: int = MAX_REQUEST_BYTES
) -> Iterator[tuple[list[int], list[bytes]]]:
    """(record indices, rows) of each request, in order."""
    chunk: list[tuple[int, bytes]] = []

    def cut() -> Iterator[tuple[list[int], list[bytes]]]:
        position = 0
        for batch in batches([row for _, row in chunk], max_bytes):
            yield [i for i, _ in chunk[position : position + len(batch)]], batch
            position += len(batch)

    for item in _rows(rows.path):
        chunk.append(item)
        if len(chunk) >= CHUNK_RECORDS:
            yield from cut()
            chunk = []
    if chunk:
        yield from cut()


def records_at(records_path: Path, indices: set[int]) -> dict[int, tuple[dict, bytes]]:
    """The records at ``indices`` of a record file: (record, its bytes as staged), for the
    dead letters of rows the API refused (rare: one more read of the file)."""
    found: dict[int, tuple[dict, bytes]] = {}
    with open(records_path, "rb") as src:
        avro = reader(src)
        parsed = parse_schema(avro.writer_schema)
        for index, record in enumerate(avro):
            if index in indices:
                body = BytesIO()
                schemaless_writer(body, parsed, record)
                found[index] = (record, body.getvalue())
    return found
