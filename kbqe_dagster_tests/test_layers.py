"""The layers of the package hold: core/ decides and imports no system or orchestrator."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kbqe_dagster

PACKAGE = Path(kbqe_dagster.__file__).parent
FORBIDDEN_IN_CORE = ("dagster", "google.cloud", "pyspark", "confluent_kafka", "requests")


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


CORE_FILES = sorted((PACKAGE / "core").rglob("*.py"))


@pytest.mark.parametrize("path", CORE_FILES, ids=lambda p: p.name)
def test_core_imports_no_system_or_orchestrator(path: Path) -> None:
    bad = {
        name
        for name in _imported_modules(path)
        for forbidden in FORBIDDEN_IN_CORE
        if name == forbidden or name.startswith(forbidden + ".")
    }
    assert not bad, f"{path.relative_to(PACKAGE)} imports {sorted(bad)}: core/ must stay pure"


def test_core_is_not_empty() -> None:
    assert len(CORE_FILES) >= 3


# --- who may import whom outside core/ -----------------------------------------------------
def _package_imports(path: Path) -> set[str]:
    """The ``kbqe_dagster`` modules a file imports, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    module = ".".join(("kbqe_dagster", *path.relative_to(PACKAGE).with_suffix("").parts))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            target = ".".join(p for p in (base, node.module or "") if p)
            names.add(target)
            names.update(f"{target}.{alias.name}" for alias in node.names)
    return {n for n in names if n == "kbqe_dagster" or n.startswith("kbqe_dagster.")}


def _imports_any(path: Path, prefixes: tuple[str, ...]) -> list[str]:
    return sorted(
        name for name in _package_imports(path)
        if any(name == p or name.startswith(p + ".") for p in prefixes)
    )


def _files_outside(*rooms: str) -> list[Path]:
    return sorted(
        p for p in PACKAGE.rglob("*.py")
        if p.relative_to(PACKAGE).parts[0] not in rooms
    )


@pytest.mark.parametrize("path", _files_outside("cli"), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_nothing_below_the_cli_imports_it(path: Path) -> None:
    bad = _imports_any(path, ("kbqe_dagster.cli",))
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}: the CLI is the top layer"


@pytest.mark.parametrize("path", sorted((PACKAGE / "operations").rglob("*.py")),
                         ids=lambda p: p.name)
def test_operations_never_import_the_demo(path: Path) -> None:
    bad = _imports_any(path, ("kbqe_dagster.demo",))
    assert not bad, f"operations/{path.name} imports {bad}: the demo sits above operations/"


def test_the_fault_hooks_are_a_leaf_that_imports_nothing_of_the_package() -> None:
    faults = PACKAGE / "faults.py"
    assert _package_imports(faults) == set()


def test_the_cli_lives_in_its_package_not_beside_it() -> None:
    strays = sorted(p.name for p in PACKAGE.glob("*.py") if "cli" in p.stem or "command" in p.stem)
    assert strays == [], f"command modules outside kbqe_dagster/cli/: {strays}"
    assert (PACKAGE / "cli" / "__init__.py").is_file()


def test_the_layer_rules_see_module_level_and_in_function_imports() -> None:
    cli_init = PACKAGE / "cli" / "__init__.py"
    assert "kbqe_dagster.cli.stack" in _package_imports(cli_init)
    demo_run = PACKAGE / "demo" / "run.py"
    assert "kbqe_dagster.demo.produce" in _package_imports(demo_run)  # imported in a function


# --- the whole order (issue 17) -------------------------------------------------------------
def _room(room: str) -> list[Path]:
    return sorted((PACKAGE / room).rglob("*.py"))


@pytest.mark.parametrize("path", _room("observability") + _room("operations"),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_observability_and_operations_never_import_the_definitions(path: Path) -> None:
    bad = _imports_any(path, ("kbqe_dagster.defs", "kbqe_dagster.definitions"))
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}: defs/ is wiring, above them"


@pytest.mark.parametrize("path", _room("resources"), ids=lambda p: str(p.relative_to(PACKAGE)))
def test_systems_never_import_the_jobs_built_on_them(path: Path) -> None:
    bad = _imports_any(path, ("kbqe_dagster.staging", "kbqe_dagster.loading",
                              "kbqe_dagster.keyed", "kbqe_dagster.runner", "kbqe_dagster.defs"))
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}: resources/ only uses core/"


@pytest.mark.parametrize("path", _files_outside("localstack", "resources", "cli", "demo"),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_local_stack_is_reached_through_one_seam(path: Path) -> None:
    # resources/environment.py builds the local resources; the CLI and the demo drive the
    # stack itself. Nothing else knows where the local services listen.
    bad = _imports_any(path, ("kbqe_dagster.localstack",))
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}: use resources/environment.py"


@pytest.mark.parametrize("path", _room("staging") + _room("loading"),
                         ids=lambda p: str(p.relative_to(PACKAGE)))
def test_the_stage_and_load_sides_never_import_each_other_or_the_wiring(path: Path) -> None:
    other = "kbqe_dagster.loading" if path.is_relative_to(PACKAGE / "staging") else "kbqe_dagster.staging"
    bad = _imports_any(path, (other, "kbqe_dagster.defs", "kbqe_dagster.runner"))
    assert not bad, f"{path.relative_to(PACKAGE)} imports {bad}"
