"""A periodic count while a long step runs (staging a large backlog, waiting for load
jobs), so the console shows progress instead of silence."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager


@contextmanager
def every(
    seconds: float, report: Callable[[float], str | None], say: Callable[[str], None] = print
) -> Iterator[None]:
    """While the block runs, call ``report(elapsed seconds)`` every ``seconds`` and print its
    line (``None``: nothing to say this time). A failing ``report`` is skipped: progress is a
    courtesy and must never break the step it watches."""
    stop = threading.Event()
    started = time.monotonic()

    def tick() -> None:
        while not stop.wait(seconds):
            try:
                line = report(time.monotonic() - started)
            except Exception:  # noqa: BLE001 - see the docstring
                continue
            if line:
                say(line)

    thread = threading.Thread(target=tick, name="demo-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
