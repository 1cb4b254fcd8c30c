"""``make test`` runs every test once, in two lanes whose stacks never meet
(scripts/test_lanes.py)."""

from __future__ import annotations

import importlib.util
import io
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "kbqe_dagster_tests"


@pytest.fixture
def test_lanes(tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location(
        "test_lanes_script", REPO / "scripts" / "test_lanes.py"
    )
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, module)  # its dataclasses look themselves up
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "SECOND_STACK_HOME", tmp_path / "second")
    monkeypatch.setenv("KBQE_LOCAL_HOME", str(tmp_path / "first"))
    return module


def _runs(module):
    first, second = module.lanes(io.StringIO())
    return first.runs, second.runs


def test_the_first_lane_leaves_the_second_lanes_share_of_the_stack_tests_to_it(test_lanes):
    (stack,), (no_service, share, soak) = _runs(test_lanes)
    assert stack.args[:2] == ["-m", "integration"] and share.args[:2] == ["-m", "integration"]
    assert no_service.args == ["-m", "not integration"]
    for path in test_lanes.SECOND_STACK_SHARE:
        assert (REPO / path).exists(), path
        assert f"--ignore={path}" in stack.args
        assert path in share.args
    assert f"--ignore={test_lanes.SOAK}" in stack.args and soak.args == [test_lanes.SOAK]


def test_the_second_lanes_stack_has_a_home_and_ports_of_its_own(test_lanes, tmp_path):
    from kbqe_dagster.localstack.endpoints import local_endpoints
    from reliability.soak import PORTS as SOAK_PORTS

    (stack,), (no_service, share, soak) = _runs(test_lanes)
    assert stack.env == no_service.env == soak.env == {}  # the default stack; the soak's own
    assert share.env["KBQE_LOCAL_HOME"] == str(tmp_path / "second")
    assert (tmp_path / "second" / "cache").resolve() == (tmp_path / "first" / "cache").resolve()
    second = {int(v) for k, v in share.env.items() if k.endswith("_PORT")}
    assert len(second) == len(test_lanes.SECOND_STACK_PORTS) == 8
    default = {v for k, v in vars(local_endpoints()).items() if k.endswith("_port")}
    assert not second & default
    assert not second & set(SOAK_PORTS.values())


def test_only_the_second_lane_starts_postgresql_and_kafka_connect(test_lanes):
    users = {
        p.relative_to(REPO).as_posix()
        for p in TESTS.rglob("test_*.py")
        if p != Path(__file__) and "cdc_stack" in p.read_text()
    }
    assert users, "no test uses the cdc_stack fixture: is it still its name?"
    outside = {u for u in users if not u.startswith(test_lanes.SECOND_STACK_SHARE)}
    assert outside == set(), "tests starting PostgreSQL/Connect outside the second lane's share"
