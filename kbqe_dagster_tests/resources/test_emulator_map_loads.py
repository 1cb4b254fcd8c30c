"""Avro maps load on the emulator's path as in BigQuery: a map becomes a REPEATED RECORD of
``key``/``value``, at the top level, inside a record, inside an array of records, and as a map
of records; one table takes several loads in a row (the first creates it), a newer schema's
added fields (a map among them), and an older schema's file after it. Rows are read back
through the emulator's API, in BigQuery's shape. Against the real emulator: these tests cross
its process boundary (the SQL's text is tested in test_emulator_maps.py)."""

from __future__ import annotations

import datetime as dt
import io
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import fastavro
import pytest
from google.cloud import bigquery, storage

from kbqe_dagster.core.load.lifecycle import ObservedKind, SubmitOutcome
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.resources.bigquery import EmulatorBigQueryLoads, LoadRequest
from kbqe_dagster.resources.bigquery.jobs import ROWS_FROM_CREATED_TABLE, ROWS_FROM_DML
from kbqe_dagster_tests.localstack.emulators import bq, bucket, emulator_dataset, emulators  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("emulators")]

UTC = dt.UTC
DAY = dt.date(2026, 11, 24)
AT = dt.datetime(2026, 11, 24, 10, 30, 0, 123456, tzinfo=UTC)


MICROS = {"type": "long", "logicalType": "timestamp-micros"}


def _map(values: Any) -> dict:
    return {"type": "map", "values": values}


def _record(name: str, *fields: tuple[str, Any]) -> dict:
    return {
        "type": "record",
        "name": name,
        "fields": [
            {"name": n, "type": t, **({"default": None} if isinstance(t, list) else {})}
            for n, t in fields
        ],
    }


def _schema(shape_field: tuple[str, Any], *added: dict) -> dict:
    base = _record(
        "Event",
        ("id", "string"),
        shape_field,
        ("_event_date", {"type": "int", "logicalType": "date"}),
    )
    base["namespace"] = "com.acme.maps"
    base["fields"].extend(added)
    return base


# Fields a second schema version appends: a nullable scalar and a map (BigQuery adds both).
ADDED = (
    {"name": "note", "type": ["null", "string"], "default": None},
    {"name": "labels", "type": _map("string"), "default": {}},
)


def _entries(mapping: dict) -> list[dict]:
    return [{"key": k, "value": v} for k, v in mapping.items()]


class Shape:
    """A field holding a map somewhere: its Avro type, a value of row ``i`` as written, and
    that value as BigQuery returns it."""

    def __init__(
        self, name: str, avro: Any, written: Callable[[int], Any], read: Callable[[int], Any]
    ) -> None:
        self.name, self.avro, self.written, self.read = name, avro, written, read

    def __repr__(self) -> str:
        return self.name


def _attrs(i: int) -> dict:
    return {f"k{j}": i * 10 + j for j in range(i % 3)}  # 0, 1 or 2 entries


SHAPES = [
    Shape("attrs", _map("long"), _attrs, lambda i: _entries(_attrs(i))),
    Shape(
        "rec",
        ["null", _record("Rec", ("a", "string"), ("m", _map("double")))],
        lambda i: None if i == 2 else {"a": f"a{i}", "m": {"x": i + 0.5}},
        lambda i: None if i == 2 else {"a": f"a{i}", "m": [{"key": "x", "value": i + 0.5}]},
    ),
    Shape(
        "items",
        {
            "type": "array",
            "items": _record("Item", ("sku", "string"), ("tags", _map(["null", "string"]))),
        },
        lambda i: [
            {"sku": f"s{i}-{j}", "tags": {"t": f"v{j}", "gone": None}} for j in range(i % 3)
        ],
        lambda i: [
            {
                "sku": f"s{i}-{j}",
                "tags": [{"key": "t", "value": f"v{j}"}, {"key": "gone", "value": None}],
            }
            for j in range(i % 3)
        ],
    ),
    Shape(
        "byname",
        _map(_record("Counter", ("n", "long"), ("seen", MICROS), ("flags", _map("boolean")))),
        lambda i: {f"c{i}": {"n": i, "seen": AT, "flags": {"on": bool(i % 2)}}},
        lambda i: [
            {
                "key": f"c{i}",
                "value": {"n": i, "seen": AT, "flags": [{"key": "on", "value": bool(i % 2)}]},
            }
        ],
    ),
]


@pytest.fixture
def dataset(bq: bigquery.Client, bucket: storage.Bucket) -> Iterator[str]:
    with emulator_dataset(bq, bucket, "maps") as name:
        yield name


@pytest.fixture
def stage(bucket: storage.Bucket, dataset: str):
    def write(schema: dict[str, Any], records: list[dict[str, Any]]) -> str:
        buf = io.BytesIO()
        fastavro.writer(buf, fastavro.parse_schema(schema), records, codec="snappy")
        name = f"{dataset}/{uuid.uuid4().hex[:8]}.avro"
        bucket.blob(name).upload_from_string(buf.getvalue(), if_generation_match=0)
        return f"gs://{LOCAL_BUCKET}/{name}"

    return write


