"""The documentation stays in step with the code it describes."""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _generator():
    spec = importlib.util.spec_from_file_location(
        "gen_config_reference", REPO / "scripts" / "gen_config_reference.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_reference_is_generated_from_the_current_field_docs() -> None:
    committed = (REPO / "docs" / "configuration.md").read_text()
    assert committed == _generator().render(), (
        "docs/configuration.md is stale: run .venv/bin/python scripts/gen_config_reference.py"
    )


def test_every_configuration_field_is_documented_where_it_is_declared() -> None:
    gen = _generator()
    undocumented = [
        f"{cls.__name__}.{name}"
        for _, cls in gen.SECTIONS
        for name, _, doc in gen.field_docs(cls)
        if not doc
    ]
    assert undocumented == []


def test_readme_quick_start_has_exactly_the_two_commands_ci_runs() -> None:
    readme = (REPO / "README.md").read_text()
    quick = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    block = re.search(r"```bash\n(.*?)```", quick, re.S).group(1)
    commands = [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]
    assert commands == ["make demo", "make test"]
    ci = (REPO / ".ci" / "run").read_text()
    assert ci.strip().splitlines()[-1] == "make test"


def test_docs_links_in_the_readme_point_at_files_that_exist() -> None:
    readme = (REPO / "README.md").read_text()
    for target in re.findall(r"\]\(((?:docs|examples)/[^)#]+)\)", readme):
        assert (REPO / target).exists(), target


def test_the_readme_map_and_the_architecture_list_every_package_folder() -> None:
    package = REPO / "kbqe_dagster"
    rooms = sorted(p.name for p in package.iterdir() if (p / "__init__.py").is_file())
    readme = (REPO / "README.md").read_text()
    architecture = (REPO / "docs" / "architecture.md").read_text()
    assert [r for r in rooms if f"`kbqe_dagster/{r}/`" not in readme] == []
    assert [r for r in rooms if f"`{r}/" not in architecture] == []
    assert "`kbqe_dagster/faults.py`" in readme and "`faults.py`" in architecture


def test_examples_readme_lists_every_example() -> None:
    """Every pipeline file, Python example and example folder of examples/ has its row in
    examples/README.md's table (a link to it), so a new example cannot go unmentioned."""
    examples = REPO / "examples"
    listed = set(re.findall(r"^\| \[`([^`]+)`\]\(", (examples / "README.md").read_text(), re.M))
    present = {p.name for p in examples.glob("*.yaml")}
    present |= {p.name for p in examples.glob("*.py") if p.name != "__init__.py"}
    present |= {
        f"{p.name}/" for p in examples.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))
    }
    assert present - listed == set(), "examples/README.md's table misses these"
    assert listed - present == set(), "examples/README.md's table lists files that do not exist"


# --- the source files a comment or docstring names ---------------------------------------------
SOURCE_DIRS = (
    "kbqe_dagster",
    "kbqe_dagster_tests",
    "kernel/src",
    "bench",
    "reliability",
    "scripts",
    "examples",
)
_NAMED_SOURCE = re.compile(r"(?<![\w./<>*(-])((?:[\w-]+/)*\w[\w-]*\.(?:py|rs))\b")
NOT_OURS = {
    "daemon.py": "PySpark's worker daemon, in a profile's frame names",
    "file.py": "a frame's file in an example of a message",
    "self.py": "Rust's `self.py` (the PyO3 token), not a file",
}


def named_sources(path: Path) -> list[tuple[int, str]]:
    """Each ``<folder>/<file>.py`` or ``<file>.rs`` that ``path``'s text names, with its line."""
    return [
        (number, match.group(1))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        for match in _NAMED_SOURCE.finditer(line)
        if match.group(1) not in NOT_OURS
    ]


def resolves(name: str, named_in: Path) -> bool:
    """A name is read from the repository, the package, the tests, the kernel, or the naming
    file's own folder and the folders above it; a bare file name from anywhere in the repo."""
    bases = [REPO / d for d in ("", "kbqe_dagster", "kbqe_dagster_tests", "kernel", "kernel/src")]
    bases += [p for p in named_in.parents if REPO in (p, *p.parents)]
    if any((base / name).exists() for base in bases):
        return True
    return "/" not in name and name in _source_file_names()


@functools.cache
def _source_file_names() -> frozenset[str]:
    return frozenset(
        path.name for folder in SOURCE_DIRS for path in (REPO / folder).rglob("*") if path.is_file()
    )


def test_every_source_file_a_comment_or_docstring_names_exists() -> None:
    """A reader follows ``staging/probe/codegen.py`` from a comment; a rename that forgets the
    comment sends them nowhere."""
    stale = [
        f"{path.relative_to(REPO)}:{number}: {name}"
        for folder in SOURCE_DIRS
        for path in sorted((REPO / folder).rglob("*"))
        if path.suffix in (".py", ".rs") and path.is_file()
        for number, name in named_sources(path)
        if not resolves(name, path)
    ]
    assert stale == [], "\n".join(stale)


def test_a_renamed_file_in_a_comment_is_found(tmp_path: Path) -> None:
    gone, there = "staging/probe_codegen" + ".py", "staging/probe/codegen" + ".py"  # apart: not
    source = tmp_path / ("note" + ".rs")  # named in this file's own text
    source.write_text(f"//! mirrors `{gone}`; see `{there}`\n")
    assert [n for _, n in named_sources(source) if not resolves(n, source)] == [gone]
