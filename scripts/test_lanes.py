"""``make test``: the whole suite in two lanes side by side, one per core of a CI machine.

A lane is a sequence of pytest runs. The runs that use the local stack's services run in
both lanes at once, each lane on a local stack of its own (its own home and ports, the
downloads shared), so they never meet: a test that stops Kafka to see what the product does
stops its own lane's Kafka. Within a lane the stack tests run in order, as they always have.

- **first**: the stack tests (``-m integration``), but for the second lane's share, on the
  default stack (``.kbqe-local/``, the ports ``kbqe stack up`` uses). Its output is the
  console's.
- **second**: the tests that need no service (``-m "not integration"``), then its share of
  the stack tests (:data:`SECOND_STACK_SHARE`) on a stack of its own (``.kbqe-local-2/``,
  :data:`SECOND_STACK_PORTS`), then the soak (which brings its own private stack). Its output
  goes to ``.pytest-side.log`` and is printed when the first lane is done.

The share is chosen to even the lanes out (each run's time is printed at the end, and each
pytest prints its slowest tests); it takes all the tests that need PostgreSQL and Kafka
Connect, so those are started (and downloaded, the first time) by one lane only.

Exits 0 when every run passed; otherwise 1, after every run has had its turn.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

REPO = Path(__file__).resolve().parents[1]
SOAK = "kbqe_dagster_tests/reliability/test_soak.py"
SIDE_LOG = REPO / ".pytest-side.log"

SECOND_STACK_SHARE = (
    "kbqe_dagster_tests/keyed",
    "kbqe_dagster_tests/localstack/test_cdc_contract.py",
)
"""The stack tests the second lane runs: the keyed tables' (with the Debezium-on-PostgreSQL
oracle) and the CDC services' contract, the only users of PostgreSQL and Kafka Connect."""

SECOND_STACK_HOME = REPO / ".kbqe-local-2"
SECOND_STACK_PORTS = {
    "KAFKA": 49092,
    "KAFKA_CONTROLLER": 49093,
    "REGISTRY": 48081,
    "GCS": 44443,
    "BIGQUERY": 49050,
    "BIGQUERY_GRPC": 49060,
    "POSTGRES": 45432,
    "CONNECT": 48083,
}
"""Far from the default stack's (1xxxx) and the soak's (3xxxx)."""

SHOWN_DURATIONS = "--durations=25"


@dataclass
class Run:
    """One pytest process: its arguments and the environment it adds."""

    args: Sequence[str]
    env: dict[str, str] = field(default_factory=dict)
    exit_code: int | None = None
    seconds: float = 0.0

    def describe(self) -> str:
        where = f" (stack home {self.env['KBQE_LOCAL_HOME']})" if self.env else ""
        return "pytest " + " ".join(self.args) + where


@dataclass
class Lane:
    name: str
    runs: list[Run]
    output: IO[str] | None  # None: the console

    def run_all(self) -> None:
        for run in self.runs:
            started = time.monotonic()
            command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", SHOWN_DURATIONS]
            print(f"=== lane {self.name}: {run.describe()} ===", file=self.output or sys.stdout)
            (self.output or sys.stdout).flush()
            done = subprocess.run(
                [*command, *run.args],
                cwd=REPO,
                env={**os.environ, **run.env},
                stdout=self.output,
                stderr=subprocess.STDOUT if self.output else None,
                check=False,
            )
            run.exit_code = done.returncode
            run.seconds = time.monotonic() - started


def second_stack_env() -> dict[str, str]:
    """The second lane's stack: its own home, its own ports, the default stack's downloads
    (Kafka, Apicurio, PostgreSQL and Connect's jars are large; installs are atomic, so two
    lanes may fill the cache at once)."""
    SECOND_STACK_HOME.mkdir(exist_ok=True)
    shared_cache = Path(os.environ.get("KBQE_LOCAL_HOME", REPO / ".kbqe-local")) / "cache"
    shared_cache.mkdir(parents=True, exist_ok=True)
    cache = SECOND_STACK_HOME / "cache"
    if not cache.exists():
        cache.symlink_to(shared_cache.resolve())
    env = {"KBQE_LOCAL_HOME": str(SECOND_STACK_HOME)}
    env.update({f"KBQE_LOCAL_{name}_PORT": str(port) for name, port in SECOND_STACK_PORTS.items()})
    return env


def lanes(side_log: IO[str]) -> list[Lane]:
    not_second = [f"--ignore={path}" for path in SECOND_STACK_SHARE]
    return [
        Lane("first", [Run(["-m", "integration", f"--ignore={SOAK}", *not_second])], None),
        Lane(
            "second",
            [
                Run(["-m", "not integration"]),
                Run(["-m", "integration", *SECOND_STACK_SHARE], second_stack_env()),
                Run([SOAK]),
            ],
            side_log,
        ),
    ]


def main() -> int:
    started = time.monotonic()
    with SIDE_LOG.open("w") as side_log:
        first, second = lanes(side_log)
        beside = threading.Thread(target=second.run_all, name="lane-second", daemon=True)
        beside.start()
        first.run_all()
        beside.join()
    print(f"=== lane second's output ({SIDE_LOG.name}) ===")
    print(SIDE_LOG.read_text(), end="")
    print(f"=== make test: {time.monotonic() - started:,.0f} s ===")
    for lane in (first, second):
        for run in lane.runs:
            print(
                f"lane {lane.name}: exit {run.exit_code} in {run.seconds:,.0f} s: {run.describe()}"
            )
    return 0 if all(r.exit_code == 0 for lane in (first, second) for r in lane.runs) else 1


if __name__ == "__main__":
    sys.exit(main())