def _load(loads: EmulatorBigQueryLoads, dataset: str, uri: str, schema: dict, table: str):
    request = LoadRequest(
        f"kbqe_test_{uuid.uuid4().hex}", dataset, table, (uri,), "_event_date", avro_schema=schema
    )
    result = loads.submit_load(request)
    assert result.outcome is SubmitOutcome.SUBMITTED, result
    return loads.job_report(request.job_id)


def _rows(bq: bigquery.Client, sql: str) -> list[dict[str, Any]]:
    return [_plain(dict(r)) for r in bq.query_and_wait(sql)]


def _plain(value: Any) -> Any:
    """Rows' nested values as plain dicts and lists (the client returns dicts already; this
    keeps the comparison independent of its row types)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


def _column(bq: bigquery.Client, dataset: str, table: str, name: str) -> dict:
    # A query's schema: the emulator's table metadata does not list columns added by ALTER.
    schema = bq.query_and_wait(f"SELECT * FROM `{dataset}.{table}` LIMIT 0").schema
    (field,) = [f for f in schema if f.name == name]
    return field.to_api_repr()


def _tables(bq: bigquery.Client, dataset: str) -> list[str]:
    return sorted(t.table_id for t in bq.list_tables(dataset))


@pytest.mark.parametrize("shape", SHAPES, ids=repr)
def test_a_map_field_loads_as_repeated_key_value_records_job_after_job_and_across_versions(
    bq,
    dataset,
    stage,
    shape: Shape,
) -> None:
    v1 = _schema((shape.name, shape.avro))
    v2 = _schema((shape.name, shape.avro), *ADDED)
    loads = EmulatorBigQueryLoads(bq)

    def events(*ids: int, newer: bool = False) -> list[dict]:
        return [
            {
                "id": f"e{i}",
                shape.name: shape.written(i),
                "_event_date": DAY,
                **({"note": f"n{i}", "labels": {"l": f"l{i}"}} if newer else {}),
            }
            for i in ids
        ]

    reports = [
        _load(loads, dataset, stage(v1, events(0, 1)), v1, "events"),  # creates the table
        _load(loads, dataset, stage(v1, events(2)), v1, "events"),
        _load(loads, dataset, stage(v2, events(3, 4, newer=True)), v2, "events"),  # widens it
        _load(loads, dataset, stage(v1, events(5)), v1, "events"),  # an older producer
    ]

    assert [r.observed.kind for r in reports] == [ObservedKind.DONE_OK] * 4
    assert [(r.output_rows, r.rows_source) for r in reports] == [
        (2, ROWS_FROM_DML),
        (1, ROWS_FROM_DML),
        (2, ROWS_FROM_DML),
        (1, ROWS_FROM_DML),
    ]
    rows = _rows(bq, f"SELECT id, {shape.name}, note, labels FROM `{dataset}.events` ORDER BY id")
    assert rows == [
        {
            "id": f"e{i}",
            shape.name: shape.read(i),
            "note": f"n{i}" if i in (3, 4) else None,
            "labels": [{"key": "l", "value": f"l{i}"}] if i in (3, 4) else [],
        }
        for i in range(6)
    ]
    assert _tables(bq, dataset) == ["events"], "no temporary table stays behind"


def test_a_map_column_has_bigquerys_type_whichever_load_created_the_table(
    bq,
    dataset,
    stage,
) -> None:
    """One table created by a file with the map; another by a file without it, the map added
    by a later schema's load (ALTER TABLE): the same REPEATED RECORD (key, value) column."""
    attrs = SHAPES[0]
    with_map = _schema((attrs.name, attrs.avro))
    without = _schema(("other", "long"))
    widened = _schema(("other", "long"), {"name": attrs.name, "type": attrs.avro, "default": {}})
    loads = EmulatorBigQueryLoads(bq)

    _load(
        loads,
        dataset,
        stage(with_map, [{"id": "a", "attrs": {"k": 1}, "_event_date": DAY}]),
        with_map,
        "created_with_map",
    )
    first = _load(
        loads,
        dataset,
        stage(without, [{"id": "b", "other": 7, "_event_date": DAY}]),
        without,
        "map_added_later",
    )
    _load(
        loads,
        dataset,
        stage(widened, [{"id": "c", "other": 8, "attrs": {"k": 2}, "_event_date": DAY}]),
        widened,
        "map_added_later",
    )

    assert first.rows_source == ROWS_FROM_CREATED_TABLE, "created by the creating load"
    expected = {
        "name": "attrs",
        "type": "RECORD",
        "mode": "REPEATED",
        "fields": [
            {"name": "key", "type": "STRING", "mode": "NULLABLE"},
            {"name": "value", "type": "INTEGER", "mode": "NULLABLE"},
        ],
    }
    for table in ("created_with_map", "map_added_later"):
        assert _plain(_column(bq, dataset, table, "attrs")) == expected, table
    assert bq.get_table(f"{dataset}.created_with_map").schema[1].to_api_repr()["fields"] == [
        {"name": "key", "type": "STRING", "mode": "REQUIRED"},
        {"name": "value", "type": "INTEGER", "mode": "REQUIRED"},
    ], "the schema a load gives it"
    assert _rows(bq, f"SELECT id, attrs FROM `{dataset}.map_added_later` ORDER BY id") == [
        {"id": "b", "attrs": []},
        {"id": "c", "attrs": [{"key": "k", "value": 2}]},
    ]
