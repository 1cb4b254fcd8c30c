"""Asset checks of the load side (DESIGN.md §4).

On every destination asset:
- ``rows_loaded``: rows each load job wrote (BigQuery's job statistics, free) == records in
  its files (done-file manifests). Evaluated by the load op as jobs finish; run on its own
  it re-reads the statistics of each table's latest finished job. Emulator gap: there the
  figure is a before/after row count measured by the process that submitted the job (see
  ``resources/bigquery/google_client.py``); a job finished by another process is reported as unverifiable
  (WARN), never as passed.
- ``no_quarantined_files``: fails while a table has files whose load failed too often.
- ``no_duplicate_offsets`` (**opt-in**, a query billed for the key columns it scans, capped
  by the resource's ``max_bytes_billed``): no (topic, partition, offset) twice in the last
  ``DUPLICATE_WINDOW_DAYS`` day partitions. Never run by the load; run it from the UI or
  enable ``duplicate_offsets_schedule``. The same query on a ``delivery: storage_write``
  table (its rows carry the same Kafka columns).

On ``staging``: ``pending_files_fresh``: the oldest avro file still waiting for a load is
younger than ``FRESHNESS_CADENCES`` load cadences. Evaluated at the end of every load cycle.
"""

# No ``from __future__ import annotations`` here: dagster validates the ``context``
# annotation of a check function as a class and cannot resolve it from a string.
from collections.abc import Iterator
from datetime import UTC, date, datetime, timedelta
from functools import cache

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.load.checks import (
    NO_QUARANTINED_FILES,
    PENDING_FILES_FRESH,
    ROWS_LOADED,
    JobRows,
    no_quarantined_files,
    pending_files_fresh,
    rows_loaded,
)
from kbqe_dagster.core.load.pending import freshness_limit_s, staging_view
from kbqe_dagster.core.load.state import JobStatus, LoadState
from kbqe_dagster.core.record.partitioning import Partitioning
from kbqe_dagster.defs.keys import STAGING_KEY, Destinations, tables_partitions_name
from kbqe_dagster.defs.verdicts import verdict_result
from kbqe_dagster.loading.state_file import StateFile
from kbqe_dagster.resources.bigquery import BigQueryLoads, BigQueryResource
from kbqe_dagster.resources.configurable import PipelineResource, StagingResource
from kbqe_dagster.resources.staging_store import StagingStore

NO_DUPLICATE_OFFSETS = "no_duplicate_offsets"
DUPLICATE_WINDOW_DAYS = 7
CHECKS_OP = "bigquery_load_checks"


def check_specs(destinations: Destinations) -> list[dg.AssetCheckSpec]:
    specs = [
        dg.AssetCheckSpec(
            PENDING_FILES_FRESH,
            asset=STAGING_KEY,
            description="The oldest staged avro file is loaded in time.",
        )
    ]
    for key in destinations.asset_keys:
        specs += [
            dg.AssetCheckSpec(
                ROWS_LOADED,
                asset=key,
                description="Rows each load job wrote == records in its files.",
            ),
            dg.AssetCheckSpec(
                NO_QUARANTINED_FILES,
                asset=key,
                description="No staged file of this table is quarantined.",
            ),
            dg.AssetCheckSpec(
                NO_DUPLICATE_OFFSETS,
                asset=key,
                description=(
                    f"Opt-in query: no Kafka offset twice in the last {DUPLICATE_WINDOW_DAYS} days "
                    "(billed for the key columns it scans)."
                ),
            ),
        ]
    return specs


def duplicate_check_keys(destinations: Destinations) -> list[dg.AssetCheckKey]:
    return [dg.AssetCheckKey(k, NO_DUPLICATE_OFFSETS) for k in destinations.asset_keys]


def load_checks(destinations: Destinations) -> dg.AssetChecksDefinition:
    """The checks above, runnable on their own (UI, schedule); the load op evaluates the
    first two and freshness as it goes."""

    @dg.multi_asset_check(specs=check_specs(destinations), can_subset=True, name=CHECKS_OP)
    def bigquery_load_checks(
        context: dg.AssetCheckExecutionContext,
        pipeline: PipelineResource,
        staging: StagingResource,
        bigquery: BigQueryResource,
    ) -> Iterator[dg.AssetCheckResult]:
        config = pipeline.load()
        store = staging.store()
        # Built by the first check that asks BigQuery, once. A stage run evaluates the staging
        # check alone (stage_job selects the staging asset, and so its check), and building
        # the client there imported google-cloud-bigquery, and with it pandas, into the stage
        # run: ~90 MB (issue 42).
        loads = cache(bigquery.loads)
        state = StateFile(store).read()
        for check in sorted(context.selected_asset_check_keys, key=lambda k: k.to_user_string()):
            if check.asset_key == STAGING_KEY:
                yield _freshness_result(store, state, freshness_limit_s(config.load.cadence))
                continue
            tables = _tables_of(check.asset_key, destinations, state, context.instance)
            if check.name == NO_DUPLICATE_OFFSETS:
                yield duplicate_offsets_result(
                    check.asset_key,
                    tables,
                    loads(),
                    config,
                    date.today() - timedelta(days=DUPLICATE_WINDOW_DAYS),
                )
            elif check.name == NO_QUARANTINED_FILES:
                errors = {
                    f"{q.dataset}.{q.table}": q.error
                    for q in state.quarantined
                    if (q.dataset, q.table) in tables
                }
                yield verdict_result(check.asset_key, no_quarantined_files(errors, errors))
            else:
                yield _latest_rows_result(check.asset_key, tables, state, loads())

    return bigquery_load_checks


