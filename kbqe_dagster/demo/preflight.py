"""Before ``kbqe demo`` does any work: is the local stack in a state an earlier run may have
left bad? Each problem says what is wrong and the command that fixes it, so the demo stops
at once instead of failing minutes later (or, worse, quietly loading a table short).

:func:`stack_problems` and :func:`staging_problems` decide from plain facts and are
unit-tested; :func:`check_stack` and :func:`check_staging` gather the facts.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kbqe_dagster.core.errors import KbqeError
from kbqe_dagster.core.load.state import LoadState

START_OVER = "kbqe stack down && kbqe stack up --fresh"
NOT_ANSWERING_GRACE_SECONDS = 15.0  # a loaded machine answers slowly; a hung service never


@dataclass(frozen=True)
class ServiceFact:
    name: str
    pid: int | None
    """The pid of our process when it is alive, else ``None`` (the demo starts it)."""
    answering: bool


@dataclass(frozen=True)
class Problem:
    what: str
    fix: str

    def __str__(self) -> str:
        return f"{self.what}\n    fix: {self.fix}"


class DemoPreflightError(KbqeError):
    """The local stack is in a state the demo cannot run on; the problems say why."""

    def __init__(self, problems: Sequence[Problem]) -> None:
        self.problems = tuple(problems)
        super().__init__(
            f"the local stack is not ready for the demo: {len(self.problems)} problem(s), "
            "each with its fix above"
        )


def stack_problems(services: Sequence[ServiceFact]) -> list[Problem]:
    """A service whose process is alive but does not answer: the demo would wait for it and
    fail. A service that is not running is no problem: the demo starts it."""
    return [
        Problem(
            f"{s.name} was started (pid {s.pid}) but does not answer",
            f"kbqe stack down && kbqe stack up (if it still does not answer: {START_OVER}; "
            f"its log is .kbqe-local/run/{s.name}/{s.name}.log)",
        )
        for s in services
        if s.pid is not None and not s.answering
    ]


def staging_problems(state: LoadState | None, state_error: str | None) -> list[Problem]:
    """An unreadable load state stops every load; quarantined files of a table would never
    reach it, so the demo's row counts could not match what it produced."""
    if state_error is not None:
        return [
            Problem(
                f"the load state file of the local staging area is unreadable: "
                f"{_first_line(state_error)}",
                f"{START_OVER} (a production staging area has a safe recovery: docs/runbook.md)",
            )
        ]
    problems = []
    for dataset, table in sorted(state.quarantined_tables() if state else ()):
        held = [q for q in state.quarantined if (q.dataset, q.table) == (dataset, table)]
        problems.append(
            Problem(
                f"{len(held)} file(s) of {dataset}.{table} are quarantined by an earlier run "
                f"(last error: {_first_line(held[-1].error)})",
                f"kbqe load release --table {dataset}.{table} --yes once the cause is fixed, or "
                f"start over: {START_OVER}",
            )
        )
    return problems


def _first_line(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[0] if lines else "(no message)"


# --- gathering the facts -------------------------------------------------------------------
def check_stack(
    statuses: Callable[[], Sequence[ServiceFact]],
    grace_seconds: float | None = None,
    poll_seconds: float = 1.0,
) -> list[Problem]:
    """The stack's problems; a service not answering gets ``grace_seconds`` (default
    :data:`NOT_ANSWERING_GRACE_SECONDS`) to answer."""
    grace = NOT_ANSWERING_GRACE_SECONDS if grace_seconds is None else grace_seconds
    deadline = time.monotonic() + grace
    while True:
        problems = stack_problems(statuses())
        if not problems or time.monotonic() >= deadline:
            return problems
        time.sleep(poll_seconds)


def check_staging(read_state: Callable[[], LoadState]) -> list[Problem]:
    from kbqe_dagster.core.errors import StateFileError

    try:
        return staging_problems(read_state(), None)
    except StateFileError as err:
        return staging_problems(None, str(err))
