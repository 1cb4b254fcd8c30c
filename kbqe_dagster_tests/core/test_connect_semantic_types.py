"""Kafka Connect's and Debezium's semantic types become the BigQuery types a user expects
(core/formats/connect_types.py): the staged file's Avro schema says the logical type, and the
values whose bytes must change are converted exactly or refused naming the column."""

from __future__ import annotations

import io
from decimal import Decimal

import fastavro
import pytest

from kbqe_dagster.core.errors import UnconvertibleValueError
from kbqe_dagster.core.formats.connect_types import semantic_mapping
from kbqe_dagster.resources.bigquery.schema import bigquery_schema_from_avro


def semantic(name, avro, **more):
    return {"type": avro, "connect.version": 1, "connect.name": name, **more}


def row(*fields):
    return {
        "type": "record",
        "name": "Value",
        "namespace": "pg.public.t",
        "fields": [{"name": "id", "type": "int"}, *fields],
    }


def column(avro, name="c", optional=False):
    return {"name": name, "type": ["null", avro] if optional else avro} | (
        {"default": None} if optional else {}
    )


VSD = {
    "type": "record",
    "name": "VariableScaleDecimal",
    "namespace": "io.debezium.data",
    "fields": [{"name": "scale", "type": "int"}, {"name": "value", "type": "bytes"}],
    "connect.doc": "Variable scaled decimal",
    "connect.version": 1,
    "connect.name": "io.debezium.data.VariableScaleDecimal",
}


@pytest.mark.parametrize("optional", [False, True])
@pytest.mark.parametrize(
    ("avro", "bigquery", "same_bytes"),
    [
        (semantic("io.debezium.time.Date", "int"), "DATE", True),
        (semantic("io.debezium.time.Time", "int"), "TIME", True),
        (semantic("io.debezium.time.MicroTime", "long"), "TIME", True),
        (semantic("io.debezium.time.NanoTime", "long"), "TIME", False),
        (semantic("io.debezium.time.Timestamp", "long"), "TIMESTAMP", True),
        (semantic("io.debezium.time.MicroTimestamp", "long"), "TIMESTAMP", True),
        (semantic("io.debezium.time.NanoTimestamp", "long"), "TIMESTAMP", False),
        (semantic("io.debezium.time.ZonedTimestamp", "string"), "TIMESTAMP", False),
        (semantic("io.debezium.time.ZonedTime", "string"), "STRING", True),
        (semantic("io.debezium.time.MicroDuration", "long"), "INTEGER", True),
        (semantic("io.debezium.time.Year", "int"), "INTEGER", True),
        (semantic("io.debezium.data.Json", "string"), "JSON", True),
        (semantic("io.debezium.data.Uuid", "string"), "STRING", True),
        (semantic("io.debezium.data.Enum", "string"), "STRING", True),
        (semantic("io.debezium.data.Bits", "bytes"), "BYTES", True),
        (VSD, "NUMERIC", False),
        (
            semantic(
                "org.apache.kafka.connect.data.Decimal",
                "bytes",
                **{"connect.parameters": {"scale": "2", "connect.decimal.precision": "10"}},
            ),
            "NUMERIC",
            True,
        ),
        (semantic("org.apache.kafka.connect.data.Date", "int"), "DATE", True),
        (semantic("org.apache.kafka.connect.data.Timestamp", "long"), "TIMESTAMP", True),
    ],
)
def test_each_semantic_type_has_its_bigquery_type(avro, bigquery, same_bytes, optional):
    mapping = semantic_mapping(row(column(avro, optional=optional)))
    columns = {c["name"]: c for c in bigquery_schema_from_avro(mapping.schema)}
    assert columns["c"]["type"] == bigquery
    assert columns["c"]["mode"] == ("NULLABLE" if optional else "REQUIRED")
    assert mapping.rewrites_values is not same_bytes
    fastavro.parse_schema(mapping.schema)  # what the staged files carry must parse


def test_a_schema_without_semantic_types_is_left_as_it_is():
    schema = row(column("string"), column({"type": "int", "connect.type": "int16"}, "s"))
    mapping = semantic_mapping(schema)
    assert mapping.schema == schema and not mapping.changed and not mapping.rewrites_values


