"""The load side end to end on the real local services: staged avro + done files in a
gs:// staging prefix of fake-gcs-server → Dagster's ``load_job`` → tables in the BigQuery
emulator holding exactly the staged records (count and distinct Kafka positions) on the
right event dates, dead letters in their table, loaded avro files gone, done files pruned by
retention; a coordinator killed with SIGKILL around submission loads nothing twice after a
restart; a table whose loads keep failing is quarantined while the others load. What the
emulator cannot show (409, field addition) is covered in ``test_load_coordinator.py``.
"""

from __future__ import annotations

import io
import multiprocessing
import os
import signal
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import dagster as dg
import fastavro
import pytest
import yaml

from kbqe_dagster.core.config.pipeline import PipelineConfig, load_pipeline_config
from kbqe_dagster.core.load.state import STATE_FILE, JobStatus, decode_state
from kbqe_dagster.core.protocol.commit import plan_range_commit
from kbqe_dagster.core.protocol.naming import AvroFileName, DoneFileName, FileKey, parse_name
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.definitions import build_definitions
from kbqe_dagster.loading.coordinator import LoadCoordinator
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT, local_endpoints
from kbqe_dagster.resources.bigquery import (
    EmulatorBigQueryLoads,
    GoogleBigQueryLoads,
    LoadRequest,
)
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster_tests.loading.staged import ORDER_V1, PAGE_VIEW, Table, record, stage_range
from kbqe_dagster_tests.localstack.emulators import emulators  # noqa: F401 (fixture)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("emulators")]

TOPIC = "com.acme.events"
TODAY = date.today()
DAY1, DAY2 = TODAY - timedelta(days=2), TODAY - timedelta(days=1)


@dataclass(frozen=True)
class Run:
    """One test's own datasets, staging prefix and pipeline file."""

    prefix: str
    config_path: Path
    staging: StagingLocation
    orders: Table
    page_views: Table
    dead: Table

    @property
    def config(self) -> PipelineConfig:
        return load_pipeline_config(self.config_path)

    def rows(self, table: Table, where: str = "") -> list[tuple]:
        columns = (
            "`partition`, `offset`" if table is self.dead else "_kafka_partition, _kafka_offset"
        )
        sql = f"SELECT {columns} FROM `{table.dataset}.{table.table}` {where}"
        return [tuple(r.values()) for r in local_bigquery_client().query_and_wait(sql)]

    def per_day(self, table: Table) -> dict[str, int]:
        sql = (
            f"SELECT _event_date, COUNT(*) FROM `{table.dataset}.{table.table}` "
            "GROUP BY _event_date"
        )
        return {r[0].isoformat(): r[1] for r in local_bigquery_client().query_and_wait(sql)}

    def staged(self) -> tuple[set[str], set[str]]:
        names = [f.name for f in self.staging.open().list()]
        return (
            {n for n in names if isinstance(parse_name(n), AvroFileName)},
            {n for n in names if isinstance(parse_name(n), DoneFileName)},
        )


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Run]:
    prefix = f"it{uuid.uuid4().hex[:8]}"
    config = {
        "version": 1,
        "topics": [{"name": TOPIC, "event_time": {"fields": ["eventTime"]}}],
        "allowed_destinations": [f"{prefix}_sales.*", f"{prefix}_web.page_views"],
        "dead_letter": {"dataset": f"{prefix}_dead", "table": "dead_letters"},
        "load": {"max_retries": 1},
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config))
    staging = StagingLocation(
        f"gs://{LOCAL_BUCKET}/{prefix}", local_endpoints().gcs_url, LOCAL_PROJECT
    )
    monkeypatch.setenv("KBQE_PIPELINE_CONFIG", str(path))
    monkeypatch.setenv("KBQE_STAGING_URL", staging.url)
    yield Run(
        prefix,
        path,
        staging,
        Table(f"{prefix}_sales", "orders", 11, ORDER_V1),
        Table(f"{prefix}_web", "page_views", 21, PAGE_VIEW),
        Table(f"{prefix}_dead", "dead_letters", 0, {}),
    )
    client = local_bigquery_client()
    for dataset in ("sales", "web", "dead"):
        client.delete_dataset(f"{prefix}_{dataset}", delete_contents=True, not_found_ok=True)
    store = staging.open()
    for stored in store.list("_kbqe/") + store.list():
        store.delete(stored.name)


