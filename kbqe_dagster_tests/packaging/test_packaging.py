"""What ``pip wheel .`` ships and how the installed product finds its files: the product
only (no tests), the files it reads at run time as package data that agree with the
repository's user-facing copies, every import declared, and ``kbqe --version``.

The wheel installed and run outside the checkout, against the local stack, is
test_wheel_on_local_stack.py."""

from __future__ import annotations

import ast
import subprocess
import sys
import zipfile

import pytest

from kbqe_dagster import cli
from kbqe_dagster.localstack import base
from kbqe_dagster.packaged import DATA_FILES, checkout_root, data_file
from kbqe_dagster_tests.packaging.wheel import PACKAGE, REPO, build_wheel, project_version

USER_FACING = {
    "pipeline.yaml": REPO / "examples" / "pipeline.yaml",
    "dagster.yaml": REPO / "dagster.yaml",
    "workspace.yaml": REPO / "workspace.yaml",
    "kafka-pom.xml": REPO / "stack" / "kafka" / "pom.xml",
    "connect-pom.xml": REPO / "stack" / "connect" / "pom.xml",
    "connect-plugin-debezium-postgres.xml": REPO
    / "stack"
    / "connect"
    / "plugin-debezium-postgres.xml",
    "connect-plugin-apicurio-converter.xml": REPO
    / "stack"
    / "connect"
    / "plugin-apicurio-converter.xml",
}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> zipfile.ZipFile:
    with zipfile.ZipFile(build_wheel(tmp_path_factory.mktemp("wheel"))) as whl:
        yield whl


# --- what the wheel holds ----------------------------------------------------------------------
def test_the_wheel_ships_the_product_and_no_tests(wheel) -> None:
    tops = {name.split("/")[0] for name in wheel.namelist()}
    assert tops == {"kbqe_dagster", f"kbqe_dagster-{project_version()}.dist-info"}


def test_every_module_of_the_package_is_in_the_wheel(wheel) -> None:
    modules = {p.relative_to(REPO).as_posix() for p in PACKAGE.rglob("*.py")}
    assert modules - set(wheel.namelist()) == set()


def test_the_wheel_carries_the_content_of_the_user_facing_copies(wheel) -> None:
    for name, copy in USER_FACING.items():
        assert wheel.read(f"kbqe_dagster/data/{name}") == copy.read_bytes(), name


def test_the_wheel_is_marked_typed(wheel) -> None:
    """PEP 561: without kbqe_dagster/py.typed, type checkers ignore the package's annotations."""
    assert "kbqe_dagster/py.typed" in wheel.namelist()


def test_the_console_script_is_kbqe(wheel) -> None:
    entry_points = wheel.read(f"kbqe_dagster-{project_version()}.dist-info/entry_points.txt")
    assert "kbqe = kbqe_dagster.cli:main" in entry_points.decode()


# --- one source of truth in the checkout --------------------------------------------------------
def test_each_packaged_file_is_a_link_to_its_user_facing_copy() -> None:
    data = PACKAGE / "data"
    assert {p.name for p in data.iterdir()} == set(DATA_FILES) == set(USER_FACING)
    for name, copy in USER_FACING.items():
        assert (data / name).is_symlink(), f"kbqe_dagster/data/{name} must link to {copy}"
        assert data_file(name) == copy.resolve()


def test_in_a_checkout_the_default_pipeline_is_examples_pipeline_yaml_as_before() -> None:
    from kbqe_dagster.cli.common import DEFAULT_PIPELINE
    from kbqe_dagster.resources.environment import DEFAULT_PIPELINE as RUNS_DEFAULT

    assert DEFAULT_PIPELINE == RUNS_DEFAULT == (REPO / "examples" / "pipeline.yaml").resolve()
    assert checkout_root() == REPO


