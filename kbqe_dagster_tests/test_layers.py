"""The layers of the package hold: one table of the arrows allowed between its rooms (core/'s
sub-packages included), checked for every module, and no import cycle between rooms.

Imports are read from the source (``ast``), wherever they are: at module level, inside
functions, under ``TYPE_CHECKING``. A deferred import is still a dependency.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from pathlib import Path

import pytest

import kbqe_dagster

PACKAGE = Path(kbqe_dagster.__file__).parent
FORBIDDEN_IN_CORE = ("dagster", "google.cloud", "pyspark", "confluent_kafka", "requests")

# --- the rooms and the arrows allowed between them -------------------------------------------
CORE = "core"
"""core/'s top: errors.py, reasons.py, config_reader.py, client_properties.py: what every
concern of core/ uses."""
CORE_ROOMS = frozenset(
    {
        CORE,
        "core.formats",
        "core.protocol",
        "core.record",
        "core.load",
        "core.transforms",
        "core.keyed",
        "core.completeness",
        "core.config",
        "core.stage_runs",
        "core.erasure",
    }
)

ALLOWED: dict[str, frozenset[str]] = {
    # core/ by concern, lowest first; core imports only core
    CORE: frozenset(),
    "core.formats": frozenset({CORE}),
    "core.protocol": frozenset({CORE}),
    "core.record": frozenset({CORE, "core.formats", "core.protocol"}),
    "core.load": frozenset({CORE, "core.protocol"}),
    "core.transforms": frozenset({CORE, "core.formats", "core.record"}),
    "core.keyed": frozenset({CORE, "core.formats", "core.load"}),
    "core.completeness": frozenset({CORE, "core.record"}),
    "core.config": CORE_ROOMS - {"core.config", "core.stage_runs", "core.erasure"},
    "core.stage_runs": frozenset({CORE, "core.config", "core.protocol"}),
    "core.erasure": frozenset({CORE, "core.config", "core.protocol", "core.record", "core.keyed"}),
    # the leaves and the systems
    "faults": frozenset(),  # fault hooks: imported by every room, import nothing
    "processes": frozenset(),  # whether a pid runs: a leaf too
    "packaged": frozenset(),  # the files shipped in kbqe_dagster/data/: a leaf too
    "instance_config": frozenset({"packaged"}),  # dagster.yaml per storage, from the packaged one
    # the instance's run launcher (loaded by the daemon with the instance) and the run worker's
    # identity it checks, which the pipeline resource records in a run's worker
    "run_launcher": CORE_ROOMS | {"processes"},
    "package": CORE_ROOMS,  # kbqe_dagster/__init__.py: what a user decoder imports
    "localstack": CORE_ROOMS | {"processes", "packaged"},
    "resources": CORE_ROOMS | {"localstack", "packaged", "run_launcher"},  # localstack: SEAMS
    # the stage engine and its extensions: staging never imports what plugs into it
    "staging": CORE_ROOMS | {"resources", "faults", "processes"},
    "formats": CORE_ROOMS | {"resources", "staging"},
    "keyed": CORE_ROOMS | {"resources", "staging"},
    # stager_registry.py: the one module above staging that maps a topic to its stager (it names the
    # extensions' modules as text, imported on first use; test_stager_registry.py loads every entry)
    "stager_registry": CORE_ROOMS | {"resources", "staging", "formats", "keyed"},
    # delivery/: a sink above staging (the Storage Write API), chosen by the driver; staging
    # never imports it
    "delivery": CORE_ROOMS | {"resources", "staging", "faults"},
    # the load side: never the stage side, never the wiring
    "loading": CORE_ROOMS | {"resources", "faults"},
    # what operators see and do: never the wiring above them
    "operations": CORE_ROOMS | {"resources", "loading"},
    "observability": CORE_ROOMS | {"resources", "staging", "operations"},
    # the wiring, the entry point, the in-process runner
    "defs": CORE_ROOMS
    | {
        "resources",
        "staging",
        "loading",
        "keyed",
        "formats",
        "stager_registry",
        "operations",
        "faults",
        "delivery",
    },
    "definitions": CORE_ROOMS | {"resources", "defs"},
    "runner": CORE_ROOMS
    | {
        "resources",
        "staging",
        "loading",
        "keyed",
        "formats",
        "stager_registry",
        "operations",
        "defs",
        "definitions",
        "processes",
        "delivery",
    },
    # the demo drives the local stack and the jobs; the CLI is the top and nothing imports it
    "demo": CORE_ROOMS | {"resources", "loading", "localstack", "defs", "definitions", "packaged"},
    "cli": CORE_ROOMS
    | {
        "resources",
        "localstack",
        "operations",
        "observability",
        "defs",
        "runner",
        "demo",
        "packaged",
        "instance_config",
    },
}

SEAMS = {
    "localstack": {"resources": {"resources/environment.py"}},
    "run_launcher": {"resources": {"resources/configurable.py"}},
}
"""Arrows a room may take only through the modules named: the local stack's addresses are
known to resources/environment.py (which builds the local resources), not to every system; the
run worker's identity is recorded by the pipeline resource (resources/configurable.py) alone."""


