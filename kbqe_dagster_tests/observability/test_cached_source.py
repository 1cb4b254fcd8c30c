"""A cached source: one refresh per time to live, one in flight, a bounded wait, and the
previous reading while a slow refresh finishes."""

from __future__ import annotations

import threading
import time

import pytest

from kbqe_dagster.observability.cache import CachedSource


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_readings_within_the_time_to_live_reuse_one_computation() -> None:
    clock, calls = Clock(), []
    source = CachedSource("n", lambda: calls.append(1) or len(calls), ttl_s=10, clock=clock)

    first = source.read(1)
    clock.now += 9
    second = source.read(1)
    clock.now += 2
    third = source.read(1)

    assert (first.value, second.value, third.value) == (1, 1, 2)
    assert len(calls) == 2


def test_a_burst_of_concurrent_readers_triggers_a_single_computation() -> None:
    calls, gate = [], threading.Event()

    def slow() -> str:
        calls.append(1)
        gate.wait(2)
        return "done"

    source = CachedSource("n", slow, ttl_s=60)
    readings: list = []
    readers = [threading.Thread(target=lambda: readings.append(source.read(5))) for _ in range(20)]
    for r in readers:
        r.start()
    time.sleep(0.1)
    gate.set()
    for r in readers:
        r.join()

    assert len(calls) == 1
    assert [r.value for r in readings] == ["done"] * 20


def test_a_slow_refresh_serves_the_previous_reading_after_the_wait() -> None:
    clock, gate, values = Clock(), threading.Event(), iter(["old", "new"])

    def compute() -> str:
        value = next(values)
        if value == "new":
            gate.wait(5)
        return value

    source = CachedSource("n", compute, ttl_s=10, clock=clock)
    assert source.read(1).value == "old"
    clock.now += 11

    started = time.monotonic()
    stale = source.read(0.2)
    waited = time.monotonic() - started

    assert stale.value == "old"
    assert waited < 1.0
    assert stale.age_s(clock.now) == pytest.approx(11)
    gate.set()
    for _ in range(50):
        if not source.refreshing():
            break
        time.sleep(0.02)
    assert source.read(0).value == "new"


@pytest.mark.parametrize(("keep_on_error", "value_after_failure"), [(False, None), (True, 7)])
def test_a_failed_refresh_reports_its_error_and_keeps_the_value_only_when_asked(
    keep_on_error: bool, value_after_failure: int | None
) -> None:
    clock, outcomes = Clock(), iter([7, RuntimeError("broker down")])

    def compute() -> int:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    source = CachedSource("n", compute, ttl_s=1, keep_on_error=keep_on_error, clock=clock)
    assert source.read(1).ok
    clock.now += 2
    failed = source.read(1)

    assert failed.error == "RuntimeError: broker down"
    assert not failed.ok
    assert failed.value == value_after_failure
