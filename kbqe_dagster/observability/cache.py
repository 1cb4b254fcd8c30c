"""A slow source's latest reading, shared by every scrape.

Prometheus may scrape often, several servers may scrape at once, and an operator may hammer
``/healthcheck``: none of that should turn into as many Kafka metadata requests or bucket
listings. A :class:`CachedSource` computes its value at most once per time-to-live, with at
most one computation in flight (later callers wait for it instead of starting another), and
a caller waits at most ``wait_s``: a source slower than that is served from its previous
reading while the computation finishes in the background, so a scrape never hangs on an
unreachable system.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Reading(Generic[T]):
    """What a source last produced."""

    value: T | None
    """The latest value; ``None`` before the first success, and after a failed refresh of a
    source that does not keep its value on errors."""
    error: str | None
    """Why the latest finished refresh failed (already redacted); ``None`` when it succeeded."""
    refreshed_at: float | None
    """When the value was computed (the clock's time), ``None`` without a value."""
    duration_s: float | None
    """How long the latest finished refresh took."""

    @property
    def ok(self) -> bool:
        return self.error is None and self.value is not None

    def age_s(self, now: float) -> float | None:
        return None if self.refreshed_at is None else max(0.0, now - self.refreshed_at)


class CachedSource(Generic[T]):
    """``compute`` at most once per ``ttl_s``, one computation at a time, in a daemon thread."""

    def __init__(
        self,
        name: str,
        compute: Callable[[], T],
        ttl_s: float,
        *,
        keep_on_error: bool = False,
        describe_error: Callable[[BaseException], str] = lambda e: f"{type(e).__name__}: {e}",
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name = name
        self._compute = compute
        self.ttl_s = ttl_s
        self._keep_on_error = keep_on_error
        self._describe_error = describe_error
        self._clock = clock
        self._lock = threading.Lock()
        self._reading: Reading[T] = Reading(None, None, None, None)
        self._finished_at: float | None = None
        self._running: threading.Event | None = None

    def read(self, wait_s: float) -> Reading[T]:
        """The current reading, refreshed first when older than the time to live (waiting up to
        ``wait_s`` for the refresh; on timeout the previous reading is returned)."""
        with self._lock:
            running = self._running
            if running is None and not self._fresh():
                running = self._running = threading.Event()
                threading.Thread(
                    target=self._refresh, args=(running,), name=f"kbqe-{self.name}", daemon=True
                ).start()
        if running is not None:
            running.wait(wait_s)
        with self._lock:
            return self._reading

    def refreshing(self) -> bool:
        with self._lock:
            return self._running is not None

    def _fresh(self) -> bool:
        return self._finished_at is not None and self._clock() - self._finished_at < self.ttl_s

    def _refresh(self, done: threading.Event) -> None:
        started = self._clock()
        try:
            value = self._compute()
        except Exception as error:  # noqa: BLE001 - a source failure is a reading, not a crash
            message = self._describe_error(error)
            with self._lock:
                previous = self._reading
                # Logged when the source starts failing or fails differently, not every TTL.
                level = logging.DEBUG if previous.error == message else logging.WARNING
                log.log(level, "metrics source %s: %s", self.name, message)
                keep = self._keep_on_error
                self._reading = Reading(
                    previous.value if keep else None,
                    message,
                    previous.refreshed_at if keep else None,
                    self._clock() - started,
                )
                self._finish(done)
            return
        with self._lock:
            if self._reading.error is not None:
                log.info("metrics source %s: reachable again", self.name)
            now = self._clock()
            self._reading = Reading(value, None, now, now - started)
            self._finish(done)

    def _finish(self, done: threading.Event) -> None:
        self._finished_at = self._clock()
        self._running = None
        done.set()
