"""The native stage kernel's Rust checks: ``cargo clippy -D warnings`` over the crate and its
tests, then its unit tests (``cargo test``). ``make kernel-check`` runs both. ``make test`` runs
the unit tests only (``--tests-only``), as the unit ``kernel-rust`` of its lanes
(scripts/test_lanes.py), beside the other units: each check compiles the crate and its
dependencies again (clippy ~3.5 min, the tests ~1.7 min, cold, on two busy cores), and CI's 90
minutes hold the tests, not both; clippy is a developer's ``make kernel-check`` (and the
serial ``make lint`` checks ``cargo fmt`` only).

The builds share the crate's target directory (``kernel/target``, or ``CARGO_TARGET_DIR``)
with ``make kernel``'s, so a second run compiles only what changed. Crates come from
crates.io; nothing downloads a toolchain.

Without cargo the checks are skipped with a message (the kernel is optional: ``make install``
then builds none), unless ``KBQE_REQUIRE_KERNEL=1`` (``.ci/run`` sets it where cargo is),
which makes a missing cargo a failure.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

KERNEL = Path(__file__).resolve().parents[1] / "kernel"
REQUIRE = "KBQE_REQUIRE_KERNEL"
CHECKS = (
    ("clippy", ["clippy", "--locked", "--all-targets", "--", "-D", "warnings"]),
    ("unit tests", ["test", "--locked"]),
)


def kernel_required(environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``KBQE_REQUIRE_KERNEL=1``: every kernel skip is then a failure."""
    return environ.get(REQUIRE, "").strip() == "1"


def main(argv: list[str] | None = None) -> int:
    tests_only = "--tests-only" in (sys.argv[1:] if argv is None else argv)
    checks = [c for c in CHECKS if not (tests_only and c[0] == "clippy")]
    cargo = shutil.which("cargo")
    if cargo is None:
        if kernel_required():
            print(f"kernel-rust: FAILED: cargo not found and {REQUIRE}=1", flush=True)
            return 1
        print("kernel-rust: skipped: cargo not found (the native kernel is optional)", flush=True)
        return 0
    for name, args in checks:
        started = time.monotonic()
        print(f"kernel-rust: cargo {' '.join(args)}", flush=True)
        # No debug info in the test build: a failing Rust test names its line without it, and
        # the cold compile and link of PyO3 and its dependencies is what CI waits for.
        env = {
            **os.environ,
            "CARGO_PROFILE_DEV_DEBUG": os.environ.get("CARGO_PROFILE_DEV_DEBUG", "0"),
        }
        code = subprocess.run([cargo, *args], cwd=KERNEL, env=env, check=False).returncode
        print(
            f"kernel-rust: {name}: exit {code} in {time.monotonic() - started:,.0f} s", flush=True
        )
        if code != 0:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main())
