"""The emulator's load path behaves like BigQuery where the emulator alone does not: Avro
columns by name, so a file of an older schema loads into a table a newer schema widened
(missing columns NULL); the rows a job appended; and exactly once when a process dies between
the temporary load and the INSERT that carries the recorded job id. Against the real
emulator: these tests cross its process boundary."""

from __future__ import annotations

import io
import uuid
from collections.abc import Iterator
from typing import Any

import fastavro
import pytest
from google.cloud import bigquery, storage

from kbqe_dagster.core.load.lifecycle import ObservedKind, SubmitOutcome
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.resources.bigquery import EmulatorBigQueryLoads, LoadRequest
from kbqe_dagster.resources.bigquery.emulator import TEMP_TABLE_PREFIX
from kbqe_dagster.resources.bigquery.jobs import ROWS_FROM_CREATED_TABLE, ROWS_FROM_DML
from kbqe_dagster_tests.localstack.emulators import bq, bucket, emulator_dataset, emulators  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("emulators")]

DAY = {"name": "_event_date", "type": {"type": "int", "logicalType": "date"}}
V1: dict[str, Any] = {
    "type": "record",
    "name": "Order",
    "namespace": "com.acme.sales",
    "fields": [{"name": "orderId", "type": "string"}, {"name": "amountCents", "type": "long"}, DAY],
}
V2: dict[str, Any] = {
    **V1,
    "fields": [
        *V1["fields"][:2],
        {"name": "coupon", "type": ["null", "string"], "default": None},
        DAY,
    ],
}
V1_REORDERED: dict[str, Any] = {**V1, "fields": [DAY, V1["fields"][1], V1["fields"][0]]}


@pytest.fixture
def dataset(bq: bigquery.Client, bucket: storage.Bucket) -> Iterator[str]:
    with emulator_dataset(bq, bucket, "by_name") as name:
        yield name


@pytest.fixture
def stage(bucket: storage.Bucket, dataset: str):
    def write(
        schema: dict[str, Any],
        records: list[dict[str, Any]] | None = None,
        raw: bytes | None = None,
    ) -> str:
        if raw is None:
            buf = io.BytesIO()
            fastavro.writer(buf, fastavro.parse_schema(schema), records or [], codec="snappy")
            raw = buf.getvalue()
        name = f"{dataset}/{uuid.uuid4().hex[:8]}.avro"
        bucket.blob(name).upload_from_string(raw, if_generation_match=0)
        return f"gs://{LOCAL_BUCKET}/{name}"

    return write


def _orders(*ids: str, coupon: bool = False) -> list[dict[str, Any]]:
    import datetime as dt

    day = dt.date(2026, 11, 24)
    return [
        {
            "orderId": i,
            "amountCents": n,
            "_event_date": day,
            **({"coupon": f"c-{i}"} if coupon else {}),
        }
        for n, i in enumerate(ids, 1)
    ]


def _request(dataset: str, uri: str, schema: dict[str, Any]) -> LoadRequest:
    return LoadRequest(
        f"kbqe_test_{uuid.uuid4().hex}",
        dataset,
        "orders",
        (uri,),
        "_event_date",
        avro_schema=schema,
    )


def _load(loads: EmulatorBigQueryLoads, request: LoadRequest):
    result = loads.submit_load(request)
    assert result.outcome is SubmitOutcome.SUBMITTED, result
    return loads.job_report(request.job_id)


def _rows(bq: bigquery.Client, sql: str) -> list[tuple[Any, ...]]:
    return sorted(tuple(r.values()) for r in bq.query_and_wait(sql))


def _tables(bq: bigquery.Client, dataset: str) -> list[str]:
    return sorted(t.table_id for t in bq.list_tables(dataset))


