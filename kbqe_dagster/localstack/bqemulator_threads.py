"""``python -m kbqe_dagster.localstack.bqemulator_threads start …``: bqemulator's own command
line, with each worker thread on a DuckDB cursor of its own instead of the one shared
connection, and a cheaper AppendRows (below).

Why. bqemulator 1.4.0 shares one DuckDB connection between its REST handlers (the asyncio
main thread) and its Storage Write handlers (gRPC worker threads). Two things go wrong when a
table is queried while rows are appended, which is exactly what the stage loop's tests and
the latency benchmark do:

- a deadlock: an AppendRows inserts from a registered Arrow table, so DuckDB holds the
  connection's lock while its scan waits for the GIL; a query arriving at that moment holds
  the GIL while it waits for the connection's lock, and the emulator never answers again
  (``py-spy dump``: the main thread in ``DuckDBEngine.execute``, a gRPC thread in
  ``_flush_to_target``, the process at 0 % CPU);
- a wrong answer: a query's result is fetched after its ``execute``; an append executing on
  the shared connection in between replaces the pending result ("Attempting to execute an
  unsuccessful or closed pending query result", or no rows at all).

DuckDB's own rule is one connection (``cursor()``) per thread. Here ``DuckDBEngine.connection``
answers the engine's connection on the thread that opened it (the event loop: every REST
handler, the built-in functions registered at start-up) and, on any other thread, a cursor of
that connection kept for the thread. A cursor sees the same database; an append's temporary
Arrow view is registered, used and dropped on its own thread's cursor; its insert commits
when it returns, so a query sees it at once. The emulator's behaviour is otherwise unchanged:
same arguments, same answers.

It also makes the emulator's AppendRows cheaper, keeping its answers (offsets,
``ALREADY_EXISTS``/``OUT_OF_RANGE``, refused requests) as they are:

- no time-travel snapshot per append (:func:`no_snapshot_per_append`). bqemulator copies the
  whole table (``CREATE TABLE … AS SELECT *``) after every write, for ``FOR SYSTEM_TIME AS
  OF``; after every AppendRows too, so an append's cost grows with the table: half a second
  of CPU and a second of disk per append to a table of a million rows, four appends a second
  at 20,000 msg/s on 4 partitions. An append now only publishes the change (the query cache
  and materialized views see it at once, as before); loads and DML keep their snapshots.
  The price, pinned by kbqe_dagster_tests/resources/test_storage_write_on_local_stack.py:
  time travel does not see Storage Write appends (an emulator gap; kbqe never time-travels);
- column-wise rows (:func:`column_wise_proto_rows`). bqemulator turns a request's rows into
  an Arrow table row by row, each row's every field through a Python dict and a type
  dispatch that tries up to eleven Arrow type predicates per value: 19 µs per row of the
  latency benchmark's table, 2 µs column-wise (bqemulator's function timed in one process).
  A request whose writer schema is flat (scalar fields only: what the stage path sends for
  a flat table) is decoded column by column, each column's conversion chosen once per
  request; the values and the Arrow table are the same. A request the column-wise path
  cannot convert (a value a column cannot take, a row that does not parse) is converted
  again by bqemulator's own code, which raises its own error as before.

And it reads TIME columns of Avro files that hold a decimal (:func:`time_in_decimal_files`):
bqemulator reads such files through fastavro into Arrow, whose type it derives from the Avro
schema without the ``time-*`` logical types, so the decoded ``datetime.time`` met an int64
column and the load failed ("Could not convert datetime.time"): every Debezium table with a
``numeric`` and a ``time`` column (BigQuery loads it). The files without a decimal are read by
DuckDB itself and were never affected.

And it parses each SQL text once (:func:`parse_once`). bqemulator parses a query's text
with sqlglot about a dozen times per job (statement classification, DML and DROP guards,
row-access rewriting, catalog schema, each translation rule), and sqlglot's parser is what
the emulator spends its CPU on: 81 % of its samples (``py-spy``) while a keyed table with 25
columns merged, its checks' statements taking seconds each to parse. A parse now keeps its
trees (up to :data:`PARSED_TEXTS` texts) and each call answers a copy of them, twenty times
cheaper than parsing again; callers that change a tree change their own copy. Only texts of
at least :data:`CACHED_FROM` characters are kept: a short one parses faster than it hashes
and copies.

Imports nothing of kbqe_dagster beyond the package's (cheap) ``__init__``: it runs inside the
emulator's process.
"""

from __future__ import annotations

import threading
from functools import cache
from typing import Any


