"""The stage engine's extension seam (kbqe_dagster/stager_registry.py): the registry chooses a topic's
stager, the driver ships the choice in the stage context, and ``staging/`` neither imports its
extensions nor lets them reach into ``RangeStager``'s privates."""

from __future__ import annotations

import ast
import pickle
import re
from pathlib import Path

import pytest

import kbqe_dagster
from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import STAGERS, stage_context, stager_for
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.stager import RangeStager, chosen_stager

PACKAGE = Path(kbqe_dagster.__file__).parent


def pipeline(**topic):
    return parse_pipeline_config({
        "version": 1,
        "topics": [{"name": "orders", "routing": {"mode": "fields"},
                    "event_time": {"fields": ["eventTime"]}, **topic}],
        "allowed_destinations": ["acme_sales.*"],
    }, source="test")  # fmt: skip


def settings(tmp_path):
    return (
        KafkaSettings("127.0.0.1:9"),
        RegistrySettings("http://127.0.0.1:9"),
        StagingLocation(str(tmp_path)),
    )


@pytest.mark.parametrize("entry", STAGERS, ids=lambda e: e.name)
def test_every_registry_entry_names_a_range_stager_of_an_extension(entry) -> None:
    stager = entry.load()
    assert issubclass(stager, RangeStager) and stager is not RangeStager
    assert stager.__module__.split(".")[1] in ("formats", "keyed")


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ({}, "RangeStager"),
        ({"format": "json_schema"}, "JsonSchemaRangeStager"),
        ({"format": "protobuf"}, "ProtobufRangeStager"),
        (
            {
                "format": "raw",
                "routing": {"mode": "static", "dataset": "acme_sales", "table": "r"},
                "event_time": {},
            },
            "RawRangeStager",
        ),
    ],
)
def test_a_topic_stages_with_the_first_stager_that_takes_it(topic, expected) -> None:
    assert stager_for(pipeline(**topic).topic("orders")).__name__ == expected


def test_the_stage_context_ships_the_chooser_to_the_tasks(tmp_path) -> None:
    ctx = stage_context(*settings(tmp_path), pipeline(format="protobuf"), "orders")
    shipped = pickle.loads(pickle.dumps(ctx))  # what a Spark task receives
    assert chosen_stager(shipped).__name__ == "ProtobufRangeStager"


def test_a_context_built_without_the_seam_cannot_stage_and_says_so(tmp_path) -> None:
    ctx = StageContext(*settings(tmp_path), pipeline(), "orders")
    with pytest.raises(StagingError, match="orders: the stage context names no stager chooser"):
        chosen_stager(ctx)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports: module level, in functions, under TYPE_CHECKING."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


@pytest.mark.parametrize(
    "path", sorted((PACKAGE / "staging").rglob("*.py")), ids=lambda p: str(p.relative_to(PACKAGE))
)
def test_the_stage_engine_never_imports_its_extensions(path: Path) -> None:
    bad = sorted(
        n
        for n in _imports(path)
        if n.startswith(
            ("kbqe_dagster.formats", "kbqe_dagster.keyed", "kbqe_dagster.stager_registry")
        )
    )
    assert not bad, (
        f"{path.relative_to(PACKAGE)} imports {bad}: extensions plug in through stager_registry.py"
    )


def _private_names() -> set[str]:
    """RangeStager's private methods and attributes (``_name``, not dunders)."""
    source = (PACKAGE / "staging" / "stager.py").read_text()
    names = {n for n in vars(RangeStager) if n.startswith("_") and not n.startswith("__")}
    names |= set(re.findall(r"self\.(_[a-z]\w*)\s*(?::[^=\n]*)?=", source))
    return names


def test_the_private_names_are_found() -> None:
    assert {"_by_header", "_resolve", "_bad_input", "_any_hourly"} <= _private_names()


EXTENSIONS = sorted((PACKAGE / "formats").rglob("*.py")) + sorted((PACKAGE / "keyed").rglob("*.py"))
OTHERS = [p for p in sorted(PACKAGE.rglob("*.py")) if p != PACKAGE / "staging" / "stager.py"]


@pytest.mark.parametrize("path", OTHERS, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_nothing_outside_the_stager_module_touches_its_private_names(path: Path) -> None:
    text = path.read_text()
    names = "|".join(sorted(_private_names()))
    touched = set(re.findall(rf"stager\.({names})\b", text))
    if path in EXTENSIONS:  # subclasses: their own self is a RangeStager
        touched |= set(re.findall(rf"self\.({names})\b", text))
    assert not touched, f"{path.relative_to(PACKAGE)} uses RangeStager's {sorted(touched)}"
