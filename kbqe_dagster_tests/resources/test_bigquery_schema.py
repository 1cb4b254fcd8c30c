"""The table schema a first load creates follows BigQuery's Avro conversion rules
(``use_avro_logical_types``), so the emulator, which needs it explicitly, and BigQuery,
which would infer it, end up with the same table."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.errors import LoadError
from kbqe_dagster.core.record.dead_letter_record import DEAD_LETTER_SCHEMA
from kbqe_dagster.core.record.enrichment import EnrichmentConfig, extended_schema
from kbqe_dagster.resources.bigquery.schema import bigquery_schema_from_avro


def one_field(avro_type) -> dict:
    schema = {"type": "record", "name": "R", "fields": [{"name": "f", "type": avro_type}]}
    (column,) = bigquery_schema_from_avro(schema)
    return column


@pytest.mark.parametrize(
    ("avro_type", "bq_type", "mode"),
    [
        ("boolean", "BOOLEAN", "REQUIRED"),
        ("int", "INTEGER", "REQUIRED"),
        ("long", "INTEGER", "REQUIRED"),
        ("float", "FLOAT", "REQUIRED"),
        ("double", "FLOAT", "REQUIRED"),
        ("bytes", "BYTES", "REQUIRED"),
        ("string", "STRING", "REQUIRED"),
        (["null", "string"], "STRING", "NULLABLE"),
        (["string", "null"], "STRING", "NULLABLE"),
        ({"type": "enum", "name": "E", "symbols": ["A"]}, "STRING", "REQUIRED"),
        ({"type": "fixed", "name": "F", "size": 4}, "BYTES", "REQUIRED"),
        ({"type": "int", "logicalType": "date"}, "DATE", "REQUIRED"),
        ({"type": "int", "logicalType": "time-millis"}, "TIME", "REQUIRED"),
        ({"type": "long", "logicalType": "time-micros"}, "TIME", "REQUIRED"),
        ({"type": "long", "logicalType": "timestamp-millis"}, "TIMESTAMP", "REQUIRED"),
        (["null", {"type": "long", "logicalType": "timestamp-micros"}], "TIMESTAMP", "NULLABLE"),
        ({"type": "long", "logicalType": "local-timestamp-millis"}, "DATETIME", "REQUIRED"),
        ({"type": "string", "logicalType": "uuid"}, "STRING", "REQUIRED"),
        (
            {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2},
            "NUMERIC",
            "REQUIRED",
        ),
        (
            {"type": "bytes", "logicalType": "decimal", "precision": 40, "scale": 10},
            "BIGNUMERIC",
            "REQUIRED",
        ),
        ({"type": "long", "logicalType": "some-future-type"}, "INTEGER", "REQUIRED"),
        ({"type": "array", "items": "string"}, "STRING", "REPEATED"),
        ({"type": "array", "items": ["null", "long"]}, "INTEGER", "REPEATED"),
    ],
)
def test_avro_types_map_like_bigquery_maps_them(avro_type, bq_type, mode) -> None:
    column = one_field(avro_type)
    assert (column["name"], column["type"], column["mode"]) == ("f", bq_type, mode)


def test_records_maps_and_named_references_become_nested_columns() -> None:
    inner = {
        "type": "record",
        "name": "Inner",
        "namespace": "x",
        "fields": [{"name": "a", "type": ["null", "int"]}],
    }
    schema = {
        "type": "record",
        "name": "Outer",
        "namespace": "x",
        "fields": [
            {"name": "first", "type": inner},
            {"name": "again", "type": "Inner"},  # reference by name, resolved in namespace x
            {"name": "tags", "type": {"type": "map", "values": "string"}},
        ],
    }

    first, again, tags = bigquery_schema_from_avro(schema)

    assert first == {
        "name": "first",
        "type": "RECORD",
        "mode": "REQUIRED",
        "fields": [{"name": "a", "type": "INTEGER", "mode": "NULLABLE"}],
    }
    assert again == {**first, "name": "again"}
    assert tags == {
        "name": "tags",
        "type": "RECORD",
        "mode": "REPEATED",
        "fields": [
            {"name": "key", "type": "STRING", "mode": "REQUIRED"},
            {"name": "value", "type": "STRING", "mode": "REQUIRED"},
        ],
    }


def test_enriched_schema_starts_with_the_enrichment_columns() -> None:
    writer = {"type": "record", "name": "Order", "fields": [{"name": "orderId", "type": "string"}]}

    columns = bigquery_schema_from_avro(extended_schema(writer, EnrichmentConfig()))

    assert [(c["name"], c["type"], c["mode"]) for c in columns] == [
        ("_event_date", "DATE", "REQUIRED"),
        ("_kafka_topic", "STRING", "REQUIRED"),
        ("_kafka_partition", "INTEGER", "REQUIRED"),
        ("_kafka_offset", "INTEGER", "REQUIRED"),
        ("_kafka_timestamp", "TIMESTAMP", "NULLABLE"),
        ("orderId", "STRING", "REQUIRED"),
    ]


def test_dead_letter_schema_maps_headers_to_a_repeated_record() -> None:
    columns = {c["name"]: c for c in bigquery_schema_from_avro(DEAD_LETTER_SCHEMA)}

    assert columns["headers"]["mode"] == "REPEATED"
    assert [(f["name"], f["type"], f["mode"]) for f in columns["headers"]["fields"]] == [
        ("key", "STRING", "REQUIRED"),
        ("value", "BYTES", "NULLABLE"),
    ]
    assert (columns["staged_date"]["type"], columns["raw_value"]["mode"]) == ("DATE", "NULLABLE")


@pytest.mark.parametrize(
    ("avro_type", "message"),
    [
        (["null", "string", "long"], "union of 2 non-null types"),
        ({"type": "array", "items": {"type": "array", "items": "int"}}, "array of arrays"),
        ({"type": "bytes", "logicalType": "decimal", "precision": 80, "scale": 40}, "decimal"),
        ("no.such.Type", "unknown Avro type"),
    ],
)
def test_types_bigquery_cannot_load_are_refused_naming_the_field(avro_type, message) -> None:
    with pytest.raises(LoadError, match=message) as error:
        one_field(avro_type)
    assert "field f" in str(error.value)
