"""What a real Debezium PostgreSQL connector sent (corpus/debezium_postgres/, captured from the
connector on the local stack) stages into the changelog with the types of the mapping table
(core/formats/connect_types.py), the same on the Python path and on the native kernel.

These are the messages our own generators never made: Apicurio's framing and content ids,
``connect.name`` on every semantic column, a truncate, the unavailable-value placeholder of an
unchanged TOASTed column, a delete whose before image is only the key, edge values (year 1,
the end of Debezium's nanosecond range, a ``numeric`` of 38 digits)."""

from __future__ import annotations

import io
import json
from datetime import UTC, date, datetime, time
from decimal import Decimal
from pathlib import Path

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster_tests.staging.kernel_equality import Msg, assert_same, stage

CORPUS = Path(__file__).parents[1] / "corpus" / "debezium_postgres"
MESSAGES = json.loads((CORPUS / "avro" / "messages.json").read_text())
SCHEMAS = {
    int(i): s if isinstance(s, dict) else json.loads(s)
    for i, s in json.loads((CORPUS / "avro" / "schemas.json").read_text())["by_id"].items()
}
TOPIC = "dbz_avro.public.all_types"


def pipeline():
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": TOPIC,
                    "format": "debezium",
                    "keyed": {"key": ["id"]},
                    "routing": {"mode": "static", "dataset": "pg", "table": "all_types"},
                }
            ],
        },
        source="test",
    )


def messages() -> list[Msg]:
    def raw(text):
        return None if text is None else bytes.fromhex(text)

    return [
        Msg(TOPIC, m["partition"], m["offset"], raw(m["value_hex"]), key=raw(m["key_hex"]))
        for m in MESSAGES
    ]


@pytest.fixture(scope="module")
def staged(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("corpus")
    schemas = {i: s for i, s in SCHEMAS.items()}
    python = stage(tmp, pipeline(), TOPIC, schemas, messages(), native=False)
    try:
        import kbqe_dagster_kernel  # noqa: F401
    except ImportError:
        return python
    native = stage(tmp, pipeline(), TOPIC, schemas, messages(), native=True)
    assert_same(python, native)
    return python


def changelog(staged) -> tuple[dict, dict[int, dict]]:
    (name,) = [n for n in staged.files if n.endswith(".avro") and "all_types_changelog" in n]
    reader = fastavro.reader(io.BytesIO(staged.files[name]))
    return reader.writer_schema, {r["_kafka_offset"]: r for r in reader}


def test_the_changelog_columns_have_the_bigquery_types_of_the_mapping(staged):
    from kbqe_dagster.resources.bigquery.schema import bigquery_schema_from_avro

    schema, _ = changelog(staged)
    types = {c["name"]: c["type"] for c in bigquery_schema_from_avro(schema)}
    assert {k: types[k] for k in types if k.startswith("c_")} == {
        "c_smallint": "INTEGER", "c_int": "INTEGER", "c_bigint": "INTEGER",
        "c_numeric": "NUMERIC", "c_numeric_any": "NUMERIC", "c_real": "FLOAT",
        "c_double": "FLOAT", "c_bool": "BOOLEAN", "c_text": "STRING", "c_varchar": "STRING",
        "c_char": "STRING", "c_date": "DATE", "c_time": "TIME", "c_timetz": "STRING",
        "c_timestamp": "TIMESTAMP", "c_timestamptz": "TIMESTAMP", "c_interval": "INTEGER",
        "c_uuid": "STRING", "c_json": "JSON", "c_jsonb": "JSON", "c_bytea": "BYTES",
        "c_enum": "STRING", "c_int_array": "INTEGER", "c_text_array": "STRING",
    }  # fmt: skip


def test_the_real_values_stage_as_the_source_wrote_them(staged):
    _, rows = changelog(staged)
    toast_insert, toast_update, delete = rows[4], rows[5], rows[6]
    assert toast_insert["c_int"] == 0 and len(toast_insert["c_text"]) == 10_000
    # The changelog keeps the event as received; D.T and the history resolve the placeholder.
    assert toast_update["c_text"] == "__debezium_unavailable_value"
    assert (delete["_op"], delete["_deleted"], delete["id"], delete["c_text"]) == (
        "d",
        True,
        2,
        None,
    )
    created = rows[10]  # the primary-key update's create of the new key
    assert (created["_op"], created["id"]) == ("c", 30)


def test_a_numeric_no_bigquery_numeric_holds_is_dead_lettered_naming_the_column(staged):
    """The snapshot row's ``numeric`` has 26 decimal places and row 2's 38 digits: NUMERIC
    cannot hold them, and they are never rounded (docs/configuration.md, the mapping)."""
    dead = staged.result.dead_letters
    assert dead.get("unconvertible_value") == 3  # snapshot_read, insert, update
    _, rows = changelog(staged)
    assert not {0, 1, 3} & rows.keys()


def test_semantic_values_of_the_edge_row(tmp_path):
    """Row 2's values with its ``numeric`` replaced by one NUMERIC holds: year 1, midnight,
    the epoch, the end of Debezium's nanosecond range, an empty bytea."""
    (message,) = [m for m in MESSAGES if m["label"] == "insert"]
    schema = SCHEMAS[message["value_schema_id"]]
    raw = bytes.fromhex(message["value_hex"])
    record = fastavro.schemaless_reader(io.BytesIO(raw[5:]), fastavro.parse_schema(schema), None)
    record["after"]["c_numeric_any"] = {
        "scale": 2,
        "value": (-1234).to_bytes(2, "big", signed=True),
    }
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), record)
    msg = Msg(TOPIC, 0, 0, raw[:5] + body.getvalue(), key=bytes.fromhex(message["key_hex"]))
    staged = stage(tmp_path, pipeline(), TOPIC, SCHEMAS, [msg], native=False)
    row = changelog(staged)[1][0]
    assert row["c_date"] == date(1, 1, 1)
    assert row["c_time"] == time(0, 0)
    assert row["c_timestamp"] == datetime(1970, 1, 1, tzinfo=UTC)
    assert row["c_timestamptz"] == datetime(2262, 4, 11, 23, 47, 16, 854775, tzinfo=UTC)
    assert row["c_numeric_any"] == Decimal("-12.34") and row["c_numeric"] == Decimal("-0.01")
    assert (row["c_json"], row["c_jsonb"], row["c_bytea"]) == ("[]", "{}", b"")
    assert row["c_interval"] == -259_201_000_000
