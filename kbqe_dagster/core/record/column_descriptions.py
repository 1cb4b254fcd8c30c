"""The descriptions of a table's columns: what the schema says of its fields, and fixed ones for
the columns kbqe adds.

**From the schema.** An Avro field's ``doc`` becomes its column's description, nested record
fields included. The other formats reach it through their Avro mapping: a JSON Schema
property's ``description`` is its field's ``doc`` (core/formats/json_schema_avro.py), as is a
Connect schema's ``doc`` (core/formats/connect_json_avro.py). Protobuf comments do not: the
registry's ``.proto`` is compiled without source info (resources/protobuf_compiler.py runs
``protoc --descriptor_set_out`` without ``--include_source_info``), so the descriptors hold
no comments; and the standard Protobuf serializers register a schema rebuilt from compiled
descriptors, which never had them.

**kbqe's columns** (core/record/enrichment.py, whatever they are named) get
:func:`kafka_column_descriptions`, unless the schema documents a field of that name.

**When.** A table kbqe creates gets them (the creating load's explicit schema, the Storage
Write table keeper's new table). An existing table takes a changed or new description at
its next load or append, with the schema update that evolution makes anyway
(core/load/evolution.py: a column's description is set when the staged schema states one that
differs); a description the schema no longer states is left as the table has it (somebody may
have written it by hand). BigQuery's own Avro load also copies a field's ``doc`` into a
column it creates; kbqe does not rely on that: its creating load states the schema.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from kbqe_dagster.core.record.enrichment import EnrichmentConfig

MAX_COLUMN_DESCRIPTION_CHARS = 1024
"""BigQuery's limit on a column description; a longer ``doc`` is cut there."""


def kafka_column_descriptions(enrichment: EnrichmentConfig) -> dict[str, str]:
    """The fixed description of each column kbqe adds, by its configured name."""
    out = {
        enrichment.event_date_column: (
            "Event date (UTC) of the Kafka message, from the topic's event time fields, else "
            "its Kafka timestamp: the table's DAY partition."
        ),
        enrichment.event_hour_column: (
            "Event time truncated to the hour (UTC): the table's HOUR partition."
        ),
        enrichment.topic_column: "Kafka topic the row was read from.",
        enrichment.partition_column: "Kafka partition the row was read from.",
        enrichment.offset_column: (
            "Kafka offset of the message within its partition: with topic and partition, the "
            "row's identity (exactly once)."
        ),
    }
    if enrichment.timestamp_column:
        out[enrichment.timestamp_column] = (
            "Kafka message timestamp (producer or broker time); null when Kafka has none."
        )
    if enrichment.key_column:
        out[enrichment.key_column] = "Kafka message key, as bytes."
    if enrichment.headers_column:
        out[enrichment.headers_column] = "Kafka message headers, in their order (keys may repeat)."
    return out


def describe_columns(
    columns: Iterable[Mapping[str, Any]],
    avro_schema: Mapping[str, Any],
    fixed: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """``columns`` (BigQuery's REST form, derived from ``avro_schema``) with the description
    of each field that has a ``doc``, nested fields included, else its ``fixed`` one (top-level
    columns by name). Other columns are returned as they are."""
    return _described(columns, avro_schema, {k.lower(): v for k, v in (fixed or {}).items()})


def _described(
    columns: Iterable[Mapping[str, Any]], record: Mapping[str, Any], fixed: Mapping[str, str]
) -> list[dict[str, Any]]:
    fields = {
        str(f.get("name", "")).lower(): f
        for f in record.get("fields", ())
        if isinstance(f, Mapping)
    }
    out = []
    for column in columns:
        described = dict(column)
        name = str(column.get("name", "")).lower()
        field = fields.get(name, {})
        doc = field.get("doc")
        text = doc if isinstance(doc, str) and doc.strip() else fixed.get(name)
        if text:
            described["description"] = text[:MAX_COLUMN_DESCRIPTION_CHARS]
        nested = _record_of(field.get("type"))
        if column.get("fields") and nested is not None:
            described["fields"] = _described(column["fields"], nested, {})
        out.append(described)
    return out


def _record_of(kind: Any) -> Mapping[str, Any] | None:
    """The record a field's type holds: itself, a nullable one, an array's items."""
    if isinstance(kind, list):
        branches = [b for b in kind if b != "null"]
        return _record_of(branches[0]) if len(branches) == 1 else None
    if isinstance(kind, Mapping):
        if kind.get("type") == "record":
            return kind
        if kind.get("type") == "array":
            return _record_of(kind.get("items"))
    return None
