"""The BigQuery emulator runs the load jobs of DESIGN.md §4 from fake-GCS Avro files, and
its known gaps (DESIGN.md §7) are pinned as they are today.

The ``test_emulator_gap_*`` tests assert the emulator's CURRENT behaviour where it differs
from BigQuery; each docstring says what BigQuery does. When one of them fails, the emulator
changed: check whether the gap closed, then turn the test into a contract test and drop the
fake-client workaround that the load step's tests use for it.
"""

from __future__ import annotations

import datetime as dt
import io
import uuid
from collections.abc import Iterator
from typing import Any

import fastavro
import pytest
from google.api_core.exceptions import BadRequest
from google.cloud import bigquery, storage

from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster_tests.localstack.emulators import bq, bucket, emulators  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("emulators")]

UTC = dt.UTC
EVENT_SCHEMA: dict[str, Any] = {
    "type": "record",
    "name": "Event",
    "namespace": "kbqe.contract",
    "fields": [
        {"name": "event_date", "type": {"type": "int", "logicalType": "date"}},
        {"name": "event_ts", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "_kafka_offset", "type": "long"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
EVENT_TABLE_SCHEMA = [
    bigquery.SchemaField("event_date", "DATE"),
    bigquery.SchemaField("event_ts", "TIMESTAMP"),
    bigquery.SchemaField("_kafka_offset", "INTEGER"),
    bigquery.SchemaField("note", "STRING"),
]
DAYS_AND_COUNTS = [(dt.date(2026, 3, 1), 2), (dt.date(2026, 3, 2), 3), (dt.date(2026, 3, 3), 1)]


def _events(first_offset: int = 1000) -> list[dict[str, Any]]:
    events, offset = [], first_offset
    for day, count in DAYS_AND_COUNTS:
        for i in range(count):
            ts = dt.datetime.combine(day, dt.time(23, 59, 58, 123000 + i * 1000), tzinfo=UTC)
            events.append(
                {
                    "event_date": day,
                    "event_ts": ts,
                    "_kafka_offset": offset,
                    "note": None if offset % 2 else f"note-{offset}",
                }
            )
            offset += 1
    return events


def _ab_schema(*names: str) -> dict[str, Any]:
    fields = [{"name": n, "type": ["null", "string"], "default": None} for n in names]
    return {"type": "record", "name": "AB", "fields": fields}


AB_TABLE_SCHEMA = [bigquery.SchemaField("a", "STRING"), bigquery.SchemaField("b", "STRING")]


@pytest.fixture(scope="module")
def run_id() -> str:
    return uuid.uuid4().hex[:10]


@pytest.fixture(scope="module")
def dataset(bq: bigquery.Client, bucket: storage.Bucket, run_id: str) -> Iterator[str]:
    """A dataset and a staging folder of this module run only, removed afterwards."""
    name = f"contract_{run_id}"
    bq.create_dataset(name)
    yield name
    bq.delete_dataset(name, delete_contents=True, not_found_ok=True)
    for blob in bucket.list_blobs(prefix=f"contract-{run_id}/"):
        blob.delete()


@pytest.fixture
def stage(bucket: storage.Bucket, run_id: str):
    """Write records as a snappy Avro container file to the fake bucket; returns its URI."""

    def write(schema: dict[str, Any], records: list[dict[str, Any]]) -> str:
        buf = io.BytesIO()
        fastavro.writer(buf, fastavro.parse_schema(schema), records, codec="snappy")
        name = f"contract-{run_id}/{uuid.uuid4().hex[:8]}.avro"
        bucket.blob(name).upload_from_string(buf.getvalue(), if_generation_match=0)
        return f"gs://{LOCAL_BUCKET}/{name}"

    return write


def _load_config(**overrides: Any) -> bigquery.LoadJobConfig:
    """The load step's job configuration (DESIGN.md §4)."""
    settings: dict[str, Any] = dict(
        source_format=bigquery.SourceFormat.AVRO,
        use_avro_logical_types=True,
        write_disposition=bigquery.WriteDisposition.WRITE_APPEND,
        create_disposition=bigquery.CreateDisposition.CREATE_IF_NEEDED,
        time_partitioning=bigquery.TimePartitioning(
            type_=bigquery.TimePartitioningType.DAY, field="event_date"
        ),
    )
    settings.update(overrides)
    return bigquery.LoadJobConfig(**settings)


def _load(bq: bigquery.Client, uri: str, table: str, **config: Any) -> bigquery.LoadJob:
    job_id = f"kbqe-contract-{uuid.uuid4().hex}"
    return bq.load_table_from_uri(uri, table, job_id=job_id, job_config=_load_config(**config))


def _rows(bq: bigquery.Client, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(row.values()) for row in bq.query_and_wait(sql)]


def _count(bq: bigquery.Client, table: str) -> int:
    return _rows(bq, f"SELECT COUNT(*) FROM `{table}`")[0][0]


def _ab_table(bq: bigquery.Client, dataset: str, name: str) -> str:
    table = f"{dataset}.{name}"
    bq.create_table(bigquery.Table(f"{bq.project}.{table}", schema=AB_TABLE_SCHEMA))
    return table


# --- what the load step relies on -------------------------------------------------------------
def test_avro_load_job_appends_events_with_logical_types(bq, dataset, stage) -> None:
    events = _events()
    table = f"{dataset}.events"
    job_id = f"kbqe-contract-{uuid.uuid4().hex}"

    job = bq.load_table_from_uri(
        stage(EVENT_SCHEMA, events),
        table,
        job_id=job_id,
        job_config=_load_config(schema=EVENT_TABLE_SCHEMA),
    )
    job.result(timeout=60)

    assert (job.state, job.error_result, job.output_rows) == ("DONE", None, len(events))
    assert _rows(
        bq,
        f"SELECT event_date, event_ts, _kafka_offset, note FROM `{table}` ORDER BY _kafka_offset",
    ) == [(e["event_date"], e["event_ts"], e["_kafka_offset"], e["note"]) for e in events]
    assert (
        _rows(
            bq,
            f"SELECT event_date, COUNT(*) FROM `{table}` GROUP BY event_date ORDER BY event_date",
        )
        == DAYS_AND_COUNTS
    )


def test_get_job_returns_the_finished_load_by_its_chosen_id(bq, dataset, stage) -> None:
    table = f"{dataset}.events_by_id"
    job = _load(bq, stage(EVENT_SCHEMA, _events()), table, schema=EVENT_TABLE_SCHEMA)
    job.result(timeout=60)

    fetched = bq.get_job(job.job_id)

    assert isinstance(fetched, bigquery.LoadJob)
    assert (fetched.job_id, fetched.state, fetched.error_result) == (job.job_id, "DONE", None)
    assert fetched.output_rows == 6
    assert fetched.destination.table_id == "events_by_id"
    assert fetched.source_uris == job.source_uris


def test_emulator_gap_load_statistics_carry_only_output_rows(bq, dataset, stage) -> None:
    """BigQuery also fills inputFiles, inputFileBytes, outputBytes and badRecords; the
    emulator fills outputRows only (the rows-loaded asset check reads output_rows)."""
    job = _load(bq, stage(EVENT_SCHEMA, _events()), f"{dataset}.stats", schema=EVENT_TABLE_SCHEMA)
    job.result(timeout=60)

    fetched = bq.get_job(job.job_id)

    assert fetched._properties["statistics"]["load"] == {"outputRows": "6"}
    assert (
        fetched.output_rows,
        fetched.output_bytes,
        fetched.input_files,
        fetched.input_file_bytes,
    ) == (6, None, None, None)


# --- known gaps (DESIGN.md §7) ----------------------------------------------------------------
def test_emulator_gap_duplicate_job_id_not_409(bq, dataset, stage) -> None:
    """BigQuery answers 409 Conflict to a second insert with an existing job id and loads
    nothing. The emulator runs the job again — the rows are appended twice — and replaces
    the stored job."""
    table = _ab_table(bq, dataset, "dup_job_id")
    uri = stage(_ab_schema("a", "b"), [{"a": "a1", "b": "b1"}, {"a": "a2", "b": "b2"}])
    job_id = f"kbqe-contract-{uuid.uuid4().hex}"
    bq.load_table_from_uri(uri, table, job_id=job_id, job_config=_load_config()).result()

    again = bq.load_table_from_uri(uri, table, job_id=job_id, job_config=_load_config())
    again.result(timeout=60)

    assert (again.job_id, again.state) == (job_id, "DONE")
    assert _count(bq, table) == 4
    assert bq.get_job(job_id).output_rows == 4


def test_emulator_gap_output_rows_is_the_table_total_not_the_rows_appended(
    bq,
    dataset,
    stage,
) -> None:
    """BigQuery's outputRows counts the rows this job wrote; the emulator reports the
    destination's row count after the job, so it equals the file's records only for the
    first load into an empty table."""
    table = _ab_table(bq, dataset, "output_rows")
    two = stage(_ab_schema("a", "b"), [{"a": "1", "b": "1"}, {"a": "2", "b": "2"}])
    three = stage(_ab_schema("a", "b"), [{"a": str(i), "b": str(i)} for i in range(3)])

    first = _load(bq, two, table)
    first.result(timeout=60)
    second = _load(bq, three, table)
    second.result(timeout=60)

    assert (first.output_rows, second.output_rows) == (2, 5)


def test_emulator_gap_allow_field_addition_ignored(bq, dataset, stage) -> None:
    """BigQuery adds the new nullable column ``c`` and loads the rows; the emulator ignores
    the schema update option, fails the job with a binder error and keeps the schema."""
    table = _ab_table(bq, dataset, "field_addition")
    uri = stage(_ab_schema("a", "b", "c"), [{"a": "a1", "b": "b1", "c": "c1"}])

    job = _load(
        bq, uri, table, schema_update_options=[bigquery.SchemaUpdateOption.ALLOW_FIELD_ADDITION]
    )
    with pytest.raises(BadRequest, match="has 2 columns but 3 values were supplied"):
        job.result(timeout=60)

    assert bq.get_job(job.job_id).state == "DONE"
    assert [f.name for f in bq.get_table(table).schema] == ["a", "b"]
    assert _count(bq, table) == 0


def test_emulator_gap_avro_columns_matched_by_position(bq, dataset, stage) -> None:
    """BigQuery matches Avro fields to columns by name; the emulator inserts them by
    position, so a file whose fields are ordered (b, a) lands swapped in table (a, b)."""
    table = _ab_table(bq, dataset, "by_position")
    uri = stage(_ab_schema("b", "a"), [{"a": "value-of-a", "b": "value-of-b"}])

    _load(bq, uri, table).result(timeout=60)

    assert _rows(bq, f"SELECT a, b FROM `{table}`") == [("value-of-b", "value-of-a")]


def test_emulator_gap_file_missing_a_nullable_column_fails(bq, dataset, stage) -> None:
    """BigQuery loads an older-schema file that lacks a NULLABLE column (NULL fills it);
    the emulator fails the job — so files of an older schema id cannot follow a newer one."""
    table = _ab_table(bq, dataset, "missing_column")
    uri = stage(_ab_schema("a"), [{"a": "a1"}])

    job = _load(bq, uri, table)
    with pytest.raises(BadRequest, match="has 2 columns but 1 values were supplied"):
        job.result(timeout=60)

    assert _count(bq, table) == 0


def test_emulator_gap_avro_load_creates_the_table_only_with_an_explicit_schema(
    bq,
    dataset,
    stage,
) -> None:
    """BigQuery creates a missing destination from the Avro schema (CREATE_IF_NEEDED); the
    emulator creates it only from ``schema`` in the job config and otherwise fails."""
    uri = stage(EVENT_SCHEMA, _events())

    job = _load(bq, uri, f"{dataset}.no_schema")
    with pytest.raises(BadRequest, match="no_schema does not exist"):
        job.result(timeout=60)

    assert [t.table_id for t in bq.list_tables(dataset) if t.table_id == "no_schema"] == []


def test_emulator_gap_time_partitioning_of_a_load_not_recorded(bq, dataset, stage) -> None:
    """BigQuery creates the destination DAY-partitioned on ``event_date``; the emulator
    creates an unpartitioned table (queries still work, partition metadata is absent)."""
    table = f"{dataset}.partitioned"
    _load(bq, stage(EVENT_SCHEMA, _events()), table, schema=EVENT_TABLE_SCHEMA).result(timeout=60)

    assert bq.get_table(table).time_partitioning is None


def test_emulator_gap_hour_partitioning_of_a_load_not_recorded(bq, dataset, stage) -> None:
    """BigQuery creates the destination HOUR-partitioned on the TIMESTAMP ``event_ts`` (the
    load step's config for a ``partitioning: hour`` table); the emulator accepts the
    configuration, loads every row with its timestamp, and creates an unpartitioned table."""
    table = f"{dataset}.hourly"
    job = _load(
        bq,
        stage(EVENT_SCHEMA, _events()),
        table,
        schema=EVENT_TABLE_SCHEMA,
        time_partitioning=bigquery.TimePartitioning(
            type_=bigquery.TimePartitioningType.HOUR, field="event_ts"
        ),
    )
    job.result(timeout=60)

    assert job.error_result is None
    hours = _rows(
        bq, f"SELECT TIMESTAMP_TRUNC(event_ts, HOUR), COUNT(*) FROM `{table}` GROUP BY 1 ORDER BY 1"
    )
    assert [(h.isoformat(), n) for h, n in hours] == [
        ("2026-03-01T23:00:00+00:00", 2),
        ("2026-03-02T23:00:00+00:00", 3),
        ("2026-03-03T23:00:00+00:00", 1),
    ]
    assert bq.get_table(table).time_partitioning is None


def test_emulator_gap_table_options_of_a_load_not_recorded(bq, dataset, stage) -> None:
    """BigQuery creates the destination with the load's clustering and its destination table
    properties (labels, description); the emulator creates it without them. The local load
    path gives them by a table update after such a load (resources/bigquery/emulator.py)."""
    table = f"{dataset}.optioned"
    config = _load_config(schema=EVENT_TABLE_SCHEMA, clustering_fields=["note"])
    config.destination_table_description = "Events"
    config._properties["load"]["destinationTableProperties"]["labels"] = {"team": "web"}
    job_id = f"kbqe-contract-{uuid.uuid4().hex}"
    uri = stage(EVENT_SCHEMA, _events())
    bq.load_table_from_uri(uri, table, job_id=job_id, job_config=config).result(timeout=60)

    created = bq.get_table(table)
    assert (created.clustering_fields, created.labels, created.description) == (None, {}, None)


def test_emulator_gap_partitioning_of_an_existing_table_never_refused(bq, dataset, stage) -> None:
    """BigQuery fails a load whose time partitioning differs from the existing table's
    ("Incompatible table partitioning specification") and refuses an update that changes a
    table's partitioning; the emulator loads the rows and keeps the table's DAY partitioning,
    then takes the update (MONTH or YEAR, any column). kbqe refuses such a table itself, before
    any load (core/record/partition_spec.py; test_partitioning_on_load.py)."""
    table = bigquery.Table(f"{bq.project}.{dataset}.repartitioned", schema=EVENT_TABLE_SCHEMA)
    table.time_partitioning = bigquery.TimePartitioning(type_="DAY", field="event_date")
    bq.create_table(table)
    month = bigquery.TimePartitioning(type_="MONTH", field="event_date")

    job = _load(bq, stage(EVENT_SCHEMA, _events()), table.reference, time_partitioning=month)
    job.result(timeout=60)
    kept = bq.get_table(table.reference).time_partitioning
    changed = bq.get_table(table.reference)
    changed.time_partitioning = bigquery.TimePartitioning(type_="YEAR", field="event_ts")
    bq.update_table(changed, ["time_partitioning"])

    assert job.error_result is None and _count(bq, f"{dataset}.repartitioned") == 6
    assert (kept.type_, kept.field) == ("DAY", "event_date")
    after = bq.get_table(table.reference).time_partitioning
    assert (after.type_, after.field) == ("YEAR", "event_ts")


def test_emulator_gap_clustering_and_labels_not_validated(bq, dataset) -> None:
    """BigQuery refuses a clustering column the table does not have, one of a type it does not
    cluster on (FLOAT64), and a label key with capitals or spaces; the emulator stores them.
    kbqe refuses them itself (core/record/table_options.py, at config check and load time)."""
    table = bigquery.Table(f"{bq.project}.{dataset}.unchecked", schema=EVENT_TABLE_SCHEMA)
    table.clustering_fields = ["no_such_column", "event_date"]
    table.labels = {"Bad Key": "Bad Value"}
    created = bq.create_table(table)

    assert created.clustering_fields == ["no_such_column", "event_date"]
    assert created.labels == {"Bad Key": "Bad Value"}


def test_emulator_gap_required_mode_not_enforced(bq, dataset, stage) -> None:
    """BigQuery rejects a null for a REQUIRED column unless ALLOW_FIELD_RELAXATION relaxes
    the column to NULLABLE; the emulator stores the null and leaves the mode REQUIRED."""
    table = f"{dataset}.required"
    bq.create_table(
        bigquery.Table(
            f"{bq.project}.{table}",
            schema=[
                bigquery.SchemaField("a", "STRING", mode="REQUIRED"),
                bigquery.SchemaField("b", "STRING"),
            ],
        )
    )
    uri = stage(_ab_schema("a", "b"), [{"a": None, "b": "b1"}])

    _load(
        bq, uri, table, schema_update_options=[bigquery.SchemaUpdateOption.ALLOW_FIELD_RELAXATION]
    ).result(timeout=60)

    assert _rows(bq, f"SELECT a, b FROM `{table}`") == [(None, "b1")]
    assert [f.mode for f in bq.get_table(table).schema] == ["REQUIRED", "NULLABLE"]


def test_emulator_gap_avro_map_not_loaded_into_a_repeated_record(bq, dataset, stage) -> None:
    """BigQuery loads an Avro ``map<long>`` into the REPEATED RECORD ``(key STRING, value
    INTEGER)`` it makes of it; the emulator reads the field as a DuckDB MAP, has no cast from a
    map to a list of structs and fails the job (resources/bigquery/emulator_maps.py loads such
    files through a temporary table of maps and converts them)."""
    table = f"{dataset}.with_map"
    bq.create_table(
        bigquery.Table(
            f"{bq.project}.{table}",
            schema=[
                bigquery.SchemaField("id", "STRING"),
                bigquery.SchemaField(
                    "attrs",
                    "RECORD",
                    mode="REPEATED",
                    fields=[
                        bigquery.SchemaField("key", "STRING"),
                        bigquery.SchemaField("value", "INTEGER"),
                    ],
                ),
            ],
        )
    )
    schema = {
        "type": "record",
        "name": "M",
        "fields": [
            {"name": "id", "type": "string"},
            {"name": "attrs", "type": {"type": "map", "values": "long"}},
        ],
    }
    uri = stage(schema, [{"id": "a", "attrs": {"x": 1}}])

    job = _load(bq, uri, table, time_partitioning=None)
    with pytest.raises(BadRequest, match=r"Unimplemented type for cast \(MAP\(VARCHAR, BIGINT\)"):
        job.result(timeout=60)

    assert _count(bq, table) == 0


def test_emulator_gap_nested_field_named_like_a_duckdb_keyword_fails_the_table(
    bq,
    dataset,
) -> None:
    """BigQuery creates a table whose RECORD has a field named ``at`` (or ``inner``, ...); the
    emulator writes nested field names unquoted into DuckDB's CREATE TABLE and answers 500, so
    neither ``tables.insert`` nor a creating load can make such a table locally (the client's
    default retry then retries the 500 until its deadline)."""
    from google.api_core.exceptions import InternalServerError

    table = bigquery.Table(
        f"{bq.project}.{dataset}.keyword_field",
        schema=[
            bigquery.SchemaField("r", "RECORD", fields=[bigquery.SchemaField("at", "TIMESTAMP")])
        ],
    )

    with pytest.raises(InternalServerError):
        bq.create_table(table, retry=None)

    assert "keyword_field" not in [t.table_id for t in bq.list_tables(dataset)]


def test_avro_load_of_debezium_postgres_columns_as_their_bigquery_types(bq, dataset, stage):
    """What Kafka Connect's semantic types stage as (core/formats/connect_types.py) loads with
    the types of the mapping table, and a load without a schema of a file whose table exists
    appends: DATE, TIME, TIMESTAMP, NUMERIC of both kinds, JSON (``sqlType``) and arrays."""
    from decimal import Decimal

    from kbqe_dagster.core.formats.connect_types import semantic_mapping
    from kbqe_dagster.resources.bigquery.schema import bigquery_schema_from_avro

    def sem(name, avro, **more):
        return {"type": avro, "connect.name": name, **more}

    writer = {
        "type": "record",
        "name": "Value",
        "namespace": "pg.public.all_types",
        "fields": [
            {"name": "event_date", "type": sem("io.debezium.time.Date", "int")},
            {"name": "t", "type": ["null", sem("io.debezium.time.MicroTime", "long")]},
            {"name": "ts", "type": ["null", sem("io.debezium.time.MicroTimestamp", "long")]},
            {"name": "tz", "type": ["null", sem("io.debezium.time.ZonedTimestamp", "string")]},
            {
                "name": "price",
                "type": [
                    "null",
                    sem(
                        "org.apache.kafka.connect.data.Decimal",
                        "bytes",
                        scale=2,
                        precision=10,
                        logicalType="decimal",
                    ),
                ],
            },  # fmt: skip
            {
                "name": "n",
                "type": [
                    "null",
                    {
                        "type": "record",
                        "name": "VariableScaleDecimal",
                        "namespace": "io.debezium.data",
                        "connect.name": "io.debezium.data.VariableScaleDecimal",
                        "fields": [
                            {"name": "scale", "type": "int"},
                            {"name": "value", "type": "bytes"},
                        ],
                    },
                ],
            },  # fmt: skip
            {"name": "doc", "type": ["null", sem("io.debezium.data.Json", "string")]},
            {
                "name": "days",
                "type": {"type": "array", "items": sem("io.debezium.time.Date", "int")},
            },  # fmt: skip
        ],
    }
    mapping = semantic_mapping(writer)
    records = [
        mapping.convert({
            "event_date": 19979, "t": 45_296_000_001, "ts": 1_726_238_205_123_456,
            "tz": "2024-09-13T14:36:45.5+02:00", "price": Decimal("12.34"),
            "n": {"scale": 3, "value": (-1500).to_bytes(2, "big", signed=True)},
            "doc": '{"a": [1, {"b": null}]}', "days": [19979, 19980],
        }),
        mapping.convert({"event_date": 0, "t": None, "ts": None, "tz": None, "price": None,
                         "n": None, "doc": None, "days": []}),
    ]  # fmt: skip
    columns = bigquery_schema_from_avro(mapping.schema)
    assert [c["type"] for c in columns] == [
        "DATE", "TIME", "TIMESTAMP", "TIMESTAMP", "NUMERIC", "NUMERIC", "JSON", "DATE",
    ]  # fmt: skip
    table = f"{dataset}.semantic"
    schema = [bigquery.SchemaField.from_api_repr(c) for c in columns]
    _load(bq, stage(mapping.schema, records), table, schema=schema).result(timeout=60)
    _load(bq, stage(mapping.schema, records[:1]), table).result(timeout=60)

    rows = _rows(
        bq,
        f"SELECT event_date, t, ts, tz, price, n, TO_JSON_STRING(doc), ARRAY_LENGTH(days) "
        f"FROM `{table}` ORDER BY event_date DESC, t",
    )
    assert rows[0] == (
        dt.date(2024, 9, 13), dt.time(12, 34, 56, 1),
        dt.datetime(2024, 9, 13, 14, 36, 45, 123456, tzinfo=UTC),
        dt.datetime(2024, 9, 13, 12, 36, 45, 500000, tzinfo=UTC),
        Decimal("12.34"), Decimal("-1.5"), '{"a":[1,{"b":null}]}', 2,
    )  # fmt: skip
    assert len(rows) == 3 and rows[2] == (dt.date(1970, 1, 1), None, None, None, None, None,
                                          None, 0)  # fmt: skip
