"""Column descriptions (core/record/column_descriptions.py): an Avro field's ``doc`` (a JSON
Schema property's ``description`` arrives as one), nested fields included; fixed ones for
kbqe's Kafka columns; and the schema update that brings an existing table in step
(core/load/evolution.py)."""

from __future__ import annotations

from kbqe_dagster.core.formats.json_schema_avro import map_json_schema
from kbqe_dagster.core.load.evolution import plan_schema_change
from kbqe_dagster.core.record.column_descriptions import (
    MAX_COLUMN_DESCRIPTION_CHARS,
    describe_columns,
    kafka_column_descriptions,
)
from kbqe_dagster.core.record.enrichment import EnrichmentConfig, extended_schema
from kbqe_dagster.resources.bigquery.schema import bigquery_schema_from_avro

ORDER = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "order_id", "type": "string", "doc": "The order's id, as the shop assigns it."},
        {"name": "amount", "type": "long"},
        {
            "name": "customer",
            "type": [
                "null",
                {
                    "type": "record",
                    "name": "Customer",
                    "fields": [{"name": "id", "type": "long", "doc": "Customer number."}],
                },
            ],
            "default": None,
        },
    ],
}


def described(schema, fixed=None):
    columns = describe_columns(bigquery_schema_from_avro(schema), schema, fixed)
    return {c["name"]: c.get("description") for c in columns}, columns


def test_a_fields_doc_describes_its_column_nested_fields_included() -> None:
    top, columns = described(ORDER)
    assert top == {
        "order_id": "The order's id, as the shop assigns it.",
        "amount": None,
        "customer": None,
    }
    [customer] = [c for c in columns if c["name"] == "customer"]
    assert customer["fields"][0]["description"] == "Customer number."


def test_kbqes_columns_get_their_fixed_descriptions_by_their_configured_names() -> None:
    enrichment = EnrichmentConfig(offset_column="kafka_offset", key_column="_kafka_key")
    top, _ = described(extended_schema(ORDER, enrichment), kafka_column_descriptions(enrichment))
    assert top["_event_date"].startswith("Event date (UTC) of the Kafka message")
    assert top["_kafka_topic"] == "Kafka topic the row was read from."
    assert top["_kafka_partition"] == "Kafka partition the row was read from."
    assert top["kafka_offset"].startswith("Kafka offset of the message within its partition")
    assert top["_kafka_timestamp"].startswith("Kafka message timestamp")
    assert top["_kafka_key"] == "Kafka message key, as bytes."
    assert top["order_id"] == "The order's id, as the shop assigns it."
    assert top["amount"] is None


def test_a_json_schema_description_reaches_its_column() -> None:
    avro = map_json_schema(
        {
            "type": "object",
            "properties": {"sku": {"type": "string", "description": "Stock keeping unit."}},
        },
        "Item",
    ).avro_schema
    top, _ = described(avro)
    assert top["sku"] == "Stock keeping unit."


def test_a_long_doc_is_cut_to_bigquerys_limit() -> None:
    schema = {
        "type": "record",
        "name": "R",
        "fields": [{"name": "a", "type": "int", "doc": "x" * 2000}],
    }
    top, _ = described(schema)
    assert len(top["a"]) == MAX_COLUMN_DESCRIPTION_CHARS


def test_an_existing_table_takes_a_changed_or_new_description_and_keeps_an_unstated_one() -> None:
    table = [
        {"name": "order_id", "type": "STRING", "mode": "REQUIRED", "description": "old"},
        {"name": "amount", "type": "INTEGER", "mode": "REQUIRED", "description": "by hand"},
        {"name": "customer", "type": "RECORD", "mode": "NULLABLE",
         "fields": [{"name": "id", "type": "INTEGER", "mode": "REQUIRED"}]},
    ]  # fmt: skip
    _, staged = described(ORDER)

    change = plan_schema_change("d.orders", table, staged)

    assert change.described == ("order_id", "customer.id")
    assert change.changes and change.summary == "described order_id, customer.id"
    by_name = {c["name"]: c for c in change.schema}
    assert by_name["order_id"]["description"] == "The order's id, as the shop assigns it."
    assert by_name["amount"]["description"] == "by hand"  # the schema says nothing: kept
    assert by_name["customer"]["fields"][0]["description"] == "Customer number."
    assert not plan_schema_change("d.orders", change.schema, staged).changes  # in step