def per_thread_cursors() -> None:
    """Make ``DuckDBEngine.connection`` answer a cursor per thread off the opening thread."""
    from bqemulator.storage.engine import DuckDBEngine

    shared = DuckDBEngine.connection
    if getattr(shared.fget, "kbqe_per_thread", False):
        return
    owner = threading.get_ident()  # the emulator opens its engine on this (the main) thread
    local = threading.local()

    def connection(self: Any) -> Any:
        conn = shared.fget(self)
        if threading.get_ident() == owner:
            return conn
        cursors = local.__dict__.setdefault("cursors", {})
        cursor = cursors.get(id(conn))
        if cursor is None or cursor[0] is not conn:
            cursor = cursors[id(conn)] = (conn, conn.cursor())
        return cursor[1]

    connection.kbqe_per_thread = True  # type: ignore[attr-defined]
    DuckDBEngine.connection = property(connection, doc=shared.__doc__)  # type: ignore[method-assign]


def no_snapshot_per_append() -> None:
    """Storage Write appends (``_flush_to_target``: AppendRows, FlushRows, BatchCommit) publish
    ``TableDataChanged`` without capturing a time-travel snapshot (module docstring); every
    other write path's ``record_change`` is unchanged."""
    from bqemulator.domain.events import TableDataChanged
    from bqemulator.grpc_api.write_servicer import BigQueryWriteHandler
    from bqemulator.versioning.snapshots import SnapshotManager

    flush = BigQueryWriteHandler._flush_to_target
    if getattr(flush, "kbqe_no_snapshot", False):
        return
    record_change = SnapshotManager.record_change
    appending = threading.local()

    def _flush_to_target(self: Any, stream: Any, rows: Any) -> None:
        appending.active = True
        try:
            flush(self, stream, rows)
        finally:
            appending.active = False

    def record_change_unless_appending(
        self: Any, project_id: str, dataset_id: str, table_id: str
    ) -> Any:
        if getattr(appending, "active", False):
            self._events.publish(TableDataChanged(project_id, dataset_id, table_id))
            return None
        return record_change(self, project_id, dataset_id, table_id)

    _flush_to_target.kbqe_no_snapshot = True  # type: ignore[attr-defined]
    BigQueryWriteHandler._flush_to_target = _flush_to_target  # type: ignore[method-assign]
    SnapshotManager.record_change = record_change_unless_appending  # type: ignore[method-assign]


def column_wise_proto_rows() -> None:
    """Replace ``proto_rows_to_arrow_table`` (every AppendRows request's proto rows, as the
    gRPC servicer calls it) by :func:`_column_wise`, falling back to the original for a
    nested or repeated writer schema and for any request the column-wise path refuses."""
    from bqemulator.grpc_api import write_servicer
    from bqemulator.storage import arrow_bridge
    from bqemulator.streaming import proto_deserializer

    original = proto_deserializer.proto_rows_to_arrow_table
    if getattr(write_servicer.proto_rows_to_arrow_table, "kbqe_column_wise", False):
        return
    if not hasattr(arrow_bridge, "_ARROW_TYPE_COERCERS"):
        return  # another bqemulator: its own conversion, unpatched

    def proto_rows_to_arrow_table(decoder: Any, serialized_rows: list, target_schema: Any) -> Any:
        try:
            table = _column_wise(decoder, serialized_rows, target_schema)
        except Exception:  # noqa: BLE001 - bqemulator's own code says what is wrong, as before
            table = None
        if table is None:
            return original(decoder, serialized_rows, target_schema)
        return table

    proto_rows_to_arrow_table.kbqe_column_wise = True  # type: ignore[attr-defined]
    write_servicer.proto_rows_to_arrow_table = proto_rows_to_arrow_table  # type: ignore[assignment]


def _column_wise(decoder: Any, serialized_rows: list, target_schema: Any) -> Any:
    """bqemulator's ``proto_rows_to_arrow_table`` for a flat writer schema, column by column:
    the same per-value decoding (``_decode_field_value``: NULL for an absent field with
    presence) and coercion (``_coerce_to_arrow_value`` without a field: an interval, else the
    first matching Arrow type predicate, else the value), chosen once per column instead of
    per value. ``None`` for a writer schema with message or repeated fields."""
    import pyarrow as pa
    from google.protobuf.descriptor import FieldDescriptor

    descriptor = decoder._descriptor
    fields = {f.name: f for f in descriptor.fields}
    if any(f.is_repeated or f.type == FieldDescriptor.TYPE_MESSAGE for f in fields.values()):
        return None
    new = decoder._message_class
    messages = []
    for raw in serialized_rows:
        message = new()
        message.ParseFromString(raw)
        messages.append(message)
    arrays = {}
    for target in target_schema:
        proto = fields.get(target.name)
        if proto is None:
            values: list = [None] * len(messages)
        else:
            values = _column(messages, proto, target.type)
        arrays[target.name] = pa.array(values, type=target.type)
    return pa.table(arrays, schema=target_schema)


def _column(messages: list, proto: Any, arrow_type: Any) -> list:
    name = proto.name
    decode = _decoder_of(proto)
    if proto.has_presence:
        raw = [decode(getattr(m, name)) if m.HasField(name) else None for m in messages]
    else:
        raw = [decode(getattr(m, name)) for m in messages]
    coerce = _coercer_of(proto, arrow_type)
    if coerce is None:
        return raw
    return [None if v is None else coerce(v) for v in raw]


