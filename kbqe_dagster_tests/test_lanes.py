"""``make test`` runs every test once, in units shared by two lanes whose stacks never meet
(scripts/test_lanes.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from kbqe_dagster_tests.conftest import announces_the_stack

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "kbqe_dagster_tests"


@pytest.fixture
def lanes(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "test_lanes_script", REPO / "scripts" / "test_lanes.py"
    )
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look themselves up
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "SECOND_STACK_HOME", tmp_path / "second")
    monkeypatch.setenv("KBQE_LOCAL_HOME", str(tmp_path / "first"))
    return module


def _selects(unit, test_file: str) -> bool:
    """Whether ``unit``'s paths (the whole suite when it names none) take ``test_file``."""
    paths = [a for a in unit.args if a.startswith("kbqe_dagster_tests")] or ["kbqe_dagster_tests"]
    ignored = [a.removeprefix("--ignore=") for a in unit.args if a.startswith("--ignore=")]
    inside = lambda p: test_file == p or test_file.startswith(p + "/")  # noqa: E731
    return any(inside(p) for p in paths) and not any(inside(p) for p in ignored)


def test_every_test_file_is_in_exactly_one_stack_unit_or_the_soak(lanes):
    units = lanes.units()
    stack_or_soak = [u for u in units if u.on_stack or u.name == "soak"]
    for path in sorted(TESTS.rglob("test_*.py")):
        test_file = path.relative_to(REPO).as_posix()
        takers = [u.name for u in stack_or_soak if _selects(u, test_file)]
        assert len(takers) == 1, f"{test_file} is in the units {takers}"


def test_the_tests_that_need_no_service_run_once_in_a_unit_of_their_own(lanes):
    pytest_units = [u for u in lanes.units() if u.command is None]
    (no_service,) = [u for u in pytest_units if not u.on_stack and u.name != "soak"]
    assert no_service.args == ["-m", "not integration"]
    assert all(u.args[:2] == ["-m", "integration"] for u in lanes.units() if u.on_stack)


def test_the_longest_units_are_queued_first_and_the_short_ones_last(lanes):
    names = [u.name for u in lanes.units()]
    assert names[:4] == ["keyed", "kernel-rust", "no-service", "soak"]
    longer = [n for n in lanes.LONGER_DIRECTORIES if (TESTS / n).is_dir()]
    assert names[4 : 4 + len(longer)] == longer
    assert names[4 + len(longer) :] == sorted(names[4 + len(longer) : -1]) + ["top-level"]


def test_only_the_keyed_unit_starts_postgresql_and_kafka_connect(lanes):
    (keyed,) = [u for u in lanes.units() if u.name == "keyed"]
    users = [
        p.relative_to(REPO).as_posix()
        for p in TESTS.rglob("test_*.py")
        if p != Path(__file__) and "cdc_stack" in p.read_text()
    ]
    assert users, "no test uses the cdc_stack fixture: is it still its name?"
    assert [u for u in users if not _selects(keyed, u)] == []


def test_the_second_lanes_stack_has_a_home_and_ports_of_its_own(lanes, tmp_path):
    from kbqe_dagster.localstack.endpoints import local_endpoints
    from reliability.soak import PORTS as SOAK_PORTS

    env = lanes.second_stack_env()
    assert env["KBQE_LOCAL_HOME"] == str(tmp_path / "second")
    assert (tmp_path / "second" / "cache").resolve() == (tmp_path / "first" / "cache").resolve()
    second = {int(v) for k, v in env.items() if k.endswith("_PORT")}
    assert len(second) == len(lanes.SECOND_STACK_PORTS) == 8
    default = {v for k, v in vars(local_endpoints()).items() if k.endswith("_port")}
    assert not second & default
    assert not second & set(SOAK_PORTS.values())


def test_a_directory_without_stack_tests_passes_its_unit_and_a_failure_fails_it(lanes):
    empty = lanes.stack_unit("cli", "kbqe_dagster_tests/cli")
    empty.exit_code = lanes.NO_TESTS_COLLECTED
    assert empty.passed
    no_service = lanes.Unit("no-service", ["-m", "not integration"], False)
    no_service.exit_code = lanes.NO_TESTS_COLLECTED
    assert not no_service.passed
    empty.exit_code = 1
    assert not empty.passed


def test_a_test_that_starts_services_says_so_in_its_file_name_or_its_mark() -> None:
    integration = pytest.mark.integration.mark
    x = "kbqe_dagster_tests/x"  # apart: test_docs would read these as files named here
    assert announces_the_stack(f"{x}/test_loads_on_local_stack.py::test_a", None)
    assert announces_the_stack(f"{x}/test_loads_on_emulators.py::test_a", None)
    assert announces_the_stack(f"{x}/test_loads.py::test_a", integration)
    assert not announces_the_stack(f"{x}/test_loads.py::test_a", None)
    assert not announces_the_stack(f"{x}/on_stack/test_loads.py::test_on_x", None)


def test_the_kernels_rust_checks_are_a_unit_of_their_own_not_pytest(lanes):
    """cargo test compiles the crate: a lane runs it beside the other units (make lint checks
    cargo fmt only; clippy, a second compile, is make kernel-check's, outside CI's time)."""
    (rust,) = [u for u in lanes.units() if u.command is not None]
    assert rust.name == "kernel-rust" and not rust.on_stack
    assert rust.argv == [sys.executable, "scripts/kernel_rust.py", "--tests-only"]
    assert (REPO / rust.argv[1]).is_file()
    rust.exit_code = 1
    assert not rust.passed
    makefile = (REPO / "Makefile").read_text()
    lint = makefile.split("\nlint:", 1)[1].split("\n\n", 1)[0]
    assert "cargo fmt" in lint and "clippy" not in lint and "cargo test" not in lint


@pytest.fixture
def kernel_rust(monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "kernel_rust_script", REPO / "scripts" / "kernel_rust.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_without_cargo_the_rust_checks_are_skipped_unless_the_kernel_is_required(
    kernel_rust, monkeypatch, capsys
):
    monkeypatch.setattr(kernel_rust.shutil, "which", lambda name: None)
    monkeypatch.delenv("KBQE_REQUIRE_KERNEL", raising=False)
    assert kernel_rust.main() == 0
    assert "skipped: cargo not found" in capsys.readouterr().out
    monkeypatch.setenv("KBQE_REQUIRE_KERNEL", "1")
    assert kernel_rust.main() == 1
    assert "FAILED: cargo not found and KBQE_REQUIRE_KERNEL=1" in capsys.readouterr().out
