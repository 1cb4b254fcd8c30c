"""``topics[].destinations`` in the pipeline file: read into destinations (routing, projection,
transforms), their static tables allowed, and every mistake reported at its key path."""

from __future__ import annotations

from typing import Any

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import ConfigError, TransformSchemaError
from kbqe_dagster.core.record.routing import Destination, RoutingMode
from kbqe_dagster.core.transforms.destinations import compile_destination, project_schema
from kbqe_dagster.core.transforms.specs import CastField, CastType

EXECUTIONS = {"routing": {"mode": "static", "dataset": "fix", "table": "executions"}}
FILLS = {
    "routing": {"mode": "static", "dataset": "fix", "table": "fills_by_symbol"},
    "fields": ["symbol", "last_qty", "last_px"],
    "transforms": [{"cast": "last_qty", "to": "double"}],
}
SCHEMA = {
    "type": "record",
    "name": "Exec",
    "namespace": "fix",
    "fields": [
        {"name": "symbol", "type": "string"},
        {"name": "last_qty", "type": "string"},
        {"name": "last_px", "type": "double"},
        {"name": "venue", "type": "string"},
    ],
}


def parse(destinations: Any, patterns: bool = False, **topic: Any):
    item = {"destinations": destinations, "event_time": {"kafka_timestamp_fallback": True}, **topic}
    raw: dict[str, Any] = {"version": 1, "allowed_destinations": ["sales.*"]}
    if patterns:
        raw["topic_patterns"] = [{"match": "fix[.].*", **item}]
    else:
        raw["topics"] = [{"name": "fix.executions", **item}]
    return parse_pipeline_config(raw, source="t.yaml")


def problems(destinations: Any, **topic: Any) -> list[str]:
    with pytest.raises(ConfigError) as caught:
        parse(destinations, **topic)
    return [line.strip()[2:] for line in str(caught.value).splitlines()[1:]]


def test_destinations_are_read_with_their_projection_and_transforms_and_statics_allowed() -> None:
    config = parse([EXECUTIONS, FILLS])
    [topic] = config.topics
    first, second = topic.destinations
    assert first.routing.static_destination == ("fix", "executions")
    assert (first.fields, first.transforms) == (None, ())
    assert second.fields == ("symbol", "last_qty", "last_px")
    assert second.transforms == (CastField("last_qty", CastType.DOUBLE),)
    # Each static destination is implicitly allowed, like a topic's static route.
    assert config.allowed_destinations.patterns == (
        "sales.*",
        "fix.executions",
        "fix.fills_by_symbol",
    )
    assert topic.static_destinations == (
        Destination("fix", "executions"),
        Destination("fix", "fills_by_symbol"),
    )
    assert topic.routing == first.routing  # what single-route code sees: the first one
    assert second.label(1) == "destinations[1] (fix.fills_by_symbol)"


def test_a_destination_may_route_by_fields_within_the_allow_list() -> None:
    [topic] = parse([EXECUTIONS, {"routing": {"mode": "fields"}}]).topics
    assert topic.destinations[1].routing.mode is RoutingMode.FIELDS
    assert topic.destinations[1].label(1) == "destinations[1] (routing fields)"


@pytest.mark.parametrize(
    ("destinations", "topic", "expected"),
    [
        ([], {}, "topics[0].destinations: expected a list of at least one destination, got a list"),
        (
            {"routing": {}},
            {},
            "topics[0].destinations: expected a list of at least one destination, got a mapping",
        ),
        ([{"fields": ["a"]}], {}, "topics[0].destinations[0].routing: required"),
        (
            [EXECUTIONS, {**EXECUTIONS, "field": ["a"]}],
            {},
            "topics[0].destinations[1].field: unknown key; did you mean 'fields'?",
        ),
        (
            [EXECUTIONS, EXECUTIONS],
            {},
            "topics[0].destinations[1].routing: same table "
            "fix.executions as topics[0].destinations[0]: one destination per table (each row once)",
        ),
        (
            [{**EXECUTIONS, "fields": []}],
            {},
            "topics[0].destinations[0].fields: expected at least one entry, got an empty list",
        ),
        (
            [{**EXECUTIONS, "fields": ["a", "a"]}],
            {},
            "topics[0].destinations[0].fields[1]: duplicate entry 'a'",
        ),
        (
            [{**EXECUTIONS, "fields": ["a.b"]}],
            {},
            "topics[0].destinations[0].fields[0]: 'a.b' "
            "is not an Avro field name (a projection keeps top-level fields)",
        ),
        (
            [{"routing": {"mode": "static", "dataset": "fix"}}],
            {},
            "topics[0].destinations[0].routing: static routing needs both 'dataset' and 'table'",
        ),
        (
            [{"routing": {"mode": "static", "dataset": "fix", "table": "t", "table_field": "x"}}],
            {},
            "topics[0].destinations[0].routing.table_field: not used by routing mode static",
        ),
        (
            [{**EXECUTIONS, "transforms": [{"cast": "a"}]}],
            {},
            "topics[0].destinations[0].transforms[0].to: required",
        ),
        (
            [EXECUTIONS],
            {"routing": {"mode": "static", "dataset": "fix", "table": "x"}},
            "topics[0].routing: not with destinations: each destination has its own routing "
            "(move this one into destinations)",
        ),
        (
            [EXECUTIONS],
            {"keyed": {"key": ["id"], "version": "v"}},
            "topics[0].destinations: not with keyed: (a keyed topic's one destination is its "
            "changelog, current state and history)",
        ),
        # A transform, the topic's or the destination's, may not remove what its routing reads.
        (
            [{"routing": {"mode": "fields"}, "transforms": [{"drop": "tableName"}]}],
            {},
            "topics[0].destinations[0].transforms[0]: drop removes field 'tableName', which "
            "routing reads (tableName); route on another field or transform later",
        ),
        (
            [EXECUTIONS, {"routing": {"mode": "fields"}}],
            {"transforms": [{"drop": "tableName"}]},
            "topics[0].transforms[0]: drop removes field 'tableName', which routing reads "
            "(tableName); route on another field or transform later",
        ),
    ],
)
def test_mistakes_are_reported_at_their_key_paths(destinations, topic, expected) -> None:
    assert expected in problems(destinations, **topic)


