"""``kbqe run --until-idle --json`` as a user runs it, for the real-stack tests that drive the
product through its command line (formats, patterns, keyed, completeness)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

KBQE = str(Path(sys.executable).parent / "kbqe")


def until_idle(env: dict, cwd: str | Path | None = None) -> subprocess.CompletedProcess:
    """One ``kbqe run --until-idle --json``; it must exit 0 (its stderr tail otherwise)."""
    done = subprocess.run([KBQE, "run", "--until-idle", "--json"], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    return done