def stage_demo(run: Run) -> None:
    """Partition 0: 0..19 (8 orders day 1, 8 page views day 2, 2 dead letters, 2 gaps) and
    20..29 (10 orders day 2); partition 1: 0..9 (10 page views day 1)."""
    store = run.staging.open()
    stage_range(
        store,
        TOPIC,
        0,
        0,
        19,
        [(run.orders, 8, DAY1), (run.page_views, 8, DAY2), (run.dead, 2, DAY2)],
    )
    stage_range(store, TOPIC, 0, 20, 29, [(run.orders, 10, DAY2)])
    stage_range(store, TOPIC, 1, 0, 9, [(run.page_views, 10, DAY1)])


EXPECTED_ORDERS = [(0, o) for o in range(8)] + [(0, o) for o in range(20, 30)]
EXPECTED_PAGE_VIEWS = [(0, o) for o in range(8, 16)] + [(1, o) for o in range(10)]


def _check_status(instance: dg.DagsterInstance, key: list[str], name: str):
    check = dg.AssetCheckKey(dg.AssetKey(key), name)
    (latest,) = instance.event_log_storage.get_asset_check_execution_history(check, limit=1)
    return latest.status


def test_staged_files_land_exactly_once_in_the_emulator_tables_via_dagster(run: Run) -> None:
    stage_demo(run)
    _, done_before = run.staged()
    defs = build_definitions(str(run.config_path), env="local")
    instance = dg.DagsterInstance.ephemeral()

    result = defs.resolve_job_def("load_job").execute_in_process(instance=instance)

    assert result.success
    assert sorted(run.rows(run.orders)) == EXPECTED_ORDERS
    assert sorted(run.rows(run.page_views)) == EXPECTED_PAGE_VIEWS
    assert sorted(run.rows(run.dead)) == [(0, 16), (0, 17)]
    assert run.per_day(run.orders) == {DAY1.isoformat(): 8, DAY2.isoformat(): 10}
    assert run.per_day(run.page_views) == {DAY1.isoformat(): 10, DAY2.isoformat(): 8}
    avro, done = run.staged()
    assert avro == set() and done == done_before, "loaded avro files gone, done files kept"

    sales = dg.AssetKey(["bigquery", f"{run.prefix}_sales"])
    materialized = instance.fetch_materializations(sales, limit=10).records
    assert sorted(
        (str(r.partition_key), r.asset_materialization.metadata["dagster/row_count"].value)
        for r in materialized
    ) == [(f"{DAY1.isoformat()}|orders", 8), (f"{DAY2.isoformat()}|orders", 10)]
    web = dg.AssetKey(["bigquery", f"{run.prefix}_web", "page_views"])
    assert instance.get_materialized_partitions(web) == {DAY1.isoformat(), DAY2.isoformat()}
    for key in (sales.path, web.path, ["bigquery", f"{run.prefix}_dead", "dead_letters"]):
        assert _check_status(instance, key, "rows_loaded").value == "SUCCEEDED", key
    assert _check_status(instance, ["staging"], "pending_files_fresh").value == "SUCCEEDED"

    again = defs.resolve_job_def("load_job").execute_in_process(instance=instance)
    retention = defs.resolve_job_def("done_file_retention_job").execute_in_process(
        instance=instance
    )

    assert again.success and retention.success
    assert len(run.rows(run.orders)) == 18, "a second cycle loads nothing again"
    _, done = run.staged()
    assert {(parse_name(n).key.partition, parse_name(n).first_offset) for n in done} == {
        (0, 20),
        (1, 0),
    }, "retention keeps only the newest range of each partition"


def test_the_opt_in_duplicate_offset_check_finds_a_row_loaded_twice(run: Run) -> None:
    stage_demo(run)
    defs = build_definitions(str(run.config_path), env="local")
    instance = dg.DagsterInstance.ephemeral()
    assert defs.resolve_job_def("load_job").execute_in_process(instance=instance).success
    check_job = defs.resolve_job_def("duplicate_offsets_check_job")

    clean = check_job.execute_in_process(instance=instance, raise_on_error=False)
    _load_one_more_copy_of_offset_0(run)
    dirty = check_job.execute_in_process(instance=instance, raise_on_error=False)

    def outcomes(result) -> dict[str, bool]:
        return {
            e.asset_key.to_user_string(): e.passed for e in result.get_asset_check_evaluations()
        }

    assert set(outcomes(clean).values()) == {True}
    assert outcomes(dirty)[f"bigquery/{run.prefix}_sales"] is False
    (failed,) = [e for e in dirty.get_asset_check_evaluations() if not e.passed]
    assert failed.metadata["duplicate_offsets_sample"].value == [
        {
            "table": f"{run.prefix}_sales.orders",
            "topic": TOPIC,
            "partition": 0,
            "offset": 0,
            "copies": 2,
        }
    ]


