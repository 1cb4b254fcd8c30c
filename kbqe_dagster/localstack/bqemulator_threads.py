"""``python -m kbqe_dagster.localstack.bqemulator_threads start …``: bqemulator's own command
line, with each worker thread on a DuckDB cursor of its own instead of the one shared
connection.

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

Imports nothing of kbqe_dagster beyond the package's (cheap) ``__init__``: it runs inside the
emulator's process.
"""

from __future__ import annotations

import threading
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


def main() -> None:
    per_thread_cursors()
    from bqemulator.cli import main as emulator_main

    emulator_main()


if __name__ == "__main__":
    main()
