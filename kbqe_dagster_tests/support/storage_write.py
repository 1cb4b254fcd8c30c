"""An in-memory Storage Write API at the client boundary (``StorageWriter``), for unit tests of
the delivery protocol: application-created COMMITTED streams that honour offsets as the API
does (``already_exists`` for an offset already written, ``out_of_range`` for a gap), rows per
stream and per table, rows refused by a predicate (the whole request then writes nothing, as
the API's row errors do), and a hook to kill the writer between two calls (the crash tests).
The real API's behaviour is pinned against the local emulator in
kbqe_dagster_tests/resources/ (engineer A's contract tests) and end to end in
kbqe_dagster_tests/delivery/test_storage_write_on_local_stack.py.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from kbqe_dagster.resources.bigquery.storage_write import AppendOutcome, StreamState

_writers: dict[str, FakeStorageWriter] = {}
_keepers: dict[str, FakeTableKeeper] = {}


class Crash(BaseException):
    """Raised by :attr:`FakeStorageWriter.crash_after` (a kill: no ``except Exception``
    catches it)."""


@dataclass
class _Stream:
    dataset: str
    table: str
    rows: list[bytes] = field(default_factory=list)
    descriptors: list[descriptor_pb2.DescriptorProto] = field(default_factory=list)


class FakeStorageWriter:
    """A ``StorageWriter`` holding streams in memory (module docstring)."""

    def __init__(self, refuse: Callable[[bytes], str | None] = lambda row: None) -> None:
        self.streams: dict[str, _Stream] = {}
        self.refuse = refuse
        """A row's refusal reason, or None: such rows are refused like the API's row errors."""
        self.calls: list[tuple[str, Any]] = []
        self.crash_after: int | None = None
        """Raise :class:`Crash` after this many appends answered (None: never)."""
        self.forgotten: list[_Stream] = []
        """Streams gone (:meth:`forget_streams`) whose rows stay in their tables."""
        self._ids = itertools.count(1)

    def forget_streams(self) -> None:
        """Every stream is gone, its rows stay in the table: what the local emulator does on
        a restart (and BigQuery when it garbage-collects a stream)."""
        self.forgotten += self.streams.values()
        self.streams.clear()

    def create_stream(self, dataset: str, table: str, kind: str = "committed") -> str:
        assert kind == "committed"
        name = f"projects/p/datasets/{dataset}/tables/{table}/streams/s{next(self._ids)}"
        self.streams[name] = _Stream(dataset, table)
        self.calls.append(("create_stream", name))
        return name

    def stream_state(self, stream: str) -> StreamState | None:
        return StreamState(stream, "committed", None, None) if stream in self.streams else None

    def append(self, stream: str, rows: Any, offset: int | None) -> AppendOutcome:
        if stream not in self.streams:
            from kbqe_dagster.core.errors import WriteStreamNotFoundError

            raise WriteStreamNotFoundError(f"stream {stream} does not exist (any more)")
        target = self.streams[stream]
        self.calls.append(("append", (stream, offset, len(rows.rows))))
        try:
            if offset is not None and offset < len(target.rows):
                return AppendOutcome(
                    "already_exists",
                    f"Offset {offset} already committed; next expected {len(target.rows)}",
                )
            if offset is not None and offset > len(target.rows):
                return AppendOutcome(
                    "out_of_range", f"offset {offset} is beyond the end {len(target.rows)}"
                )
            errors = tuple(
                (i, why) for i, row in enumerate(rows.rows) if (why := self.refuse(row)) is not None
            )
            if errors:
                return AppendOutcome("rows_refused", "invalid rows", errors)
            target.rows.extend(rows.rows)
            target.descriptors.extend([rows.descriptor] * len(rows.rows))
            return AppendOutcome("appended", offset=offset)
        finally:
            appends = sum(1 for kind, _ in self.calls if kind == "append")
            if self.crash_after is not None and appends >= self.crash_after:
                self.crash_after = None
                raise Crash(f"killed after append {appends}")

    def finalize(self, stream: str) -> int:
        return len(self.streams[stream].rows)

    def release(self, stream: str) -> None:
        self.calls.append(("release", stream))

    def commit(self, dataset: str, table: str, streams: Sequence[str]) -> None:
        raise AssertionError("the delivery protocol uses COMMITTED streams only")

    def close(self) -> None:
        pass

    # --- for assertions ---------------------------------------------------------------------
    def table_rows(self, dataset: str, table: str) -> list[dict]:
        """Every row of the table's streams, decoded."""
        out = []
        for s in [*self.forgotten, *self.streams.values()]:
            if (s.dataset, s.table) == (dataset, table):
                out += [_decode(d, r) for d, r in zip(s.descriptors, s.rows)]
        return out

    def appends(self) -> list[tuple[str, int | None, int]]:
        return [args for kind, args in self.calls if kind == "append"]


def _decode(descriptor: descriptor_pb2.DescriptorProto, row: bytes) -> dict:
    from google.protobuf.json_format import MessageToDict

    pool = descriptor_pool.DescriptorPool()
    file = descriptor_pb2.FileDescriptorProto(name="row.proto", package="fake")
    file.message_type.add().CopyFrom(descriptor)
    pool.Add(file)
    cls = message_factory.GetMessageClass(pool.FindMessageTypeByName(f"fake.{descriptor.name}"))
    message = cls()
    message.ParseFromString(row)
    return MessageToDict(message, preserving_proto_field_name=True)


class FakeTableKeeper:
    """The table keeper (delivery/tables.py) at the BigQuery metadata boundary: records which
    tables were made ready with which columns, in order."""

    def __init__(self, writer: FakeStorageWriter | None = None) -> None:
        self.ensured: list[tuple[str, str, tuple[str, ...]]] = []
        self.writer = writer
        self.asked: list[tuple[str, str, int, int, int]] = []
        """Every :meth:`offsets_present` question: (dataset, table, partition, first, last)."""

    def ensure(self, dataset: str, table: str, file_schema: dict, layout: Any) -> None:
        self.ensured.append((dataset, table, tuple(f["name"] for f in file_schema["fields"])))

    def offsets_present(
        self,
        dataset: str,
        table: str,
        columns: tuple[str, str, str],
        topic: str,
        partition: int,
        first: int,
        last: int,
        required_column: str | None = None,
    ) -> frozenset[int]:
        """The table's rows are the writer's (every stream's, gone ones included)."""
        self.asked.append((dataset, table, partition, first, last))
        topic_col, partition_col, offset_col = columns
        rows = self.writer.table_rows(dataset, table) if self.writer else []
        return frozenset(
            int(r[offset_col])
            for r in rows
            if r.get(topic_col) == topic
            and int(r[partition_col]) == partition
            and first <= int(r[offset_col]) <= last
        )


@dataclass(frozen=True)
class FakeWriterSettings:
    """Picklable settings naming an in-memory writer of this process (by ``name``)."""

    name: str

    def writer(self) -> FakeStorageWriter:
        return _writers[self.name]


@dataclass(frozen=True)
class FakeKeeperSettings:
    name: str

    def keeper(self) -> FakeTableKeeper:
        return _keepers[self.name]


def fake_storage_write(
    name: str, writer: FakeStorageWriter | None = None
) -> tuple[FakeWriterSettings, FakeKeeperSettings]:
    """Settings for a new in-memory writer and keeper registered under ``name`` (unique per
    test: the delivery sink keeps a writer per settings for the process)."""
    _writers[name] = writer or FakeStorageWriter()
    _keepers[name] = FakeTableKeeper(_writers[name])
    return FakeWriterSettings(name), FakeKeeperSettings(name)
