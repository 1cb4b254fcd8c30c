"""Stopping a local-stack service for a fault, and always starting it again.

The stack is shared with the rest of the test session, so a service the suite stops is up
again before the suite moves on — also when the fault's own checks fail (``finally``). Only
services of the stack home in use are touched, through their own pid files
(``LocalService.down``/``up``); a service that is not ours cannot be stopped, and the fault
is then reported as not injected instead of silently passing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager

from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack import stack
from kbqe_dagster.localstack.base import LocalService, port_open
from kbqe_dagster.localstack.endpoints import LocalEndpoints

log = logging.getLogger(__name__)

RESTORE_ATTEMPTS = 3
"""Starts of a stopped service before a fault gives up on it (each waits its start timeout)."""


class FaultNotInjected(RuntimeError):
    """The suite could not break what it meant to break; the run must not count it."""


def service(name: str, endpoints: LocalEndpoints) -> LocalService:
    (found,) = stack.build([name], endpoints=endpoints)
    return found


class Outage:
    """A stopped service: ``restore()`` starts it again (idempotent), ``seconds`` is how long
    it was down."""

    def __init__(self, svc: LocalService) -> None:
        self.service = svc
        self.stopped_at = time.monotonic()
        self.seconds: float | None = None

    def restore(self) -> None:
        """Start the service again, and keep at it: a service left down fails every later
        step for a reason that is not the fault's (a soak then waits out its whole timeout on
        an emulator no one restarted). A start not ready within the service's timeout (the
        BigQuery emulator replaying its database on a machine at load 15-30) is waited for
        again while its process lives, and launched afresh when it died."""
        if self.seconds is not None:
            return
        for attempt in range(1, RESTORE_ATTEMPTS + 1):
            try:
                self.service.up()
                break
            except StackError as error:
                if attempt == RESTORE_ATTEMPTS:
                    raise StackError(
                        f"{self.service.name} did not come back after a fault, "
                        f"{RESTORE_ATTEMPTS} starts: {error}"
                    ) from error
                log.warning(
                    "%s not back yet (start %d of %d): %s",
                    self.service.name,
                    attempt,
                    RESTORE_ATTEMPTS,
                    str(error).splitlines()[0],
                )
                time.sleep(2)
        self.seconds = time.monotonic() - self.stopped_at
        log.info("%s is back after %.1fs", self.service.name, self.seconds)


@contextmanager
def outage(name: str, endpoints: LocalEndpoints) -> Iterator[Outage]:
    """Stop ``name`` for the body of the ``with``; it is started again when the body calls
    ``restore()`` or, at the latest, when the body ends (whatever the outcome)."""
    svc = service(name, endpoints)
    if svc.pid() is None:
        raise FaultNotInjected(
            f"{name} has no pid file under {svc.dirs.run}: it is not a service of this stack "
            "home, so the suite cannot stop it"
        )
    svc.down()
    if any(port_open(port) for port in svc.ports):
        svc.up()
        raise FaultNotInjected(f"{name} still answers on {svc.ports} after being stopped")
    log.info("%s stopped (fault injection)", name)
    down = Outage(svc)
    try:
        yield down
    finally:
        down.restore()
