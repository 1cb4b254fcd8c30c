"""Jobs of the load side.

- ``load_job``: one load cycle (poll recorded jobs, plan, record, submit, poll again); reports
  a materialization per (table, day partition) and the load-time checks.
- ``poll_load_jobs_job``: only follows recorded jobs (resubmit unknown ids, finish, retry,
  quarantine), between cycles.
- ``done_file_retention_job``: deletes done files retention allows.
- ``duplicate_offsets_check_job``: the opt-in duplicate-offset query (built per destinations).

The two ops that touch the load state run in the pool ``bigquery_load``, which the instance
limits to one slot (``dagster.yaml``): a single coordinator at a time, enforced by Dagster.
"""

# No ``from __future__ import annotations`` here: dagster's @op reads the run-config class
# from the ``config`` parameter's annotation and cannot resolve it from a string.
from collections.abc import Iterator
from datetime import timedelta

import dagster as dg
from pydantic import Field

from kbqe_dagster.core.load.pending import freshness_limit_s
from kbqe_dagster.defs.bigquery.checks import duplicate_check_keys
from kbqe_dagster.defs.bigquery.events import load_events, notice_events
from kbqe_dagster.defs.keys import STAGING_KEY, Destinations
from kbqe_dagster.loading.coordinator import DEFAULT_STUCK_AFTER, LoadCoordinator
from kbqe_dagster.loading.retention_deletes import apply_retention
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.configurable import PipelineResource, StagingResource
from kbqe_dagster.resources.webhook import post_notices

LOAD_POOL = "bigquery_load"


class LoadRunConfig(dg.Config):
    stuck_after_minutes: int = Field(
        default=int(DEFAULT_STUCK_AFTER.total_seconds() // 60),
        description="A job pending longer than this is reported to operators (never resubmitted).",
    )


def _coordinator(
    config: LoadRunConfig,
    pipeline: PipelineResource,
    staging: StagingResource,
    bigquery: BigQueryResource,
) -> tuple[LoadCoordinator, Destinations]:
    pipeline_config = pipeline.load()
    coordinator = LoadCoordinator(
        staging.store(),
        bigquery.loads(),
        pipeline_config,
        stuck_after=timedelta(minutes=config.stuck_after_minutes),
    )
    return coordinator, Destinations.from_config(pipeline_config)


@dg.op(pool=LOAD_POOL, out={}, tags={"kbqe/step": "load"})
def load_cycle(
    context: dg.OpExecutionContext,
    config: LoadRunConfig,
    pipeline: PipelineResource,
    staging: StagingResource,
    bigquery: BigQueryResource,
) -> Iterator[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    """Load staged avro files into BigQuery with free batch load jobs, exactly once."""
    coordinator, destinations = _coordinator(config, pipeline, staging, bigquery)
    report = coordinator.run_cycle()
    context.log.info("load cycle: %s", report.summary())
    yield from load_events(
        report,
        destinations,
        context.instance,
        freshness_limit_s=freshness_limit_s(coordinator.config.load.cadence),
        log=context.log,
    )
    yield from _notices(report, destinations, coordinator)
    if report.leftovers_deleted:
        # Each one is also logged by name; the observation feeds the leftovers metric.
        yield dg.AssetObservation(
            asset_key=STAGING_KEY,
            metadata={
                "leftovers_deleted": len(report.leftovers_deleted),
                "leftover_files": dg.MetadataValue.json(report.leftovers_deleted),
            },
        )


@dg.op(pool=LOAD_POOL, out={}, tags={"kbqe/step": "poll"})
def poll_load_jobs(
    context: dg.OpExecutionContext,
    config: LoadRunConfig,
    pipeline: PipelineResource,
    staging: StagingResource,
    bigquery: BigQueryResource,
) -> Iterator[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    """Follow the recorded load jobs: resubmit unknown ids, finish, retry or quarantine."""
    coordinator, destinations = _coordinator(config, pipeline, staging, bigquery)
    report = coordinator.poll()
    context.log.info("poll: %s", report.summary())
    yield from load_events(report, destinations, context.instance, log=context.log)
    yield from _notices(report, destinations, coordinator)


def _notices(
    report, destinations: Destinations, coordinator: LoadCoordinator
) -> Iterator[dg.AssetObservation]:
    """Schema and table notices as observations of the table's asset, then to the webhook
    (after the run's work is saved: a notice never holds a load back)."""
    yield from notice_events(report.notices, destinations)
    post_notices(coordinator.config.notifications, report.notices)


@dg.op(out={}, tags={"kbqe/step": "retention"})
def done_file_retention(
    context: dg.OpExecutionContext, staging: StagingResource
) -> Iterator[dg.AssetObservation]:
    """Delete done files whose avro file is loaded and that a later range supersedes."""
    result = apply_retention(staging.store())
    if result.failed:
        context.log.warning("retention stopped at %s: %s", result.failed, result.error)
    yield dg.AssetObservation(
        asset_key=STAGING_KEY,
        metadata={
            "done_files_deleted": len(result.deleted),
            "done_files_kept": result.kept,
            "kept_by_reason": dg.MetadataValue.json(result.kept_by_reason),
            "retention_stopped_at": result.failed or "",
        },
    )


@dg.job(description="One load cycle: plan, record, submit and follow BigQuery load jobs.")
def load_job() -> None:
    load_cycle()


@dg.job(description="Follow recorded BigQuery load jobs between load cycles.")
def poll_load_jobs_job() -> None:
    poll_load_jobs()


@dg.job(description="Delete done files that retention allows (never the newest per partition).")
def done_file_retention_job() -> None:
    done_file_retention()


def duplicate_offsets_check_job(
    destinations: Destinations,
) -> dg.JobDefinition:  # an unresolved asset job, resolved by Definitions
    return dg.define_asset_job(
        "duplicate_offsets_check_job",
        selection=dg.AssetSelection.checks(*duplicate_check_keys(destinations)),
        description="Opt-in: query recent partitions for duplicate Kafka offsets (billed bytes).",
    )
