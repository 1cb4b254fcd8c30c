"""The load domain's definitions: a table asset per destination with its checks, the load,
poll, retention and duplicate-offsets jobs, and their schedules."""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.defs.bigquery.assets import bigquery_specs
from kbqe_dagster.defs.bigquery.checks import load_checks
from kbqe_dagster.defs.bigquery.jobs import (
    done_file_retention_job,
    duplicate_offsets_check_job,
    load_job,
    poll_load_jobs_job,
)
from kbqe_dagster.defs.bigquery.schedules import load_schedules
from kbqe_dagster.defs.keys import Destinations


def bigquery_definitions(config: PipelineConfig, destinations: Destinations) -> dg.Definitions:
    duplicate_check_job = duplicate_offsets_check_job(destinations)
    return dg.Definitions(
        assets=bigquery_specs(destinations),
        asset_checks=[load_checks(destinations)],
        jobs=[load_job, poll_load_jobs_job, done_file_retention_job, duplicate_check_job],
        schedules=load_schedules(config, duplicate_check_job),
    )