def test_topic_patterns_take_no_destinations() -> None:
    with pytest.raises(ConfigError, match=r"topic_patterns\[0\]\.destinations: unknown key"):
        parse([EXECUTIONS], patterns=True)


def test_with_a_declared_schema_projections_and_transforms_are_checked_when_read() -> None:
    json_topic = {"format": "json", "schema": SCHEMA}
    found = problems(
        [
            {**EXECUTIONS, "fields": ["symbol", "qty"]},
            {**FILLS, "transforms": [{"cast": "nope", "to": "double"}]},
        ],
        **json_topic,
    )
    assert any(
        p.startswith(
            "topics[0].destinations[0].fields[1]: 'qty': not a field of the "
            "record here (record schema Exec has symbol, last_qty, last_px, "
            "venue)"
        )
        for p in found
    ), found
    assert any(p.startswith("topics[0].destinations[1].transforms[0]: cast") for p in found), found
    # A projection may keep a field a topic transform made; it sees the transformed record.
    parse(
        [{**EXECUTIONS, "fields": ["symbol", "qty"]}],
        **json_topic,
        transforms=[{"rename": "last_qty", "to": "qty"}],
    )


def test_a_destination_compiles_its_transforms_then_projects_in_the_listed_order() -> None:
    [topic] = parse([EXECUTIONS, {**FILLS, "fields": ["last_px", "last_qty"]}]).topics
    compiled = compile_destination(topic.destinations[1], SCHEMA)
    assert compiled.output_schema == {
        "type": "record",
        "name": "Exec",
        "namespace": "fix",
        "fields": [{"name": "last_px", "type": "double"}, {"name": "last_qty", "type": "double"}],
    }
    record = {"symbol": "ACME", "last_qty": "10", "last_px": 1.5, "venue": "X"}
    routed = compiled.apply(record, None)  # type: ignore[arg-type]
    assert routed["venue"] == "X" and routed["last_qty"] == 10.0  # what routing reads: all
    assert compiled.project(routed) == {"last_px": 1.5, "last_qty": 10.0}
    whole = compile_destination(topic.destinations[0], SCHEMA)
    assert whole.output_schema == SCHEMA and whole.project(record) is record
    with pytest.raises(TransformSchemaError, match=r"fields\[1\] 'qty': not a field"):
        project_schema(SCHEMA, ("symbol", "qty"))


def test_a_destination_may_take_only_some_schemas_and_records() -> None:
    fills = {**FILLS, "schema_names": ["fix.Exec"], "when": 'venue != "DARK"'}
    [topic] = parse([EXECUTIONS, fills]).topics
    destination = topic.destinations[1]
    assert destination.schema_names == ("fix.Exec",) and destination.when == 'venue != "DARK"'
    assert destination.takes_schema("fix.Exec") and not destination.takes_schema("fix.Order")
    assert topic.destinations[0].takes_schema("anything")
    compiled = compile_destination(destination, SCHEMA)
    assert compiled.takes({"venue": "XPAR"}) and not compiled.takes({"venue": "DARK"})


@pytest.mark.parametrize(
    ("destination", "expected"),
    [
        (
            {**EXECUTIONS, "schema_names": []},
            "topics[0].destinations[0].schema_names: expected at least one entry, got an empty list",
        ),
        (
            {**EXECUTIONS, "when": "venue =="},
            "topics[0].destinations[0].when: not a valid expression: invalid syntax",
        ),
    ],
)
def test_filter_mistakes_are_reported_at_their_key_paths(destination, expected) -> None:
    assert expected in problems([destination])


def test_with_a_declared_schema_filters_are_checked_when_read() -> None:
    json_topic = {"format": "json", "schema": SCHEMA}
    found = problems([{**EXECUTIONS, "when": "price > 0"}], **json_topic)
    assert found == [
        "topics[0].destinations[0].when: the expression reads price, not in the record schema Exec"
    ]
    found = problems([{**EXECUTIONS, "schema_names": ["fix.Order"]}], **json_topic)
    assert found == [
        "topics[0].destinations: no destination takes the declared schema fix.Exec (schema_names)"
    ]