def _decoder_of(proto: Any) -> Any:
    """``_decode_field_value`` for a scalar field, chosen once."""
    from google.protobuf.descriptor import FieldDescriptor as F

    kind = proto.type
    if kind == F.TYPE_BYTES:
        return bytes
    if kind == F.TYPE_ENUM or kind in _integer_types():
        return int
    if kind == F.TYPE_STRING:
        return str
    if kind in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return float
    if kind == F.TYPE_BOOL:
        return bool
    return lambda value: value


def _coercer_of(proto: Any, arrow_type: Any) -> Any:
    """``_coerce_to_arrow_value(value, arrow_type)`` for a non-NULL value, chosen once;
    ``None`` where it is the identity on what :func:`_decoder_of` gives (an int into an
    integer column, a float into a floating one, a str into a string one)."""
    import pyarrow as pa
    from bqemulator.storage import arrow_bridge
    from google.protobuf.descriptor import FieldDescriptor as F

    if pa.types.is_interval(arrow_type):
        return arrow_bridge._coerce_interval
    coercer = next((c for p, c in arrow_bridge._ARROW_TYPE_COERCERS if p(arrow_type)), None)
    if coercer is None:
        return None
    kind = proto.type
    if pa.types.is_integer(arrow_type) and (kind == F.TYPE_ENUM or kind in _integer_types()):
        return None  # int(an int)
    if pa.types.is_floating(arrow_type) and kind in (F.TYPE_DOUBLE, F.TYPE_FLOAT):
        return None  # float(a float)
    if pa.types.is_string(arrow_type) and kind == F.TYPE_STRING:
        return None  # str(a str)
    return lambda value: coercer(value, arrow_type, None)


@cache
def _integer_types() -> frozenset[int]:
    """protobuf's integer field types (``_decode_field_value`` turns them into ``int``)."""
    from google.protobuf.descriptor import FieldDescriptor as F

    return frozenset(
        {
            F.TYPE_INT32, F.TYPE_INT64, F.TYPE_UINT32, F.TYPE_UINT64, F.TYPE_SINT32,
            F.TYPE_SINT64, F.TYPE_FIXED32, F.TYPE_FIXED64, F.TYPE_SFIXED32, F.TYPE_SFIXED64,
        }
    )  # fmt: skip


def time_in_decimal_files() -> None:
    """Give bqemulator's fastavro reader of decimal files the Arrow type of ``time-millis``
    and ``time-micros`` (microseconds of the day, as BigQuery's TIME)."""
    from bqemulator.jobs import avro_reader

    logical_to_arrow = avro_reader._avro_logical_to_arrow
    if getattr(logical_to_arrow, "kbqe_time", False):
        return

    def with_time(avro_type: dict[str, Any], logical: str) -> Any:
        if logical in ("time-millis", "time-micros"):
            import pyarrow as pa

            return pa.time64("us")
        return logical_to_arrow(avro_type, logical)

    with_time.kbqe_time = True  # type: ignore[attr-defined]
    avro_reader._avro_logical_to_arrow = with_time


PARSED_TEXTS = 128
CACHED_FROM = 2_000


def parse_once() -> None:
    """Make sqlglot's ``Dialect.parse`` answer copies of the trees it parsed from the same
    text, dialect and options before (module docstring); errors are raised as before and
    never kept."""
    from collections import OrderedDict

    from sqlglot.dialects.dialect import Dialect

    parse = Dialect.parse
    if getattr(parse, "kbqe_parse_once", False):
        return
    parsed: OrderedDict[tuple, list] = OrderedDict()
    lock = threading.Lock()

    def parse_cached(self: Any, sql: str, **opts: Any) -> list:
        if len(sql) < CACHED_FROM:
            return parse(self, sql, **opts)
        try:
            key = (type(self), hash(self), sql, tuple(sorted(opts.items())))
            hash(key)
        except TypeError:  # an option that cannot be a key: parse as before
            return parse(self, sql, **opts)
        with lock:
            trees = parsed.get(key)
            if trees is not None:
                parsed.move_to_end(key)
        if trees is None:
            trees = parse(self, sql, **opts)
            with lock:
                parsed[key] = [None if t is None else t.copy() for t in trees]
                while len(parsed) > PARSED_TEXTS:
                    parsed.popitem(last=False)
            return trees
        return [None if t is None else t.copy() for t in trees]

    parse_cached.kbqe_parse_once = True  # type: ignore[attr-defined]
    Dialect.parse = parse_cached  # type: ignore[method-assign]


def main() -> None:
    per_thread_cursors()
    parse_once()
    no_snapshot_per_append()
    column_wise_proto_rows()
    time_in_decimal_files()
    from bqemulator.cli import main as emulator_main

    emulator_main()


if __name__ == "__main__":
    main()
