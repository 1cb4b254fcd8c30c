"""What every fault driver shares: the run's world, the report it writes to, the seeded
random source, and starting a child process and waiting for its end."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess
from typing import Any

from reliability import children
from reliability.report import FaultEvent, SuiteReport
from reliability.world import World

log = logging.getLogger(__name__)

SIGKILLED = -9
CHILD_TIMEOUT = 240.0


class SuiteFailure(AssertionError):
    """The system did not do what the fault's guarantee says (or the fault misfired)."""


@dataclass
class Suite:
    """One suite run in progress: its world, its report, the forkserver its children come
    from, and whether this is the long run."""

    world: World
    report: SuiteReport
    procs: BaseContext
    long: bool = False

    @classmethod
    def start(cls, world: World, report: SuiteReport, long: bool) -> Suite:
        return cls(world, report, children.context(), long)

    @property
    def rnd(self) -> random.Random:
        return self.world.rnd

    def produce(self, low: int, high: int, step: str) -> int:
        """Produce between ``low`` and ``high`` messages for ``step`` (a fault kind, or
        ``iteration N``)."""
        count = self.world.produce_batch(self.rnd.randint(low, high), step)
        self.report.messages_produced += count
        return count

    def produce_to(self, topic: str, low: int, high: int, step: str) -> int:
        """:meth:`produce`, into ``topic``."""
        count = self.world.produce_batch(self.rnd.randint(low, high), step, topic)
        self.report.messages_produced += count
        return count

    def child(self, target: Callable[..., None], *args: Any) -> int:
        """Run ``target(*args)`` in a child and return its exit code (-9: SIGKILLed)."""
        return join(self.spawn(target, *args))

    def spawn(self, target: Callable[..., None], *args: Any) -> BaseProcess:
        """Start ``target(*args)`` in a child and return the process (the caller joins it)."""
        proc = self.procs.Process(target=target, args=args, daemon=True)  # type: ignore[attr-defined]
        proc.start()
        return proc

    def record(
        self, kind: str, iteration: int | None, injected: bool, detail: str, started: float
    ) -> FaultEvent:
        event = FaultEvent(kind, iteration, injected, detail, round(time.monotonic() - started, 2))
        self.report.events.append(event)
        log.info(
            "%s%s: %s — %s",
            kind,
            f" #{iteration}" if iteration is not None else "",
            "injected" if injected else "NOT injected",
            detail,
        )
        return event


def join(proc: BaseProcess, timeout: float = CHILD_TIMEOUT) -> int:
    """Wait for a child started with :meth:`Suite.spawn`; kill it when it overstays."""
    proc.join(timeout)
    if proc.is_alive():
        proc.kill()
        proc.join(10)
        raise SuiteFailure(f"child {proc.pid} did not finish within {timeout:.0f}s")
    return int(proc.exitcode if proc.exitcode is not None else -1)
