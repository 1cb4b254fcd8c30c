"""The JSON Schema of the pipeline file (``kbqe config schema``), generated from the model.

Nothing here is declared a second time: the keys are the reader's own tables (the
``*_SPEC`` maps, ``TOPIC_KEYS``, the top-level keys), each value's schema is the one its
converter declares (core/config_reader.py ``with_schema``) and each description is the
field's docstring (core/config/reference.py). A key a reader accepts and this module does not
place raises ``KeyError`` here, so a new section cannot ship without its schema (tests).

The schema is what an editor can check as one types: keys, types, enums, bounds, patterns.
Rules that need more than one value (routing keys per mode, a keyed topic's routing) or the
world (a decoder importable) stay the reader's: ``kbqe config check`` is the judge.
Draft-07, the draft editors' YAML support knows best.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.completeness.decision import COMPLETENESS_SPEC, CompletenessSettings
from kbqe_dagster.core.config import discovery, erasure, pipeline, sections, topics
from kbqe_dagster.core.config.reference import descriptions
from kbqe_dagster.core.keyed.contract import KEYED_SPEC, KeyedConfig, SourceFormat
from kbqe_dagster.core.record import enrichment, event_time, partitioning
from kbqe_dagster.core.record.routing import RoutingConfig
from kbqe_dagster.core.transforms import destinations
from kbqe_dagster.core.transforms import specs as transforms

DRAFT = "http://json-schema.org/draft-07/schema#"
SCHEMA_TITLE = "kbqe_dagster pipeline file"

Schema = dict[str, Any]


def section(
    spec: Mapping[str, r.Converter],
    documented_by: type | None = None,
    *,
    required: tuple[str, ...] = (),
    nullable: bool = True,
    overrides: Mapping[str, Schema] | None = None,
) -> Schema:
    """A mapping section: exactly the keys of ``spec``, each with its converter's schema (or
    ``overrides[key]``) and the docstring of the same-named field of ``documented_by``.
    ``nullable``: an empty YAML section (``staging:``) reads as ``{}``."""
    docs = descriptions(documented_by) if documented_by else {}
    properties: dict[str, Schema] = {}
    for key, convert in spec.items():
        schema = dict((overrides or {}).get(key) or r.json_schema(convert))
        if key in docs:
            schema["description"] = docs[key]
        properties[key] = schema
    out: Schema = {
        "type": ["object", "null"] if nullable else "object",
        "properties": properties,
        "additionalProperties": False,
    }
    if required:
        out["required"] = list(required)
    if documented_by is not None and documented_by.__doc__:
        out["description"] = " ".join(documented_by.__doc__.split())
    return out


def _transforms() -> Schema:
    kinds = [
        section(
            transforms._SPECS[kind],
            cls,
            nullable=False,
            required=(kind,) + transforms._REQUIRED.get(kind, ()),
        )
        for kind, cls in transforms.KINDS.items()
    ]
    return {
        "type": ["array", "null"],
        "items": {"oneOf": kinds},
        "description": "Per-record transforms, in order; each item has one kind key ("
        + ", ".join(transforms.KINDS)
        + ").",
    }


def _topic_settings(keys: tuple[str, ...], routing: Schema, transform_list: Schema) -> Schema:
    """The schemas of the ``topics[]`` keys in ``keys`` (a pattern's: all but name and
    destinations)."""
    by_key: dict[str, Schema] = {
        "name": r.json_schema(topics.TOPIC_NAME_RULE),
        "format": r.json_schema(r.choice(SourceFormat)),
        "schema": {
            "anyOf": [{"type": "object"}, {"type": "string", "minLength": 1}],
            "description": "format: json only: the values' Avro record schema, inline "
            "or the path of an .avsc file relative to the pipeline file.",
        },
        "decoder": {"type": "string", "pattern": "^[^:]+:[^:]+$"},
        "routing": routing,
        "event_time": section(sections.EVENT_TIME_SPEC, event_time.EventTimeConfig),
        "on_bad_input": r.json_schema(topics.BAD_INPUT_POLICY),
        "staging": section(sections.STAGING_SPEC, sections.StagingSettings),
        "keyed": section(KEYED_SPEC, KeyedConfig),
        "transforms": transform_list,
        "completeness": section(COMPLETENESS_SPEC, CompletenessSettings),
        "destinations": {
            "type": "array",
            "minItems": 1,
            "items": section(
                destinations._SPEC,
                destinations.DestinationConfig,
                nullable=False,
                required=("routing",),
                overrides={"routing": routing, "transforms": transform_list},
            ),
        },
        "delivery": r.json_schema(r.choice(partitioning.Delivery)),
    }
    docs = descriptions(topics.TopicConfig)
    out = {}
    for key in keys:
        schema = dict(by_key[key])  # KeyError: a topic key without its schema
        if key in docs and "description" not in schema:
            schema["description"] = docs[key]
        out[key] = schema
    return out


def pipeline_schema() -> Schema:
    """The JSON Schema (draft-07) of a pipeline file."""
    routing = section(sections.ROUTING_SPEC, RoutingConfig)
    transform_list = _transforms()
    topic = {
        "type": "object",
        "additionalProperties": False,
        "required": ["name"],
        "properties": _topic_settings(topics.TOPIC_KEYS, routing, transform_list),
        "description": " ".join((topics.TopicConfig.__doc__ or "").split()),
    }
    pattern_own = section(discovery._OWN_SPEC).get("properties", {})
    pattern = {
        "type": "object",
        "additionalProperties": False,
        "required": ["match"],
        "properties": {
            **pattern_own,
            **_topic_settings(topics.PATTERN_TOPIC_KEYS, routing, transform_list),
        },
        "description": "Topics taken from Kafka by name: a regex over the whole name and "
        "the settings every matching topic gets (any topics[] key but name "
        "and destinations).",
    }
    table = section(partitioning.TABLE_SPEC, partitioning.TableSettings)
    by_key: dict[str, Schema] = {
        "version": {"const": pipeline.CONFIG_VERSION},
        "topics": {"type": ["array", "null"], "items": topic},
        "topic_patterns": {"type": ["array", "null"], "minItems": 1, "items": pattern},
        "allowed_destinations": {
            **r.json_schema(pipeline._PATTERNS),
            "description": "Destinations routing may name: dataset.table or dataset.*; static "
            "routes' tables are allowed implicitly.",
        },
        "event_time": section(sections.EVENT_TIME_SPEC, event_time.EventTimeConfig),
        "on_bad_input": r.json_schema(topics.BAD_INPUT_POLICY),
        "staging": section(sections.STAGING_SPEC, sections.StagingSettings),
        "dead_letter": section(sections.DEAD_LETTER_SPEC, sections.DeadLetterDestination),
        "enrichment": section(sections.ENRICHMENT_SPEC, enrichment.EnrichmentConfig),
        "load": section(sections.LOAD_SPEC, sections.LoadSettings),
        "retention": section(sections.RETENTION_SPEC, sections.RetentionSettings),
        "notifications": section(sections.NOTIFICATION_SPEC, sections.NotificationSettings),
        "completeness": section(COMPLETENESS_SPEC, CompletenessSettings),
        "tables": {
            "type": ["object", "null"],
            "additionalProperties": table,
            "description": "Per destination table, keyed dataset.table or dataset.*: "
            "its partitioning and delivery.",
        },
        "stage_runs": section(sections.STAGE_RUNS_SPEC, sections.StageRunSettings),
        "erasure": section(
            erasure.ERASURE_SPEC,
            erasure.ErasureSettings,
            required=("tables",),
            overrides={
                "tables": {
                    "type": "object",
                    "minProperties": 1,
                    "additionalProperties": section(
                        erasure.ERASURE_TABLE_SPEC, erasure.ErasureTable, nullable=False
                    ),
                },
                "audit": section(erasure.AUDIT_SPEC, erasure.AuditTable),
            },
        ),
    }
    return {
        "$schema": DRAFT,
        "title": SCHEMA_TITLE,
        "description": "What flows where: Kafka topics to BigQuery tables, exactly once "
        "(docs/configuration.md). Generated by `kbqe config schema`.",
        "type": "object",
        "additionalProperties": False,
        "properties": {key: by_key[key] for key in pipeline._TOP_KEYS},
    }