def _load_one_more_copy_of_offset_0(run: Run) -> None:
    buffer = io.BytesIO()
    fastavro.writer(
        buffer,
        fastavro.parse_schema(run.orders.file_schema),
        [record(run.orders, TOPIC, 0, 0, DAY1)],
    )
    store = run.staging.open()
    store.put_bytes("_kbqe/test-extra-copy.avro", buffer.getvalue())
    loads = GoogleBigQueryLoads(local_bigquery_client())
    loads.submit_load(
        LoadRequest(
            f"test_copy_{uuid.uuid4().hex}",
            run.orders.dataset,
            run.orders.table,
            (store.uri("_kbqe/test-extra-copy.avro"),),
            "_event_date",
        )
    )


def test_a_table_whose_loads_keep_failing_is_quarantined_while_the_others_load(run: Run) -> None:
    stage_demo(run)
    store = run.staging.open()
    defs = build_definitions(str(run.config_path), env="local")
    instance = dg.DagsterInstance.ephemeral()
    assert defs.resolve_job_def("load_job").execute_in_process(instance=instance).success
    corrupt = AvroFileName(FileKey(TOPIC, 0, run.orders.dataset, "orders", 11, 30))
    store.put_bytes(corrupt.name, b"this is not an avro file")
    commit = plan_range_commit(
        OffsetRange(TOPIC, 0, 30, 35), [(corrupt, 5)], created_at=datetime.now(UTC)
    )
    store.create_only(commit.done_files[0].name, commit.content)
    stage_range(store, TOPIC, 1, 10, 14, [(run.page_views, 5, DAY2)])

    result = defs.resolve_job_def("load_job").execute_in_process(instance=instance)

    assert result.success, "a failing table does not fail the run"
    assert len(run.rows(run.page_views)) == 23 and len(run.rows(run.orders)) == 18
    state = decode_state(store.read_bytes(STATE_FILE))
    (bad,) = [j for j in state.jobs if j.status is JobStatus.QUARANTINED]
    assert (bad.files, len(bad.attempt_ids)) == ((corrupt.name,), 2)
    assert "magic" in (bad.last_error or "").lower()
    assert corrupt.name in run.staged()[0], "the quarantined file stays for an operator"
    sales = ["bigquery", f"{run.prefix}_sales"]
    assert _check_status(instance, sales, "no_quarantined_files").value == "FAILED"


def _kill_around_submit(location: StagingLocation, config_path: str, when: str) -> None:
    """Child process: a load cycle that SIGKILLs itself just before or just after BigQuery
    receives its first load job."""
    loads = EmulatorBigQueryLoads(local_bigquery_client())
    real = loads.submit_load

    def submit(request):
        if when == "after_submit":
            real(request)
        os.kill(os.getpid(), signal.SIGKILL)

    loads.submit_load = submit  # type: ignore[method-assign]
    LoadCoordinator(location.open(), loads, load_pipeline_config(config_path)).run_cycle()


@pytest.mark.parametrize("when", ["before_submit", "after_submit"])
def test_a_coordinator_killed_around_submission_loads_nothing_twice_after_restart(
    run: Run, when: str
) -> None:
    stage_demo(run)
    child = multiprocessing.get_context("spawn").Process(
        target=_kill_around_submit, args=(run.staging, str(run.config_path), when)
    )
    child.start()
    child.join(120)
    assert child.exitcode == -signal.SIGKILL
    store = run.staging.open()
    jobs = decode_state(store.read_bytes(STATE_FILE)).jobs
    assert [j.status for j in jobs] == [JobStatus.PLANNED] * 3, "all recorded before submitting"
    recorded = jobs[0]  # the one BigQuery received (after_submit) or was about to

    loads = EmulatorBigQueryLoads(local_bigquery_client())
    report = LoadCoordinator(store, loads, run.config).run_cycle()

    others = [j.job_id for j in jobs[1:]]
    assert report.resubmitted == ([recorded.job_id] if when == "before_submit" else []) + others
    assert recorded.table == "dead_letters", "the first job in plan order"
    assert sorted(run.rows(run.dead)) == [(0, 16), (0, 17)], "the killed job's rows, once"
    assert sorted(run.rows(run.orders)) == EXPECTED_ORDERS
    assert sorted(run.rows(run.page_views)) == EXPECTED_PAGE_VIEWS
    assert run.staged()[0] == set()
    finished = {c.job.job_id: c.rows_check for c in report.completed}
    if when == "after_submit":
        # Emulator gap: the killed process measured nothing, so the figure is unavailable
        # (not guessed) for the job it submitted; the others are measured.
        assert finished[recorded.job_id].passed is None
    assert all(c.passed for j, c in finished.items() if j != recorded.job_id)
