"""A service a fault stopped is started again, and the fault keeps at it: a start that fails
is retried, and one that never succeeds says which service stayed down (the soak then stops
at once instead of waiting out its timeout on an emulator no one restarted)."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.errors import StackError
from reliability import services
from reliability.services import RESTORE_ATTEMPTS, Outage


class FlakyService:
    """A service whose first ``failures`` starts are not ready in time."""

    name = "bigquery"

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.starts = 0

    def up(self) -> None:
        self.starts += 1
        if self.starts <= self.failures:
            raise StackError(f"bigquery not ready after 90s (start {self.starts})")


@pytest.fixture(autouse=True)
def no_pause(monkeypatch):
    monkeypatch.setattr(services.time, "sleep", lambda _s: None)


def test_a_start_that_fails_is_retried_until_the_service_is_back() -> None:
    svc = FlakyService(failures=RESTORE_ATTEMPTS - 1)
    down = Outage(svc)  # type: ignore[arg-type]
    down.restore()
    assert svc.starts == RESTORE_ATTEMPTS
    assert down.seconds is not None


def test_a_service_that_never_comes_back_is_named_with_the_last_reason() -> None:
    svc = FlakyService(failures=RESTORE_ATTEMPTS)
    down = Outage(svc)  # type: ignore[arg-type]
    with pytest.raises(StackError, match=r"bigquery did not come back .* 3 starts: .*start 3"):
        down.restore()
    assert down.seconds is None


def test_restoring_twice_starts_the_service_once() -> None:
    svc = FlakyService(failures=0)
    down = Outage(svc)  # type: ignore[arg-type]
    down.restore()
    down.restore()
    assert svc.starts == 1
