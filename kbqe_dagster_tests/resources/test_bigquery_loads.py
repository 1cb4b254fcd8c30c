"""The BigQuery load resource: the job configuration of DESIGN.md §4, what a submission's
answer means (409 = already submitted), how a job's state maps to the lifecycle's observed
status. The emulator's own load path is tested against the emulator in
test_emulator_loads.py."""

from __future__ import annotations

from dataclasses import replace
from types import SimpleNamespace

import fastavro
import pytest
from google.api_core import exceptions as gx
from google.auth.exceptions import TransportError

from kbqe_dagster.core.load.lifecycle import ObservedKind, SubmitOutcome
from kbqe_dagster.core.record.partitioning import Partitioning
from kbqe_dagster.resources.bigquery import (
    GoogleBigQueryLoads,
    LoadRequest,
    load_job_config,
)
from kbqe_dagster_tests.loading.fake_bigquery import FakeBigQueryClient
from kbqe_dagster_tests.loading.staged import ORDER_V1

REQUEST = LoadRequest(
    job_id="kbqe_acme_sales_orders_x",
    dataset="acme_sales",
    table="Orders-EU",
    source_uris=("gs://b/s/t.0.acme_sales.orders.11.0.avro",),
    partition_field="_event_date",
)


def test_the_load_job_config_is_the_designed_one() -> None:
    config = load_job_config(REQUEST)

    assert config.source_format == "AVRO"
    assert config.use_avro_logical_types is True
    assert config.write_disposition == "WRITE_APPEND"
    assert config.create_disposition == "CREATE_IF_NEEDED"
    assert (
        config.time_partitioning.type_,
        config.time_partitioning.field,
        config.time_partitioning.expiration_ms,
    ) == ("DAY", "_event_date", None)
    assert config.schema_update_options == ["ALLOW_FIELD_ADDITION", "ALLOW_FIELD_RELAXATION"]
    assert config.labels == {
        "pipeline": "kbqe_dagster",
        "kbqe_dataset": "acme_sales",
        "kbqe_table": "orders-eu",
    }
    assert config.schema is None
    assert config.clustering_fields is None


def test_an_hour_table_is_partitioned_by_hour_on_its_event_hour_column() -> None:
    config = load_job_config(
        replace(
            REQUEST,
            partition_field="_event_hour",
            partitioning=Partitioning.HOUR,
            partition_expiration_days=2,
        )
    )
    assert (
        config.time_partitioning.type_,
        config.time_partitioning.field,
        config.time_partitioning.expiration_ms,
    ) == ("HOUR", "_event_hour", 2 * 86_400_000)


def test_a_keyed_changelog_is_created_clustered_by_partition_and_offset() -> None:
    config = load_job_config(
        replace(REQUEST, clustering_fields=("_kafka_partition", "_kafka_offset"))
    )
    assert config.clustering_fields == ["_kafka_partition", "_kafka_offset"]


def test_partition_expiration_and_a_creating_schema_are_passed_when_given() -> None:
    config = load_job_config(replace(REQUEST, partition_expiration_days=30, avro_schema=ORDER_V1))

    assert config.time_partitioning.expiration_ms == 30 * 86_400_000
    assert [(f.name, f.field_type, f.mode) for f in config.schema] == [
        ("orderId", "STRING", "REQUIRED"),
        ("amountCents", "INTEGER", "REQUIRED"),
    ]


class _Refusing:
    project = "p"

    def __init__(self, error: BaseException) -> None:
        self.error = error

    def load_table_from_uri(self, *args, **kwargs):
        raise self.error


@pytest.mark.parametrize(
    ("error", "outcome"),
    [
        (gx.Conflict("Already Exists: Job p:kbqe_x"), SubmitOutcome.ALREADY_SUBMITTED),
        (gx.ServiceUnavailable("backend"), SubmitOutcome.TRANSIENT),
        (gx.TooManyRequests("rate"), SubmitOutcome.TRANSIENT),
        (gx.InternalServerError("oops"), SubmitOutcome.TRANSIENT),
        (gx.RetryError("deadline exceeded", cause=None), SubmitOutcome.TRANSIENT),
        (TransportError("connection reset"), SubmitOutcome.TRANSIENT),
        (ConnectionError("refused"), SubmitOutcome.TRANSIENT),
        (gx.BadRequest("Invalid schema"), SubmitOutcome.REJECTED),
        (gx.Forbidden("Access Denied"), SubmitOutcome.REJECTED),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, BaseException) else str(v),
)
def test_a_submission_answer_is_classified(error, outcome) -> None:
    result = GoogleBigQueryLoads(_Refusing(error)).submit_load(REQUEST)
    assert result.outcome is outcome


def test_emulator_gap_409_duplicate_job_id_loads_nothing_twice(tmp_path) -> None:
    """BigQuery answers 409 to a second insert of a job id; the resource reports that as
    already submitted (the emulator would run the job again instead)."""
    path = tmp_path / "t.0.acme_sales.orders.11.0.avro"
    with open(path, "wb") as out:
        fastavro.writer(out, fastavro.parse_schema(ORDER_V1), [{"orderId": "a", "amountCents": 1}])
    client = FakeBigQueryClient()
    client.datasets.add("acme_sales")
    loads = GoogleBigQueryLoads(client)
    request = LoadRequest("kbqe_dup", "acme_sales", "orders", (str(path),), "_event_date")

    first, second = loads.submit_load(request), loads.submit_load(request)

    assert (first.outcome, second.outcome) == (
        SubmitOutcome.SUBMITTED,
        SubmitOutcome.ALREADY_SUBMITTED,
    )
    assert (second.status_code, client.tables[("acme_sales", "orders")].num_rows) == (409, 1)


def _job(state: str, error: dict | None = None, rows: int | None = None):
    return SimpleNamespace(
        state=state,
        error_result=error,
        output_rows=rows,
        output_bytes=10,
        input_files=1,
        input_file_bytes=20,
        started=None,
        ended=None,
        _properties={"statistics": {"load": {"badRecords": "0"}}},
    )


class _Jobs:
    project = "p"

    def __init__(self, job) -> None:
        self.job = job

    def get_job(self, job_id, location=None):
        if self.job is None:
            raise gx.NotFound(f"Not found: Job p:{job_id}")
        return self.job


@pytest.mark.parametrize(
    ("job", "kind", "error"),
    [
        (None, ObservedKind.UNKNOWN, None),
        (_job("PENDING"), ObservedKind.PENDING, None),
        (_job("RUNNING"), ObservedKind.RUNNING, None),
        (_job("DONE", rows=5), ObservedKind.DONE_OK, None),
        (
            _job("DONE", {"reason": "invalid", "message": "bad avro", "location": "gs://b/f"}),
            ObservedKind.DONE_ERROR,
            "bad avro (at gs://b/f)",
        ),
    ],
)
def test_a_job_state_maps_to_the_lifecycle_observation(job, kind, error) -> None:
    report = GoogleBigQueryLoads(_Jobs(job)).job_report("kbqe_x")
    assert (report.observed.kind, report.observed.error) == (kind, error)


def test_finished_job_statistics_are_reported() -> None:
    report = GoogleBigQueryLoads(_Jobs(_job("DONE", rows=5))).job_report("kbqe_x")
    assert (
        report.output_rows,
        report.output_bytes,
        report.input_files,
        report.input_file_bytes,
        report.bad_records,
    ) == (5, 10, 1, 20, 0)