def test_no_module_finds_files_through_its_own_location() -> None:
    """Path(__file__).parents[...] finds the repository only in a checkout: files the
    product reads go through kbqe_dagster/packaged.py."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Name) and node.id == "__file__":
                offenders.append(f"{path.relative_to(REPO)}:{node.lineno}")
    assert offenders == []


def test_a_data_file_that_is_not_packaged_is_an_error() -> None:
    with pytest.raises(ValueError, match="kbqe_dagster/data/nope.yaml: not a packaged file"):
        data_file("nope.yaml")


# --- where the stack lives ----------------------------------------------------------------------
def test_the_stack_home_is_kbqe_local_home_when_set(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("KBQE_LOCAL_HOME", str(tmp_path / "elsewhere"))
    assert base.stack_home() == tmp_path / "elsewhere"


def test_the_stack_home_of_a_checkout_is_its_kbqe_local(monkeypatch) -> None:
    monkeypatch.delenv("KBQE_LOCAL_HOME", raising=False)
    assert base.stack_home() == REPO / ".kbqe-local"


def test_the_stack_home_of_an_installed_wheel_is_the_users(monkeypatch, tmp_path) -> None:
    monkeypatch.delenv("KBQE_LOCAL_HOME", raising=False)
    monkeypatch.setattr(base, "checkout_root", lambda: None)
    monkeypatch.setenv("HOME", str(tmp_path))
    assert base.stack_home() == tmp_path / ".kbqe-local"


# --- dependencies and version -------------------------------------------------------------------
def test_every_import_of_the_package_is_a_declared_dependency() -> None:
    """deptry, configured in pyproject.toml ([tool.deptry]: what it ignores and why)."""
    done = subprocess.run(
        [sys.executable, "-m", "deptry", "kbqe_dagster"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


def test_kbqe_version_prints_the_distribution_version(capsys) -> None:
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    assert capsys.readouterr().out == f"kbqe {project_version()}\n"


# --- kbqe dev ---------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("checkout", "with_dg", "expected"),
    [
        (REPO, True, ["dg", "dev", "-h", "127.0.0.1", "-p", "3001"]),
        (
            None,
            True,
            ["dg", "dev", "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", "3001"],
        ),
        (
            REPO,
            False,
            ["dagster", "dev", "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", "3001"],
        ),
        (
            None,
            False,
            ["dagster", "dev", "-w", str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", "3001"],
        ),
    ],
    ids=["checkout-dg", "installed-wheel-dg", "checkout-without-dg", "installed-wheel-without-dg"],
)
def test_kbqe_dev_starts_dg_dev_on_the_local_instance(
    monkeypatch, tmp_path, checkout, with_dg, expected
) -> None:
    """``dg dev`` where dagster-dg-cli is installed: in a checkout from the repository root
    (the ``dg`` project, as ``make dev`` always started), from an installed wheel where the
    user is, with the wheel's workspace.yaml; without dg, ``dagster dev`` on that workspace."""
    import os
    import sys

    from kbqe_dagster import packaged
    from kbqe_dagster.demo import run

    calls: list = []
    bin_dir = tmp_path / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    for name in ("dagster", "dg") if with_dg else ("dagster",):
        (bin_dir / name).write_text("")
    monkeypatch.setattr(sys, "executable", str(bin_dir / "python"))
    monkeypatch.setenv("KBQE_LOCAL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("DAGSTER_HOME", raising=False)
    monkeypatch.setattr(packaged, "checkout_root", lambda: checkout)
    monkeypatch.setattr(os, "chdir", lambda path: calls.append(("chdir", path)))
    monkeypatch.setattr(os, "execve", lambda exe, argv, env: calls.append((exe, argv, env)))

    run.exec_dagster_dev(3001)

    *chdir, (exe, argv, env) = calls
    assert chdir == ([("chdir", REPO)] if checkout else [])
    assert exe == argv[0] == str(bin_dir / expected[0])
    assert argv[1:] == expected[1:]
    assert env["DAGSTER_HOME"] == str(tmp_path / "home" / "dagster_home")
    assert (tmp_path / "home/dagster_home/dagster.yaml").read_bytes() == (
        REPO / "dagster.yaml"
    ).read_bytes()


def test_kbqe_dev_starts_on_dagster_home_when_it_is_set(monkeypatch, tmp_path) -> None:
    """A user's own instance (PostgreSQL, another run launcher: docs/deployment.md) is
    ``$DAGSTER_HOME``, as for ``kbqe run``: ``kbqe dev`` starts on it and leaves its
    dagster.yaml as the user wrote it."""
    import os

    from kbqe_dagster.demo import run

    home = tmp_path / "prod_home"
    home.mkdir()
    (home / "dagster.yaml").write_text("storage: {postgres: {}}\n")
    calls: list = []
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    monkeypatch.setenv("KBQE_LOCAL_HOME", str(tmp_path / "local"))
    monkeypatch.setattr(os, "chdir", lambda path: None)
    monkeypatch.setattr(os, "execve", lambda exe, argv, env: calls.append(env))

    run.exec_dagster_dev(3001)

    assert calls[0]["DAGSTER_HOME"] == str(home)
    assert (home / "dagster.yaml").read_text() == "storage: {postgres: {}}\n"
    assert not (tmp_path / "local" / "dagster_home").exists()
