"""The JSON Schema of the pipeline file (``kbqe config schema``) agrees with the model: every
example pipeline is valid under it, every key docs/configuration.md documents is in it with
the same documentation, and what it refuses the reader refuses too."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from kbqe_dagster.core.config import pipeline as pipeline_module
from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.config.reference import SECTIONS, field_docs
from kbqe_dagster.core.config.schema import pipeline_schema
from kbqe_dagster.core.config.topics import PATTERN_TOPIC_KEYS, TOPIC_KEYS
from kbqe_dagster.core.errors import ConfigError

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples").rglob("*.yaml"))
REFERENCE = REPO / "docs" / "configuration.md"

SCHEMA = pipeline_schema()
VALIDATOR = jsonschema.Draft7Validator(SCHEMA)


def as_editor_reads(raw: Any) -> Any:
    """The document as an editor's YAML 1.2 sees it: an unquoted date is a string."""
    return json.loads(json.dumps(raw, default=str))


def errors(document: Any) -> list[tuple[str, str]]:
    return sorted(
        (".".join(map(str, e.absolute_path)), e.message)
        for e in VALIDATOR.iter_errors(as_editor_reads(document))
    )


def test_the_schema_is_a_valid_draft_07_schema() -> None:
    jsonschema.Draft7Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "http://json-schema.org/draft-07/schema#"


def test_there_are_example_pipelines_to_check() -> None:
    assert len(EXAMPLES) >= 7 and REPO / "examples" / "fix" / "pipeline.yaml" in EXAMPLES


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_example_pipeline_is_valid_under_the_schema(example: Path) -> None:
    assert errors(yaml.safe_load(example.read_text())) == []


def test_the_schema_has_exactly_the_keys_the_reader_accepts() -> None:
    top = SCHEMA["properties"]
    assert list(top) == list(pipeline_module._TOP_KEYS)
    assert list(top["topics"]["items"]["properties"]) == list(TOPIC_KEYS)
    pattern = top["topic_patterns"]["items"]["properties"]
    assert list(pattern) == ["match", "exclude", "include_internal", *PATTERN_TOPIC_KEYS]


def schema_at(location: str) -> dict[str, Any]:
    """The object schema of a docs/configuration.md section heading: ``topics[].routing``,
    ``tables.<dataset.table | dataset.*>``, ``topics[].transforms[]  add``."""
    path, _, note = location.partition("  ")
    node: dict[str, Any] = SCHEMA
    for part in re.split(r"\.(?![^<]*>)", path):
        if part.startswith("<"):
            node = node["additionalProperties"]
            continue
        node = node["properties"][part.removesuffix("[]")]
        if part.endswith("[]"):
            node = node["items"]
    if "oneOf" in node:  # transforms: the item whose kind key is the note's first word
        kind = note.split()[0]
        node = next(item for item in node["oneOf"] if item["required"][0] == kind)
    return node


def documented_keys() -> list[tuple[str, str, str]]:
    """(section heading, key, meaning) of every row of docs/configuration.md's tables."""
    rows = []
    heading = None
    for line in REFERENCE.read_text().splitlines():
        if match := re.fullmatch(r"## `(.+)`", line):
            heading = match.group(1)
        elif heading and (match := re.match(r"\| `([a-z_]+)` \| .* \| (.*) \|$", line)):
            rows.append((heading, match.group(1), match.group(2)))
    return rows


def test_the_reference_documents_dozens_of_keys() -> None:
    assert len(documented_keys()) > 80
    assert {h for h, _, _ in documented_keys()} == {where for where, _ in SECTIONS}


@pytest.mark.parametrize(
    ("heading", "key", "meaning"),
    documented_keys(),
    ids=lambda v: v.split("  ")[0] if isinstance(v, str) else v,
)
def test_every_key_the_reference_documents_is_in_the_schema_with_its_doc(
    heading: str, key: str, meaning: str
) -> None:
    properties = schema_at(heading)["properties"]
    assert key in properties, f"{heading}: {key} is documented but not in the schema"
    assert properties[key]["description"].replace("|", "/") == meaning


@pytest.mark.parametrize(("where", "cls"), SECTIONS, ids=[w for w, _ in SECTIONS])
def test_each_documented_section_takes_no_key_its_class_does_not_document(
    where: str, cls: type
) -> None:
    """The other direction: a key of the schema's section is a documented field (or the
    kind key of a transform, whose field holds the kind's subject)."""
    fields = {name for name, _, _ in field_docs(cls)}
    assert set(schema_at(where)["properties"]) <= fields


TOPIC = {"name": "t", "event_time": {"fields": ["ts"]}}


@pytest.mark.parametrize(
    ("change", "where", "message"),
    [
        ({"load": {"cadense": "5m"}}, "load",
         "Additional properties are not allowed ('cadense' was unexpected)"),
        ({"load": {"cadence": 900}}, "load.cadence", "900 is not of type 'string'"),
        ({"load": {"cadence": "15 minutes"}}, "load.cadence", "does not match"),
        ({"staging": {"file_codec": "zstd"}}, "staging.file_codec", "'zstd' is not one of"),
        ({"load": {"max_files_per_job": 20_000}}, "load.max_files_per_job",
         "20000 is greater than the maximum of 10000"),
        ({"topics": [{**TOPIC, "routing": {"mode": "statc"}}]}, "topics.0.routing.mode",
         "'statc' is not one of"),
        ({"topics": [{"event_time": {"fields": ["ts"]}}]}, "topics.0",
         "'name' is a required property"),
        ({"version": 2}, "version", "1 was expected"),
    ],
)  # fmt: skip
def test_what_the_schema_refuses_the_reader_refuses_too(
    change: dict[str, Any], where: str, message: str
) -> None:
    document = {"version": 1, "topics": [TOPIC], **change}
    found = errors(document)
    assert len(found) == 1 and found[0][0] == where and message in found[0][1], found
    with pytest.raises(ConfigError):
        parse_pipeline_config(document)


def test_sizes_durations_and_null_sections_read_as_the_reader_reads_them() -> None:
    document = {
        "version": 1,
        "topics": [TOPIC],
        "retention": None,
        "staging": {
            "max_message_size": "64MiB",
            "min_bytes_per_file": 1024,
            "allowed_latency": "1h 30m",
            "file_codec": None,
        },
        "notifications": {"webhook_url": None},
    }
    assert errors(document) == []
    parse_pipeline_config(document)  # and the reader takes it
