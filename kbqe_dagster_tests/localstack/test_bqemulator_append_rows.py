"""The local stack's emulator turns an AppendRows request's proto rows into the same Arrow
table, or the same error, with the column-wise conversion of localstack/bqemulator_threads.py
as with bqemulator's own row-by-row code: only the cost per row changes.

Checked in this process on bqemulator's functions (no stack): every scalar column type the
stage path appends, NULLs in every nullable column, columns the writer schema lacks, a writer
schema with a repeated field (bqemulator's own code), and values a column cannot take.
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("bqemulator")

from bqemulator.grpc_api import write_servicer  # noqa: E402
from bqemulator.streaming import proto_deserializer  # noqa: E402
from bqemulator.streaming.proto_deserializer import ProtoRowDecoder  # noqa: E402

from kbqe_dagster.core.formats.avro_proto import proto_rows  # noqa: E402
from kbqe_dagster.localstack import bqemulator_threads  # noqa: E402
from kbqe_dagster.resources.bigquery.schema import bigquery_schema_from_avro  # noqa: E402
from kbqe_dagster_tests.support.every_column_type import SCALARS, staged_orders  # noqa: E402

ORIGINAL = proto_deserializer.proto_rows_to_arrow_table


@pytest.fixture(scope="module")
def patched():
    bqemulator_threads.column_wise_proto_rows()
    return write_servicer.proto_rows_to_arrow_table


def target_schema(avro: dict) -> Any:
    from bqemulator.api.routes.tabledata import _build_arrow_schema

    return _build_arrow_schema(bigquery_schema_from_avro(avro))


def request(avro: dict, records: list[dict]) -> tuple[ProtoRowDecoder, list[bytes]]:
    rows = proto_rows(avro, records)
    return ProtoRowDecoder(rows.descriptor), list(rows.rows)


def without(avro: dict, *names: str) -> dict:
    return {**avro, "fields": [f for f in avro["fields"] if f["name"] not in names]}


FLAT = without(SCALARS, "tags")  # every scalar column the emulator appends; no repeated field


def records_of(avro: dict) -> list[dict]:
    names = {f["name"] for f in avro["fields"]}
    return [{k: v for k, v in r.items() if k in names} for r in staged_orders()] * 50


def test_the_patch_is_in_place_and_a_flat_request_takes_the_column_wise_path(patched) -> None:
    assert patched is not ORIGINAL and patched.kbqe_column_wise
    decoder, rows = request(FLAT, records_of(FLAT))
    assert bqemulator_threads._column_wise(decoder, rows, target_schema(FLAT)) is not None


@pytest.mark.parametrize(
    "writer, table",
    [
        pytest.param(FLAT, FLAT, id="every-scalar-type"),
        pytest.param(without(FLAT, "maybe", "name", "day"), FLAT, id="columns-the-writer-lacks"),
        pytest.param(SCALARS, SCALARS, id="a-repeated-field-bqemulator-converts"),
    ],
)
def test_the_arrow_table_is_bqemulators_own(patched, writer: dict, table: dict) -> None:
    decoder, rows = request(writer, records_of(writer))
    schema = target_schema(table)
    got = patched(decoder, rows, schema)
    assert got.num_rows == len(rows) == 300
    assert got.equals(ORIGINAL(decoder, rows, schema))
    assert got.schema.equals(schema)


def test_nulls_stay_null(patched) -> None:
    nullable = [f["name"] for f in FLAT["fields"] if isinstance(f["type"], list)]
    records = [{**r, **dict.fromkeys(nullable)} for r in records_of(FLAT)[:6]]
    decoder, rows = request(FLAT, records)
    got = patched(decoder, rows, target_schema(FLAT))
    assert got.equals(ORIGINAL(decoder, rows, target_schema(FLAT)))
    assert all(got.column(n).null_count == 6 for n in nullable)


def test_a_value_its_column_cannot_take_fails_the_request_with_bqemulators_error(patched):
    # A STRING writer field into an INT64 column: bqemulator casts "5" and fails on "x".
    as_text = {
        "type": "record",
        "name": "Click",
        "fields": [{"name": "n", "type": "string"}],
    }
    table = {"type": "record", "name": "Click", "fields": [{"name": "n", "type": "long"}]}
    decoder, rows = request(as_text, [{"n": "5"}, {"n": "x"}, {"n": "6"}])
    with pytest.raises(ValueError) as original:
        ORIGINAL(decoder, rows, target_schema(table))
    with pytest.raises(ValueError) as got:
        patched(decoder, rows, target_schema(table))
    assert (type(got.value), str(got.value)) == (type(original.value), str(original.value))
    decoder, rows = request(as_text, [{"n": "5"}, {"n": "6"}])
    assert patched(decoder, rows, target_schema(table)).column("n").to_pylist() == [5, 6]


def test_a_row_that_does_not_parse_fails_as_before(patched) -> None:
    decoder, rows = request(FLAT, records_of(FLAT)[:2])
    broken = [rows[0], b"\xff\xff\xff"]
    with pytest.raises(Exception) as original:
        ORIGINAL(decoder, broken, target_schema(FLAT))
    with pytest.raises(Exception) as got:
        patched(decoder, broken, target_schema(FLAT))
    assert type(got.value) is type(original.value)