# --- reading imports --------------------------------------------------------------------------
def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE).with_suffix("").parts
    return ".".join(("kbqe_dagster", *(p for p in parts if p != "__init__")))


def _imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _package_imports(path: Path) -> set[str]:
    """The ``kbqe_dagster`` modules a file imports, relative imports resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            target = ".".join(p for p in (base, node.module or "") if p)
            for alias in node.names:  # a module of a package, else a name of the module
                full = f"{target}.{alias.name}"
                names.add(full if _is_module(full) else target)
                names.add(full)
    return {n for n in names if n == "kbqe_dagster" or n.startswith("kbqe_dagster.")}


def _is_module(name: str) -> bool:
    if not name.startswith("kbqe_dagster."):
        return False
    path = PACKAGE.joinpath(*name.split(".")[1:])
    return path.is_dir() or path.with_suffix(".py").is_file()


def _room(module: str) -> str | None:
    """The room of a ``kbqe_dagster`` module or package: a top-level package or module, or a
    sub-package of core/ (core/'s own modules are the room ``core``). ``kbqe_dagster`` itself
    is ``package``; None for a name that is no module (an attribute of one)."""
    parts = module.split(".")[1:]
    if not parts:
        return "package"
    if parts[0] == "core" and len(parts) > 1 and (PACKAGE / "core" / parts[1]).is_dir():
        return f"core.{parts[1]}"
    if (PACKAGE / parts[0]).is_dir() or (PACKAGE / f"{parts[0]}.py").is_file():
        return parts[0]
    return None


def _rooms_imported(path: Path) -> set[str]:
    rooms = {_room(name) for name in _package_imports(path)}
    return {r for r in rooms if r is not None}


def _rel(path: Path) -> str:
    return str(path.relative_to(PACKAGE))


ALL_FILES = sorted(PACKAGE.rglob("*.py"))
CORE_FILES = sorted((PACKAGE / "core").rglob("*.py"))


# --- the table, for every module ----------------------------------------------------------------
def test_every_room_of_the_package_has_a_row() -> None:
    rooms = {_room(_module_name(p)) for p in ALL_FILES}
    assert rooms - set(ALLOWED) == set()
    assert all(targets <= set(ALLOWED) for targets in ALLOWED.values())


@pytest.mark.parametrize("path", ALL_FILES, ids=_rel)
def test_every_module_imports_only_the_rooms_its_room_may(path: Path) -> None:
    own = _room(_module_name(path))
    bad = sorted(r for r in _rooms_imported(path) - {own} if r not in ALLOWED[own])
    assert not bad, f"{_rel(path)} ({own}) imports {bad}: not an arrow of the table"


@pytest.mark.parametrize("path", ALL_FILES, ids=_rel)
def test_an_arrow_through_a_seam_goes_through_it_only(path: Path) -> None:
    own = _room(_module_name(path))
    for target, through in SEAMS.items():
        if own in through and target in _rooms_imported(path):
            assert _rel(path) in through[own], (
                f"{_rel(path)} imports {target}/: only {sorted(through[own])} may, in {own}/"
            )


# --- no cycle between rooms ---------------------------------------------------------------------
def _room_graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = defaultdict(set)
    for path in ALL_FILES:
        own = _room(_module_name(path))
        graph[own] |= _rooms_imported(path) - {own}
    return graph


def _strongly_connected(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Tarjan's algorithm, iterative: the strongly connected sets of ``graph``."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    nodes = sorted(set(graph) | {t for ts in graph.values() for t in ts})
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(graph.get(root, ()))))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.add(member)
                    if member == node:
                        break
                found.append(frozenset(members))
    return found


def test_the_cycle_finder_finds_cycles() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}}
    assert sorted(map(sorted, _strongly_connected(graph))) == [["a", "b", "c"], ["d"], ["e"]]


def test_the_table_itself_has_no_cycle() -> None:
    table = {room: set(targets) - {room} for room, targets in ALLOWED.items()}
    assert [s for s in _strongly_connected(table) if len(s) > 1] == []


def test_no_two_rooms_import_each_other_even_through_others() -> None:
    cycles = [s for s in _strongly_connected(_room_graph()) if len(s) > 1]
    assert cycles == [], f"rooms importing each other: {[sorted(c) for c in cycles]}"


# --- core/ is pure ------------------------------------------------------------------------------
@pytest.mark.parametrize("path", CORE_FILES, ids=_rel)
def test_core_imports_no_system_or_orchestrator(path: Path) -> None:
    bad = {
        name
        for name in _imported_modules(path)
        for forbidden in FORBIDDEN_IN_CORE
        if name == forbidden or name.startswith(forbidden + ".")
    }
    assert not bad, f"{_rel(path)} imports {sorted(bad)}: core/ must stay pure"


def test_core_is_not_empty() -> None:
    assert len(CORE_FILES) >= 3


@pytest.mark.parametrize("path", sorted((PACKAGE / "core").rglob("__init__.py")), ids=_rel)
def test_core_packages_re_export_nothing(path: Path) -> None:
    tree = ast.parse(path.read_text())
    assert ast.get_docstring(tree), f"{_rel(path)}: say what the room owns and may import"
    assert all(isinstance(n, ast.Expr) for n in tree.body), f"{_rel(path)}: a docstring only"


# --- the rules the table must keep (issue 17), stated on the table ------------------------------
def test_nothing_below_the_cli_imports_it() -> None:
    assert [room for room, targets in ALLOWED.items() if "cli" in targets] == []


def test_operations_never_import_the_demo() -> None:
    assert "demo" not in ALLOWED["operations"]


def test_the_fault_hooks_are_a_leaf_that_imports_nothing_of_the_package() -> None:
    assert ALLOWED["faults"] == frozenset()
    assert _package_imports(PACKAGE / "faults.py") == set()
    assert ALLOWED["processes"] == frozenset()


def test_observability_and_operations_never_import_the_definitions() -> None:
    for room in ("observability", "operations"):
        assert not ALLOWED[room] & {"defs", "definitions"}, room


def test_systems_never_import_the_jobs_built_on_them() -> None:
    assert not ALLOWED["resources"] & {"staging", "loading", "keyed", "runner", "defs"}


def test_the_local_stack_is_reached_through_one_seam() -> None:
    # resources/environment.py builds the local resources; the CLI and the demo drive the
    # stack itself. Nothing else knows where the local services listen.
    reaching = {room for room, targets in ALLOWED.items() if "localstack" in targets}
    assert reaching == {"resources", "demo", "cli"}
    assert SEAMS["localstack"] == {"resources": {"resources/environment.py"}}


def test_the_stage_and_load_sides_never_import_each_other_or_the_wiring() -> None:
    assert not ALLOWED["staging"] & {"loading", "defs", "runner"}
    assert not ALLOWED["loading"] & {"staging", "defs", "runner"}


def test_the_stage_engine_never_imports_its_extensions() -> None:
    assert not ALLOWED["staging"] & {"formats", "keyed", "stager_registry"}


def test_core_imports_only_core() -> None:
    for room in CORE_ROOMS:
        assert ALLOWED[room] <= CORE_ROOMS, room


def test_the_cli_lives_in_its_package_not_beside_it() -> None:
    strays = sorted(p.name for p in PACKAGE.glob("*.py") if "cli" in p.stem or "command" in p.stem)
    assert strays == [], f"command modules outside kbqe_dagster/cli/: {strays}"
    assert (PACKAGE / "cli" / "__init__.py").is_file()


def test_the_layer_rules_see_module_level_and_in_function_imports() -> None:
    cli_init = PACKAGE / "cli" / "__init__.py"
    assert "kbqe_dagster.cli.stack" in _package_imports(cli_init)
    demo_run = PACKAGE / "demo" / "run.py"
    assert "kbqe_dagster.demo.produce" in _package_imports(demo_run)  # imported in a function
    assert "localstack" in _rooms_imported(demo_run)  # in a function too


# --- the tests' own house: what tests share lives in helper modules, never in a test module ------
REPO = PACKAGE.parent
TEST_CODE_DIRS = ("kbqe_dagster_tests", "bench", "reliability", "scripts")
_TEST_MODULE_IMPORT = re.compile(
    r"\bfrom\s+kbqe_dagster_tests(?:\.\w+)*\s+import\s+(?:\(\s*)?test_\w+"
    r"|\b(?:from|import)\s+kbqe_dagster_tests(?:\.\w+)*\.test_\w+"
)


def test_modules_named(text: str) -> list[str]:
    """The ``test_*`` modules a source text imports, in code or in a script it holds as text
    (a subprocess's program): ``from x.test_y import z``, ``import x.test_y``,
    ``from x import test_y``."""
    return [m.group(0) for m in _TEST_MODULE_IMPORT.finditer(text)]


test_modules_named.__test__ = False  # type: ignore[attr-defined]  # a helper, not a test


def test_no_test_or_bench_imports_a_test_module() -> None:
    """A test module is collected and run; one that others import becomes a library whose
    tests run again under another name, and a reader of a test cannot tell what others need
    of it. What tests share lives in ``kbqe_dagster_tests/support/`` (or a helper module
    beside its tests, never named ``test_*``)."""
    offenders = [
        f"{path.relative_to(REPO)}: {found}"
        for folder in TEST_CODE_DIRS
        for path in sorted((REPO / folder).rglob("*.py"))
        for found in test_modules_named(path.read_text())
    ]
    assert offenders == [], "\n".join(offenders)


def test_the_test_import_finder_finds_each_spelling() -> None:
    tests = "kbqe_dagster_tests"  # spelled apart, so this file is not an offender itself
    found = test_modules_named(
        f"from {tests}.loading.test_stage_then_load import good_messages\n"
        f"import {tests}.cli.test_cli_docs\n"
        f"    from {tests}.operations import test_completeness_per_hour as h\n"
        f"from {tests}.support.framing import avro_body\n"
        f"from {tests}.operations import completeness_area\n"
    )
    assert len(found) == 3, found


# --- no two modules of one room import each other ---------------------------------------------
CYCLE_DEBT: set[frozenset[str]] = set()
"""The module cycles left: none (issue 41). The last ones were kernel drivers importing their
stager's type back; each now names what it reads of its stager in a ``Protocol`` of its own
(keyed/native_stage.py ``KeyedStager``, formats/protobuf_kernel.py ``ProtobufStager``,
formats/avro_transform_kernel.py ``TransformStager``, formats/avro_destination_kernel.py
``DestinationStager``). A new cycle fails."""


def _module_graph() -> dict[str, set[str]]:
    """Each module's imports of modules of its own room (``kbqe_dagster.`` left off)."""
    modules = {
        _module_name(path).removeprefix("kbqe_dagster."): path
        for path in ALL_FILES
        if path.name != "__init__.py"
    }
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        room = _room(f"kbqe_dagster.{name}")
        for imported in _package_imports(path):
            target = imported.removeprefix("kbqe_dagster.")
            if target in modules and target != name and _room(imported) == room:
                graph[name].add(target)
    return graph


def test_no_two_modules_of_one_room_import_each_other_beyond_the_listed_debt() -> None:
    cycles = {s for s in _strongly_connected(_module_graph()) if len(s) > 1}
    assert sorted(map(sorted, cycles - CYCLE_DEBT)) == [], "new module cycles"
    assert sorted(map(sorted, CYCLE_DEBT - cycles)) == [], "gone: take them off CYCLE_DEBT"


# --- the kernel's Rust modules: no cycle either ----------------------------------------------
KERNEL_SRC = Path(__file__).resolve().parents[1] / "kernel" / "src"
CRATE_ROOT = "lib"
_RUST_COMMENT = re.compile(r"//[^\n]*")
_CRATE_PATH = re.compile(r"\bcrate::(\{|[A-Za-z_][A-Za-z0-9_]*)")


def _crate_paths(text: str) -> set[str]:
    """The first segments of the ``crate::`` paths in Rust source ``text`` (comments and doc
    links left out): ``use crate::a::b``, ``crate::a::f()``, ``use crate::{a, b::{c, d}}``."""
    text = _RUST_COMMENT.sub("", text)
    found = set()
    for match in _CRATE_PATH.finditer(text):
        if match.group(1) != "{":
            found.add(match.group(1))
            continue
        depth, at, entry = 1, match.end(), ""
        while depth:
            char = text[at]
            if char in "{}":
                depth += 1 if char == "{" else -1
            if depth == 1 and char == ",":
                found.add(entry)
                entry = ""
            elif depth == 1 and char not in "{}" or depth > 1:
                entry += char
            at += 1
        found.add(entry)
    return {re.split(r"\W", e.strip(), maxsplit=1)[0] for e in found} - {"", "self"}


def rust_module_graph(src: Path = KERNEL_SRC) -> dict[str, set[str]]:
    """Which of the crate's modules (one per ``src/*.rs``) each imports: a ``crate::m`` path
    names module ``m``, a ``crate::item`` path an item of the crate root (lib.rs), and the
    root imports the modules its paths name (``m::item``; its ``mod m;`` lines do not)."""
    modules = {p.stem for p in src.glob("*.rs")}
    graph: dict[str, set[str]] = {}
    for path in src.glob("*.rs"):
        text = path.read_text()
        named = {n if n in modules else CRATE_ROOT for n in _crate_paths(text)}
        if path.stem == CRATE_ROOT:
            code = re.sub(
                r"^\s*(pub(\(crate\))?\s+)?mod\s+\w+;", "", _RUST_COMMENT.sub("", text), flags=re.M
            )
            named |= {m for m in re.findall(r"\b([a-z_][a-z0-9_]*)::", code) if m in modules}
        graph[path.stem] = named - {path.stem}
    return graph


def test_the_rust_scan_reads_every_form_of_a_crate_path() -> None:
    text = """
        use crate::body::{Cursor, Plan};
        use crate::{avro_transform, changes::Layout, json::{Encoder, Tok}};
        use crate::count;
        let x = crate::event_time::date_days(t); // crate::stage only in a comment
        /// [`StageKernel`]: crate::stage::StageKernel
    """
    assert _crate_paths(text) == {
        "body",
        "avro_transform",
        "changes",
        "json",
        "count",
        "event_time",
    }


def test_the_rust_cycle_scan_finds_a_module_and_the_root_importing_each_other(
    tmp_path: Path,
) -> None:
    (tmp_path / "lib.rs").write_text(
        "mod raw;\nmod route;\npub fn count() {}\nm.add_class::<raw::K>();\n"
    )
    (tmp_path / "raw.rs").write_text("use crate::count;\nuse crate::route::Route;\n")
    (tmp_path / "route.rs").write_text("//! Not raw.rs's: crate::raw\n")
    graph = rust_module_graph(tmp_path)
    assert graph == {"lib": {"raw"}, "raw": {"lib", "route"}, "route": set()}
    assert [sorted(s) for s in _strongly_connected(graph) if len(s) > 1] == [["lib", "raw"]]


def test_no_two_rust_modules_of_the_kernel_import_each_other_even_through_others() -> None:
    """The kernel's modules form no `use crate::` cycle (issue 41: 3 before, between lib.rs
    and raw.rs, lib.rs and json_schema.rs, json.rs and json_schema.rs)."""
    graph = rust_module_graph()
    assert {"lib", "stage", "incoming", "route", "event_time", "json", "json_schema"} <= set(graph)
    cycles = [sorted(s) for s in _strongly_connected(graph) if len(s) > 1]
    assert cycles == [], f"kernel/src modules importing each other (use crate::): {cycles}"