def test_an_older_schema_file_loads_by_name_into_the_table_a_newer_one_widened(
    bq,
    dataset,
    stage,
) -> None:
    loads = EmulatorBigQueryLoads(bq)
    first = _load(loads, _request(dataset, stage(V1, _orders("a")), V1))
    widened = _load(loads, _request(dataset, stage(V2, _orders("b", coupon=True)), V2))
    lagging = _load(loads, _request(dataset, stage(V1, _orders("c", "d")), V1))

    assert [r.observed.kind for r in (first, widened, lagging)] == [ObservedKind.DONE_OK] * 3
    assert [(r.output_rows, r.rows_source) for r in (first, widened, lagging)] == [
        (1, ROWS_FROM_CREATED_TABLE),
        (1, ROWS_FROM_DML),
        (2, ROWS_FROM_DML),
    ]
    assert _rows(bq, f"SELECT orderId, amountCents, coupon FROM `{dataset}.orders`") == [
        ("a", 1, None),
        ("b", 1, "c-b"),
        ("c", 1, None),
        ("d", 2, None),
    ]
    assert _tables(bq, dataset) == ["orders"], "no temporary table stays behind"


def test_fields_in_another_order_land_in_their_own_columns(bq, dataset, stage) -> None:
    loads = EmulatorBigQueryLoads(bq)
    _load(loads, _request(dataset, stage(V1, _orders("a")), V1))
    _load(loads, _request(dataset, stage(V1_REORDERED, _orders("b", "c")), V1_REORDERED))

    assert _rows(bq, f"SELECT orderId, amountCents FROM `{dataset}.orders`") == [
        ("a", 1),
        ("b", 1),
        ("c", 2),
    ]


def test_another_process_reads_the_rows_of_a_by_name_load(bq, dataset, stage) -> None:
    loads = EmulatorBigQueryLoads(bq)
    _load(loads, _request(dataset, stage(V1, _orders("a")), V1))
    request = _request(dataset, stage(V1, _orders("b", "c", "d")), V1)
    loads.submit_load(request)

    report = EmulatorBigQueryLoads(local_bigquery_client()).job_report(request.job_id)

    assert (report.observed.kind, report.output_rows) == (ObservedKind.DONE_OK, 3)


class _Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs, no except clause catches it."""


def test_a_process_killed_before_the_insert_leaves_its_job_unknown_and_the_retry_loads_once(
    bq,
    dataset,
    stage,
    monkeypatch,
) -> None:
    setup = EmulatorBigQueryLoads(bq)
    _load(setup, _request(dataset, stage(V1, _orders("a")), V1))
    request = _request(dataset, stage(V1, _orders("b", "c")), V1)
    killed = EmulatorBigQueryLoads(local_bigquery_client())
    real_query = killed.client.query

    def query(sql: str, *args: Any, **kwargs: Any):
        if sql.startswith("INSERT"):
            raise _Killed
        return real_query(sql, *args, **kwargs)

    monkeypatch.setattr(killed.client, "query", query)
    with pytest.raises(_Killed):
        killed.submit_load(request)
    assert any(t.startswith(TEMP_TABLE_PREFIX) for t in _tables(bq, dataset)), "died mid-way"

    restarted = EmulatorBigQueryLoads(local_bigquery_client())
    assert restarted.job_report(request.job_id).observed.kind is ObservedKind.UNKNOWN
    report = _load(restarted, request)

    assert report.output_rows == 2
    assert _rows(bq, f"SELECT orderId FROM `{dataset}.orders`") == [("a",), ("b",), ("c",)]
    assert _tables(bq, dataset) == ["orders"]


def test_a_file_the_emulator_cannot_read_is_a_rejected_submission_naming_it(
    bq,
    dataset,
    stage,
) -> None:
    loads = EmulatorBigQueryLoads(bq)
    _load(loads, _request(dataset, stage(V1, _orders("a")), V1))
    request = _request(dataset, stage(V1, raw=b"Obj\x01 this is not an avro container"), V1)

    result = loads.submit_load(request)

    assert result.outcome is SubmitOutcome.REJECTED
    assert result.error and "files refused" in result.error
    assert _tables(bq, dataset) == ["orders"]
    assert _rows(bq, f"SELECT orderId FROM `{dataset}.orders`") == [("a",)]
