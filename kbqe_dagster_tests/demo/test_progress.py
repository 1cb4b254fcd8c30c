"""A long demo step prints a periodic count instead of silence, and the count never breaks
the step it watches."""

from __future__ import annotations

import threading

from kbqe_dagster.demo.progress import every


def test_a_step_longer_than_the_period_prints_a_count_per_period() -> None:
    lines: list[str] = []
    ticked = threading.Event()

    def report(elapsed: float) -> str:
        if len(lines) >= 1:
            ticked.set()
        return f"{len(lines) + 1} so far"

    with every(0.01, report, lines.append):
        assert ticked.wait(5)
    assert lines[:2] == ["1 so far", "2 so far"]


def test_a_short_step_prints_nothing() -> None:
    lines: list[str] = []
    with every(60, lambda _: "never", lines.append):
        pass
    assert lines == []


def test_a_failing_count_or_nothing_to_say_is_skipped_and_the_step_goes_on() -> None:
    lines: list[str] = []
    calls = []
    done = threading.Event()

    def report(elapsed: float) -> str | None:
        calls.append(elapsed)
        if len(calls) == 1:
            raise OSError("staging area not reachable")
        if len(calls) == 2:
            return None
        done.set()
        return "third"

    with every(0.01, report, lines.append):
        assert done.wait(5)
    assert lines[0] == "third"
