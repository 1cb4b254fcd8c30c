"""How fresh ``kbqe demo``'s tables are, and what the fresh one cost: for each table, the
seconds from the last message produced to its rows being queryable in BigQuery, for the
``storage_write`` table (``acme_web.clicks``: its rows arrive as the stage run commits each
range) next to the load tables (after the load job), and the bytes appended through the
Storage Write API with their list price (core/load/cost.py) next to the bytes loaded free.

The storage_write table is watched by a thread that counts its rows while the stage run goes
on: the moment the count reaches what was there before plus what the demo produced is the
moment the rows became visible (to within :data:`POLL_SECONDS`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kbqe_dagster.core.load.cost import storage_write_list_price, usd

POLL_SECONDS = 0.5
GRACE_SECONDS = 15.0
"""How long after the stage run the watcher still waits for the rows (it should not need to:
a range's rows are appended before its done file commits it)."""


def count_rows(client: Any, table: str) -> int:
    """Rows in ``table`` (``dataset.table``); 0 while it does not exist yet."""
    from google.api_core.exceptions import NotFound

    try:
        return int(list(client.query(f"SELECT COUNT(*) AS n FROM `{table}`").result())[0]["n"])
    except NotFound:
        return 0


@dataclass
class VisibilityWatch:
    """Counts ``table``'s rows every :data:`POLL_SECONDS` until it holds ``expected`` rows."""

    count: Callable[[], int]
    expected: int
    clock: Callable[[], float] = time.monotonic
    seen_at: float | None = None
    rows: int = 0
    error: str | None = None
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> VisibilityWatch:
        self._thread = threading.Thread(target=self._run, name="demo-freshness", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.rows = self.count()
            except Exception as exc:  # noqa: BLE001 - the figure is missing, the demo goes on
                self.error = f"{type(exc).__name__}: {exc}"
            else:
                if self.rows >= self.expected:
                    self.seen_at = self.clock()
                    return
            self._stop.wait(POLL_SECONDS)

    def finish(self, grace_s: float = GRACE_SECONDS) -> float | None:
        """Wait up to ``grace_s`` more for the rows, stop watching; when they were seen."""
        if self._thread is not None:
            self._thread.join(grace_s)
        self._stop.set()
        return self.seen_at


@dataclass(frozen=True)
class DemoFreshness:
    """What the demo measured (monotonic seconds) and what its runs reported."""

    produced_at: float
    storage_write_tables: tuple[str, ...]
    storage_write_seen_at: float | None
    load_tables: tuple[str, ...]
    loaded_at: float
    appended: Mapping[str, Mapping[str, int]]
    """``dataset.table`` → {"rows", "bytes"} appended by the stage run (its metadata)."""
    bytes_loaded: int
    """Input bytes of the load jobs the demo ran (free)."""
    load_cadence_s: float | None = None
    """``load.cadence``: what a load table's rows wait more under the daemon, at worst."""

    def lines(self) -> list[str]:
        out = ["      freshness: last message produced → its rows queryable in BigQuery"]
        sw = ", ".join(self.storage_write_tables)
        if sw and self.storage_write_seen_at is None:
            out.append(f"        {sw} (storage_write): rows not seen (see the stage run's logs)")
        elif sw:
            out.append(
                f"        {sw} (storage_write): "
                f"{self.storage_write_seen_at - self.produced_at:.1f} s, as the stage "
                "run committed its ranges (no load job)"
            )
        cadence = (
            f" + up to load.cadence ({self.load_cadence_s:.0f} s) under the daemon"
            if self.load_cadence_s
            else ""
        )
        out.append(
            f"        {', '.join(self.load_tables)} (load): "
            f"{self.loaded_at - self.produced_at:.1f} s, after the stage run and a "
            f"load job{cadence}"
        )
        for table in self.storage_write_tables:
            a = self.appended.get(table, {})
            n_bytes = int(a.get("bytes", 0))
            out.append(
                f"      cost: {table}: {a.get('rows', 0)} row(s), {n_bytes:,} byte(s) "
                f"appended through the Storage Write API = "
                f"{usd(storage_write_list_price(n_bytes))} at list price ($0.025/GiB, "
                "before the free 2 TiB a month)"
            )
        out.append(
            f"      cost: load tables: {self.bytes_loaded:,} byte(s) loaded by batch "
            "load jobs = $0.00 (free)"
        )
        return out