def test_a_semantic_name_on_a_type_it_does_not_fit_keeps_the_type_sent():
    schema = row(column(semantic("io.debezium.time.Date", "string")))
    assert semantic_mapping(schema).schema == schema


def convert(avro, value, optional=False):
    mapping = semantic_mapping(row(column(avro, optional=optional)))
    record = mapping.convert({"id": 1, "c": value})
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(mapping.schema), record)
    out.seek(0)
    return fastavro.schemaless_reader(out, fastavro.parse_schema(mapping.schema), None)["c"]


@pytest.mark.parametrize(
    ("text", "iso_utc"),
    [
        ("2024-09-13T12:36:45.123456Z", "2024-09-13T12:36:45.123456+00:00"),
        ("2024-09-13T14:36:45+02:00", "2024-09-13T12:36:45+00:00"),
        ("1969-12-31T23:59:59.999999Z", "1969-12-31T23:59:59.999999+00:00"),
        ("0001-01-01T00:00:00Z", "0001-01-01T00:00:00+00:00"),
    ],
)
def test_a_zoned_timestamp_becomes_its_instant(text, iso_utc):
    avro = semantic("io.debezium.time.ZonedTimestamp", "string")
    assert convert(avro, text).isoformat() == iso_utc


@pytest.mark.parametrize("text", ["yesterday", "2024-09-13T12:36:45", "+10000-01-01T00:00:00Z"])
def test_a_zoned_timestamp_without_an_instant_is_refused_naming_the_column(text):
    with pytest.raises(UnconvertibleValueError, match="column 'c'"):
        convert(semantic("io.debezium.time.ZonedTimestamp", "string"), text)


def vsd(text):
    value = Decimal(text)
    sign, digits, exponent = value.as_tuple()
    unscaled = int("".join(map(str, digits))) * (-1 if sign else 1)
    return {"scale": -exponent, "value": unscaled.to_bytes(20, "big", signed=True)}


@pytest.mark.parametrize(
    "text", ["0", "123.45", "-0.000000001", "99999999999999999999999999999.999999999", "1E+5"]
)
def test_a_numeric_without_scale_is_an_exact_numeric(text):
    assert convert(VSD, vsd(text), optional=True) == Decimal(text)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("0.0000000001", "more than 9 decimal places"),
        ("100000000000000000000000000000", "more than 29 integer digits"),
    ],
)
def test_a_numeric_no_numeric_holds_is_refused_never_rounded(text, why):
    with pytest.raises(UnconvertibleValueError, match=f"column 'c'.*{why}"):
        convert(VSD, vsd(text))


def test_trailing_zeros_beyond_nine_places_are_exact():
    assert convert(VSD, vsd("1.500000000000")) == Decimal("1.5")


def test_a_null_of_an_optional_converted_column_stays_null():
    assert convert(semantic("io.debezium.time.ZonedTimestamp", "string"), None, True) is None


def test_a_named_type_used_twice_is_converted_at_every_use():
    schema = row(
        column(VSD, "a", optional=True), column("io.debezium.data.VariableScaleDecimal", "b")
    )
    mapping = semantic_mapping(schema)
    assert set(mapping.converters) == {"a", "b"}
    types = {c["name"]: c["type"] for c in bigquery_schema_from_avro(mapping.schema)}
    assert types["a"] == types["b"] == "NUMERIC"
    fastavro.parse_schema(mapping.schema)


def test_semantic_values_inside_arrays_and_nested_records_are_converted():
    nested = {
        "type": "record",
        "name": "Inner",
        "fields": [{"name": "at", "type": semantic("io.debezium.time.ZonedTimestamp", "string")}],
    }
    schema = row(
        column({"type": "array", "items": semantic("io.debezium.time.Date", "int")}, "days"),
        column(nested, "inner"),
    )
    mapping = semantic_mapping(schema)
    converted = mapping.convert({"id": 1, "days": [1, 2], "inner": {"at": "1970-01-01T00:00:01Z"}})
    assert converted["inner"] == {"at": 1_000_000} and converted["days"] == [1, 2]
    types = {c["name"]: c for c in bigquery_schema_from_avro(mapping.schema)}
    assert types["days"]["type"] == "DATE" and types["days"]["mode"] == "REPEATED"
