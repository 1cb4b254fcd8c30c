"""``KBQE_REQUIRE_KERNEL=1`` (``.ci/run`` sets it where cargo is): every test that skips for
want of the native kernel, or for a kernel older than it needs, fails instead
(kbqe_dagster_tests/conftest.py), so a CI without the kernel cannot pass silently."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kbqe_dagster_tests.conftest import REQUIRE_KERNEL, kernel_skip_fails

REPO = Path(__file__).resolve().parents[1]
SKIPPING = """
import pytest

missing = pytest.importorskip("kbqe_dagster_kernel_never_built", reason="the native stage kernel is not built")

def test_never_run():
    pass
"""
SKIPPING_TESTS = """
import pytest

@pytest.mark.skipif(True, reason="the installed kernel predates HOUR tables (make install)")
def test_marked():
    pass

def test_skipped_inside():
    pytest.skip("too close to midnight UTC")

@pytest.mark.xfail(reason="the kernel declines this one", strict=False)
def test_expected_to_fail():
    assert False
"""


def test_only_a_skip_for_the_kernel_fails_and_only_when_the_kernel_is_required():
    required = {REQUIRE_KERNEL: "1"}
    assert kernel_skip_fails("the native stage kernel is not built (no cargo)", required)
    assert kernel_skip_fails("KBQE_STAGE_KERNEL=off", required)
    assert not kernel_skip_fails("too close to midnight UTC for this test's fixed days", required)
    assert not kernel_skip_fails("the native stage kernel is not built (no cargo)", {})
    assert not kernel_skip_fails("the native stage kernel is not built", {REQUIRE_KERNEL: "0"})


def _pytest(tmp_path: Path, source: str, require: bool) -> str:
    test_file = tmp_path / ("test_skips" + ".py")  # (apart: test_docs reads a whole name as a file)
    test_file.write_text(source)
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
    if require:
        env[REQUIRE_KERNEL] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "kbqe_dagster_tests.conftest", "-p", "no:cacheprovider",
         "-q", "-rA", str(test_file)],
        cwd=tmp_path, env=env, capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    return done.stdout + done.stderr


@pytest.mark.parametrize("require", [False, True])
def test_a_module_that_cannot_import_the_kernel_is_skipped_or_fails(tmp_path, require):
    out = _pytest(tmp_path, SKIPPING, require)
    if require:
        assert "1 error" in out and f"{REQUIRE_KERNEL}=1 makes this kernel skip a failure" in out, (
            out
        )
    else:
        assert "1 skipped" in out, out


def test_a_kernel_skipif_fails_but_other_skips_and_expected_failures_stay(tmp_path):
    out = _pytest(tmp_path, SKIPPING_TESTS, True)
    assert "1 skipped, 1 xfailed, 1 error" in out, out  # (a skipif skips at setup: an error)
    assert "the installed kernel predates HOUR tables" in out, out
