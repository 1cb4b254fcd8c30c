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
