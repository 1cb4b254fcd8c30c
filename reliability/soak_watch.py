"""What the soak measures while it runs: the memory of every Dagster process, and how long each
produced message took to become visible in BigQuery.

Memory: the resident set (``VmRSS``) of the daemon, the code server (its proxy and the server
process it spawns), the webserver, and each run process with its Spark JVM, every few seconds,
from ``/proc`` (no dependency). A long-lived process's trend is the least-squares slope of its
RSS after a warm-up (imports, first loads and caches fill in the first minutes), in MB per
hour (a process the soak restarts starts a new series). It counts as a leak when the slope is
above :data:`LEAK_MB_PER_HOUR` *and* the process
really grew by :data:`LEAK_MIN_GROWTH_MB` between the first and last quarter of the window:
Python's allocator moves RSS by a few MB either way, and over a ten-minute window a single
5 MB step is already a 30 MB/h "slope"; 50 MB/h that persists is 1.2 GB a day, enough to take
down a 2 GB daemon container within two days, which is the order of what has to be caught.

Freshness: per destination table, produce → visible. The poller asks each table for its highest
offset per (topic, partition) every few seconds; an offset counts as visible at the first poll
that shows its table past it (the tables are loaded range by range, whole ranges at once), so a
figure is exact to the poll interval.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from kbqe_dagster.processes import parent_pid

log = logging.getLogger(__name__)

LEAK_MB_PER_HOUR = 50.0
LEAK_MIN_GROWTH_MB = 20.0
WARM_UP_FRACTION = 0.25
WARM_UP_MIN_S = 180.0
"""The code server loads its definitions lazily and imports Spark's and the clients' modules at
the first sensor ticks and runs: its first minutes are growth that is not a leak."""
JUDGED_WINDOW_S = 300.0
"""A process life shorter than this after its warm-up (a process the soak restarted, a short
soak) gets its slope reported but is not judged: a few minutes of samples cannot tell a leak
from the allocator settling."""


# --- /proc ----------------------------------------------------------------------------------
def _ppids() -> dict[int, int]:
    out = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        parent = parent_pid(int(entry))
        if parent is not None:
            out[int(entry)] = parent
    return out


def rss_mb(pid: int) -> float:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


def cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def descendants(root: int, ppids: dict[int, int]) -> list[int]:
    children: dict[int, list[int]] = defaultdict(list)
    for pid, ppid in ppids.items():
        children[ppid].append(pid)
    out, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def is_server_process(pid: int) -> bool:
    """The code server's own processes: the proxy (``code-server start``) and the server it
    spawns (``api grpc``). Every other process under it is a run (Dagster's default run
    launcher spawns each run worker from the server with multiprocessing) or a run's child."""
    line = cmdline(pid)
    return "code-server" in line or "api grpc" in line