def _tables_of(
    key: dg.AssetKey, destinations: Destinations, state: LoadState, instance: dg.DagsterInstance
) -> set[tuple[str, str]]:
    """The tables behind an asset: one, or every loaded or appended table of a wildcard
    dataset."""
    if len(key.path) == 3:
        return {(key.path[1], key.path[2])}
    dataset = key.path[1]
    tables = {
        (dataset, t) for t in instance.get_dynamic_partitions(tables_partitions_name(dataset))
    }
    tables |= {
        j.table_id
        for j in state.jobs
        if destinations.is_wildcard(*j.table_id) and j.dataset == dataset
    }
    # A table appended through the Storage Write API has no load job: the stage run's
    # materializations name it (table × time keys print as "<time>|<table>": dimensions in
    # name order, "table" after "date", "hour" and "month", before "year"; an unpartitioned
    # dataset's keys are its tables).
    table_first = destinations.time_dimension(dataset) > "table"
    tables |= {
        (dataset, parts[0] if table_first or len(parts) == 1 else parts[-1])
        for k in instance.get_materialized_partitions(key)
        for parts in [str(k).split("|")]
        if len(parts) == 2 or destinations.time_partitions(dataset, "*") is None
    }
    return tables


def duplicate_offsets_result(
    key: dg.AssetKey,
    tables: set[tuple[str, str]],
    loads: BigQueryLoads,
    config: PipelineConfig,
    since: date,
) -> dg.AssetCheckResult:
    """The duplicate-offset query over ``tables`` for the day partitions since ``since``."""
    found, billed, samples = 0, 0, []
    for dataset, table in sorted(tables):
        layout = config.table_layout(dataset, table)
        # The event date (hour) column: the partition column kbqe chose, so the query is
        # pruned; a table partitioned on a partition_column (or not at all) is read whole.
        columns, day_column = layout.offset_columns, layout.time_column
        # An HOUR table's event hour is a TIMESTAMP.
        hourly = layout.partitioning is Partitioning.HOUR
        if loads.table_row_count(dataset, table) is None:
            continue  # not created yet: nothing can be duplicated
        if hourly:
            result = loads.duplicate_offsets(
                dataset, table, columns, day_column, since, timestamp_column=True
            )
        else:
            result = loads.duplicate_offsets(dataset, table, columns, day_column, since)
        found += len(result.duplicates)
        billed += result.bytes_processed or 0
        samples += [
            {"table": f"{dataset}.{table}", "topic": t, "partition": p, "offset": o, "copies": n}
            for t, p, o, n in result.duplicates
        ]
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=NO_DUPLICATE_OFFSETS,
        passed=found == 0,
        description=f"partitions since {since.isoformat()} of {len(tables)} table(s)",
        metadata={
            "duplicate_offsets_sample": dg.MetadataValue.json(samples[:20]),
            "bytes_processed": billed,
            "since": since.isoformat(),
        },
    )


def _latest_rows_result(
    key: dg.AssetKey, tables: set[tuple[str, str]], state: LoadState, loads: BigQueryLoads
) -> dg.AssetCheckResult:
    """rows_loaded of the latest succeeded job of each table (its statistics are free)."""
    latest = {}
    for job in state.jobs:
        if job.status is JobStatus.SUCCEEDED and job.table_id in tables:
            if job.table_id not in latest or job.updated_at > latest[job.table_id].updated_at:
                latest[job.table_id] = job
    jobs = []
    for job in latest.values():
        stats = loads.job_report(job.job_id)
        jobs.append(
            JobRows(
                job.job_id,
                f"{job.dataset}.{job.table}",
                job.records,
                stats.output_rows,
                stats.rows_source,
            )
        )
    return verdict_result(key, rows_loaded(jobs))


def _freshness_result(store: StagingStore, state: LoadState, limit_s: float) -> dg.AssetCheckResult:
    view = staging_view(store.list(), state, datetime.now(UTC))
    verdict = pending_files_fresh(view.oldest_pending_age_s or 0.0, view.waiting_files, limit_s)
    return verdict_result(STAGING_KEY, verdict)
