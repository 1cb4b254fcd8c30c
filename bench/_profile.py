"""py-spy around the Spark Python workers of one stage run (bench/bench_stage.py --profile).

py-spy attaches to the PySpark daemon with ``--subprocesses``, so every worker it forks for a
stage task is sampled; ``raw`` output (collapsed stacks, one ``frame;frame;... count`` per
line) keeps line numbers, so the summary can say both which functions and which lines of
them the samples fall in. Idle samples (a worker waiting for its next task) are left out by
py-spy itself. Self time in ``manager (daemon.py)`` is PySpark's ``gc.collect()`` after every
task in a reused worker, not waiting.
"""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

PY_SPY = Path(sys.executable).with_name("py-spy")
_LINE = re.compile(r":\d+\)$")


class WorkerProfile:
    """``with WorkerProfile(daemon_pid, output):`` samples the daemon and its children."""

    def __init__(self, pid: int, output: Path, rate: int = 100) -> None:
        self.command = [str(PY_SPY), "record", "--pid", str(pid), "--subprocesses", "--format", "raw",
                        "--rate", str(rate), "--nonblocking", "--output", str(output)]  # fmt: skip
        self.output = output
        self.proc: subprocess.Popen | None = None

    def __enter__(self) -> WorkerProfile:
        self.output.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            self.command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        time.sleep(1.0)  # py-spy needs a moment to attach before the run starts
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGINT)  # py-spy writes its output on SIGINT
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _frame_name(frame: str) -> str:
    """``add (kbqe_dagster/staging/task.py:147)`` → ``add (kbqe_dagster/staging/task.py)``."""
    return _LINE.sub(")", frame)


def summarize(raw: Path, top: int = 15) -> dict:
    """Self time by line and by function, inclusive time by function, as % of samples."""
    self_lines: Counter[str] = Counter()
    self_funcs: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        # Drop py-spy's "process ..." roots so functions of every worker add up.
        frames = [f for f in stack.split(";") if not f.startswith("process ")]
        if not frames:
            continue
        total += count
        self_lines[frames[-1]] += count
        self_funcs[_frame_name(frames[-1])] += count
        for name in set(map(_frame_name, frames)):
            inclusive[name] += count

    def pct(counter: Counter[str]) -> list[list]:
        return [[name, round(100 * n / total, 1)] for name, n in counter.most_common(top)]

    return {"samples": total, "self_by_function": pct(self_funcs), "self_by_line": pct(self_lines),
            "inclusive_by_function": pct(inclusive)}  # fmt: skip
