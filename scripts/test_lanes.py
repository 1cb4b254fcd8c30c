"""``make test``: the whole suite in two lanes side by side, one per core of a CI machine.

The suite is cut into units, each one pytest process: the tests that need no service, the
soak (which brings a private stack of its own), and the tests that use the local stack, one
unit per test directory; and one unit that is not pytest, ``kernel-rust``: the native
kernel's Rust unit tests (scripts/kernel_rust.py --tests-only), which compile the crate and so
run here, beside the other units, rather than in the serial ``make lint``. Two lanes take units from one queue until it is empty, so the
lanes end together whatever each unit takes. Each lane has a local stack of its own (its own
home and ports, the downloads shared), started before its first stack unit and kept for the
next: a test that stops Kafka to see what the product does stops its own lane's Kafka, and
within a lane the stack tests run in order, as they always have.

- lane 1's stack is the default one (``.kbqe-local/``, the ports ``kbqe stack up`` uses);
  one already running is reused and left running;
- lane 2's is ``.kbqe-local-2/`` on :data:`SECOND_STACK_PORTS`.

The queue starts with the longest units (:data:`FIRST_UNITS`, then
:data:`LONGER_DIRECTORIES`), the short ones last, so the lanes even out at the end. A unit's output is printed whole when it ends (it is in
``.test-lanes/<unit>.log`` while it runs), with its time; a table of every unit's lane, exit
and time closes the run.

Exits 0 when every unit passed; otherwise 1, after every unit has had its turn.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TESTS = "kbqe_dagster_tests"
SOAK = f"{TESTS}/reliability/test_soak.py"
LOGS = REPO / ".test-lanes"
KBQE = str(Path(sys.executable).parent / "kbqe")

SECOND_STACK_HOME = REPO / ".kbqe-local-2"
SECOND_STACK_PORTS = {
    "KAFKA": 29092,
    "KAFKA_CONTROLLER": 29093,
    "REGISTRY": 28081,
    "GCS": 26443,
    "BIGQUERY": 29050,
    "BIGQUERY_GRPC": 29060,
    "POSTGRES": 25432,
    "CONNECT": 28083,
}
"""Far from the default stack's (1xxxx) and the soak's (22xxx), and below Linux's ephemeral
range (32768-60999 by default): a port there can be taken by any process's outgoing connection
before the service binds it (the soak's code server once found its 34100 taken)."""

NO_TESTS_COLLECTED = 5  # pytest's exit code when the marker leaves a directory nothing to run


@dataclass
class Unit:
    """One pytest process: its arguments, and whether it runs on its lane's stack; or, with
    ``command``, a process that is not pytest (``args`` then unused)."""

    name: str
    args: Sequence[str]
    on_stack: bool
    command: Sequence[str] | None = None
    lane: int = 0
    exit_code: int | None = None
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        ok = {0, NO_TESTS_COLLECTED} if self.on_stack else {0}
        return self.exit_code in ok

    @property
    def argv(self) -> list[str]:
        if self.command is not None:
            return list(self.command)
        return [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            "--durations=15",
            *self.args,
        ]

    @property
    def what(self) -> str:
        return (
            " ".join(self.command) if self.command is not None else f"pytest {' '.join(self.args)}"
        )


def stack_unit(name: str, *paths: str, ignore: Sequence[str] = ()) -> Unit:
    return Unit(name, ["-m", "integration", *paths, *(f"--ignore={p}" for p in ignore)], True)


FIRST_UNITS = (
    # The keyed tables' stack tests with the Debezium-on-PostgreSQL oracle and the CDC
    # services' contract: the only users of PostgreSQL and Kafka Connect, so those start in
    # one lane only.
    stack_unit("keyed", f"{TESTS}/keyed", f"{TESTS}/localstack/test_cdc_contract.py"),
    # The kernel's Rust unit tests: a couple of minutes of compiling on a cold machine,
    # early so that they end long before the longest units do (skipped without cargo).
    Unit(
        "kernel-rust", [], False, command=[sys.executable, "scripts/kernel_rust.py", "--tests-only"]
    ),
    # The soak after the no-service tests, as it always ran: beside the keyed unit's
    # PostgreSQL, Connect and Spark from its first minute, on a machine loaded by other work
    # too, its daemon fell behind its settle time (runs of 10 minutes and more).
    Unit("no-service", ["-m", "not integration"], False),
    Unit("soak", [SOAK], False),
)


LONGER_DIRECTORIES = (
    "delivery", "formats", "runner", "loading", "erasure", "localstack", "resources",
    "reliability", "staging", "defs", "security", "packaging",
)  # fmt: skip
"""The stack units after :data:`FIRST_UNITS`, longest first (most ``kbqe run``s and service
restarts); the other directories follow in name order, so the short ones even the lanes out
at the end."""


def _queue_order(directory: Path) -> tuple[int, str]:
    name = directory.name
    rank = LONGER_DIRECTORIES.index(name) if name in LONGER_DIRECTORIES else len(LONGER_DIRECTORIES)
    return rank, name


def units(tests: Path = REPO / TESTS) -> list[Unit]:
    """Every test in exactly one unit (``test_lanes`` in the suite checks it)."""
    first = {p for u in FIRST_UNITS for p in u.args if p.startswith(TESTS)}
    rest = []
    for directory in sorted((p for p in tests.iterdir() if p.is_dir()), key=_queue_order):
        path = f"{TESTS}/{directory.name}"
        if path in first or not any(directory.rglob("test_*.py")):
            continue
        ignored = [p for p in sorted(first) if p.startswith(path + "/")]
        rest.append(stack_unit(directory.name, path, ignore=ignored))
    top_level = sorted(f"{TESTS}/{p.name}" for p in tests.glob("test_*.py"))
    rest.append(stack_unit("top-level", *top_level))
    return [Unit(u.name, list(u.args), u.on_stack, u.command) for u in FIRST_UNITS] + rest


@dataclass
class Lane:
    number: int
    env: dict[str, str]
    started: list[str] = field(default_factory=list)  # the stack services this lane started
    stack_up: bool = False

    def run(self, todo: queue.Queue[Unit], done: list[Unit], console: threading.Lock) -> None:
        while True:
            try:
                unit = todo.get_nowait()
            except queue.Empty:
                return
            if unit.on_stack and not self.stack_up:
                self.start_stack(console)
            unit.lane = self.number
            log = LOGS / f"{unit.name}.log"
            started = time.monotonic()
            with console:
                print(f"--- lane {self.number}: {unit.name} started", flush=True)
            with log.open("w") as out:
                unit.exit_code = subprocess.run(
                    unit.argv,
                    cwd=REPO,
                    env={**os.environ, **(self.env if unit.on_stack else {})},
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    check=False,
                ).returncode
            unit.seconds = time.monotonic() - started
            done.append(unit)
            with console:
                print(f"=== lane {self.number}: {unit.name}: {unit.what}")
                print(log.read_text(), end="")
                print(f"=== lane {self.number}: {unit.name} exit {unit.exit_code} "
                      f"in {unit.seconds:,.0f} s", flush=True)  # fmt: skip

    def kbqe_stack(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [KBQE, "stack", *args],
            cwd=REPO,
            env={**os.environ, **self.env},
            capture_output=True,
            text=True,
            check=False,
        )

    def start_stack(self, console: threading.Lock) -> None:
        """Start what of this lane's stack is not running (the tests' fixtures then reuse it);
        remember what, to stop exactly that at the end."""
        self.stack_up = True
        status = self.kbqe_stack("status", "--json")
        running = {s["name"] for s in json.loads(status.stdout or "[]") if s.get("running")}
        up = self.kbqe_stack("up")
        after = self.kbqe_stack("status", "--json")
        now = {s["name"] for s in json.loads(after.stdout or "[]") if s.get("running")}
        self.started = sorted(now - running)
        with console:
            print(
                f"--- lane {self.number}: stack up (started: {', '.join(self.started) or 'none'})"
            )
            if up.returncode != 0:  # the units' fixtures say it again, each naming the fix
                print(up.stdout + up.stderr, end="")

    def stop_stack(self) -> None:
        if self.started:
            self.kbqe_stack("down", *self.started)


def second_stack_env() -> dict[str, str]:
    """Lane 2's stack: its own home, its own ports, the default stack's downloads (Kafka,
    Apicurio, PostgreSQL and Connect's jars are large; installs are atomic)."""
    SECOND_STACK_HOME.mkdir(exist_ok=True)
    shared_cache = Path(os.environ.get("KBQE_LOCAL_HOME", REPO / ".kbqe-local")) / "cache"
    shared_cache.mkdir(parents=True, exist_ok=True)
    cache = SECOND_STACK_HOME / "cache"
    if not cache.exists():
        cache.symlink_to(shared_cache.resolve())
    env = {"KBQE_LOCAL_HOME": str(SECOND_STACK_HOME)}
    env.update({f"KBQE_LOCAL_{name}_PORT": str(port) for name, port in SECOND_STACK_PORTS.items()})
    return env


def main(names: Sequence[str]) -> int:
    """Run every unit, or only those named (``make test UNITS="keyed cli"``)."""
    chosen = units()
    if names:
        unknown = sorted(set(names) - {u.name for u in chosen})
        if unknown:
            print(f"test_lanes: no unit named {', '.join(unknown)}; the units are: "
                  f"{', '.join(u.name for u in chosen)}", file=sys.stderr)  # fmt: skip
            return 2
        chosen = [u for u in chosen if u.name in names]
    begun = time.monotonic()
    LOGS.mkdir(exist_ok=True)
    todo: queue.Queue[Unit] = queue.Queue()
    for unit in chosen:
        todo.put(unit)
    lanes = [Lane(1, {}), Lane(2, second_stack_env())]
    # Lane 1's stack first and alone: on a fresh machine it downloads Kafka and Apicurio once
    # for every stack (Maven's local repository takes no lock across processes).
    console = threading.Lock()
    if any(u.on_stack for u in chosen):
        lanes[0].start_stack(console)
    done: list[Unit] = []
    threads = [
        threading.Thread(target=lane.run, args=(todo, done, console), name=f"lane-{lane.number}")
        for lane in lanes
    ]
    try:
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        for lane in lanes:
            lane.stop_stack()
    print(f"=== make test: {time.monotonic() - begun:,.0f} s on two lanes ===")
    for unit in sorted(done, key=lambda u: -u.seconds):
        verdict = "passed" if unit.passed else f"FAILED (exit {unit.exit_code})"
        print(f"lane {unit.lane}  {unit.seconds:7,.0f} s  {unit.name:<14} {verdict}")
    return 0 if len(done) == len(chosen) and all(u.passed for u in done) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