# --- memory -----------------------------------------------------------------------------------
@dataclass
class MemorySampler:
    """Samples every ``interval`` seconds in a thread; ``pids()`` names the long-lived
    processes at each moment (they change when the soak restarts one)."""

    pids: Any
    interval: float = 5.0
    samples: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: defaultdict(list))
    runs_peak: dict[int, float] = field(default_factory=dict)
    run_samples: int = 0
    restarts: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _started: float = 0.0

    def start(self) -> MemorySampler:
        self._started = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="soak-memory", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(30)

    def restarted(self, name: str) -> None:
        """A restarted process starts a new series: its slope is measured per life."""
        self.restarts[name].append(time.monotonic() - self._started)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a sample lost is not a soak failure
                log.exception("memory sample failed")

    def sample(self) -> None:
        now = time.monotonic() - self._started
        ppids = _ppids()
        for name, pid in self.pids().items():
            own_pids = [pid]
            runs = []
            for child in descendants(pid, ppids):
                parent = ppids.get(child)
                if name == "code_server" and parent in own_pids:
                    (own_pids if is_server_process(child) else runs).append(child)
                elif parent in own_pids:
                    own_pids.append(child)  # the daemon's and webserver's own helpers
            for run in runs:
                total = sum(rss_mb(p) for p in (run, *descendants(run, ppids)))
                self.runs_peak[run] = max(self.runs_peak.get(run, 0.0), total)
                self.run_samples += 1
            own = sum(rss_mb(p) for p in own_pids)
            if own:
                self.samples[f"{name}#{len(self.restarts[name]) + 1}"].append((now, own))

    def report(self) -> dict[str, Any]:
        series = {}
        for key, points in sorted(self.samples.items()):
            series[key] = trend(points)
        peaks = sorted(self.runs_peak.values())
        return {
            "interval_s": self.interval,
            "leak_threshold_mb_per_hour": LEAK_MB_PER_HOUR,
            "leak_min_growth_mb": LEAK_MIN_GROWTH_MB,
            "processes": series,
            "leaks": [k for k, v in series.items() if v["leak"]],
            "run_processes": {
                "count": len(peaks),
                "peak_rss_mb_p50": round(peaks[len(peaks) // 2], 1) if peaks else None,
                "peak_rss_mb_max": round(peaks[-1], 1) if peaks else None,
            },
        }


def trend(points: list[tuple[float, float]]) -> dict[str, Any]:
    """Slope (MB/h) after the warm-up, first and last RSS, and whether it is a leak."""
    warm = (
        max(points[int(len(points) * WARM_UP_FRACTION)][0], points[0][0] + WARM_UP_MIN_S)
        if points
        else 0
    )
    window = [p for p in points if p[0] >= warm]
    if len(window) < 8:
        return {"samples": len(points), "slope_mb_per_hour": None, "judged": False, "leak": False}
    n = len(window)
    mean_t = sum(t for t, _ in window) / n
    mean_m = sum(m for _, m in window) / n
    var = sum((t - mean_t) ** 2 for t, _ in window)
    slope_per_s = sum((t - mean_t) * (m - mean_m) for t, m in window) / var if var else 0.0
    quarter = max(1, n // 4)
    first = sorted(m for _, m in window[:quarter])[quarter // 2]
    last = sorted(m for _, m in window[-quarter:])[quarter // 2]
    slope = slope_per_s * 3600
    judged = window[-1][0] - window[0][0] >= JUDGED_WINDOW_S
    return {
        "samples": len(points),
        "window_s": round(window[-1][0] - window[0][0], 1),
        "rss_mb_start": round(points[0][1], 1),
        "rss_mb_end": round(points[-1][1], 1),
        "rss_mb_max": round(max(m for _, m in points), 1),
        "growth_mb": round(last - first, 1),
        "slope_mb_per_hour": round(slope, 1),
        "judged": judged,
        "leak": judged and slope > LEAK_MB_PER_HOUR and last - first > LEAK_MIN_GROWTH_MB,
    }


# --- freshness --------------------------------------------------------------------------------
@dataclass
class FreshnessPoller:
    """Produce → visible per table. ``produced`` is the fleet's :class:`Produced` (ledgers and
    send times, filled by the producer's delivery callbacks under ``lock``)."""

    client: Any
    produced: Any
    lock: threading.Lock
    tables: dict[str, tuple[str, str]]
    """name shown in the report → (dataset, table); the dead-letter table among them."""
    dead_letter: str
    interval: float = 5.0
    latencies: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    polls_failed: int = 0
    _cursor: dict[tuple[str, str, int], int] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def start(self) -> FreshnessPoller:
        self._thread = threading.Thread(target=self._loop, name="soak-freshness", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.poll()
            except Exception as error:  # noqa: BLE001 - an emulator outage is expected
                self.polls_failed += 1
                log.debug("freshness poll failed: %s", error)

    def _visible(self, name: str) -> dict[tuple[str, int], int]:
        from google.api_core.exceptions import NotFound

        dataset, table = self.tables[name]
        if name == self.dead_letter:
            sql = f"SELECT topic, `partition`, MAX(`offset`) FROM `{dataset}.{table}` GROUP BY 1, 2"
        else:
            sql = (
                f"SELECT _kafka_topic, _kafka_partition, MAX(_kafka_offset) "
                f"FROM `{dataset}.{table}` GROUP BY 1, 2"
            )
        try:
            return {
                (t, p): o
                for t, p, o in (tuple(r.values()) for r in self.client.query_and_wait(sql))
            }
        except NotFound:
            return {}

    def poll(self) -> None:
        now = time.time()
        for name in self.tables:
            visible = self._visible(name)
            with self.lock:
                for (topic, partition), high in visible.items():
                    ledger = self.produced.ledgers.get(topic)
                    sent = self.produced.sent_at.get((topic, partition))
                    if ledger is None or not sent:
                        continue
                    cursor = self._cursor.get((name, topic, partition), 0)
                    while cursor < len(sent) and sent[cursor][0] <= high:
                        offset, at = sent[cursor]
                        message = ledger.placed.get((partition, offset))
                        if message is not None and _table_name(message, self.dead_letter) == name:
                            self.latencies[name].append(now - at)
                        cursor += 1
                    self._cursor[(name, topic, partition)] = cursor

    def report(self) -> dict[str, Any]:
        out: dict[str, Any] = {"poll_interval_s": self.interval, "polls_failed": self.polls_failed}
        for name, values in sorted(self.latencies.items()):
            ordered = sorted(values)
            out[name] = {
                "messages": len(ordered),
                "p50_s": round(_pct(ordered, 0.50), 1),
                "p99_s": round(_pct(ordered, 0.99), 1),
                "max_s": round(ordered[-1], 1),
            }
        return out


def _table_name(message: Any, dead_letter: str) -> str:
    return ".".join(message.expect_table) if message.expect_table else dead_letter


def _pct(ordered: list[float], q: float) -> float:
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else 0.0
