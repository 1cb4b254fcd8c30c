"""The one entry point of kbqe_dagster's Dagster definitions.

Definitions are built when Dagster loads them (``@dg.definitions``), not at import time:
the pipeline file decides which topic assets exist, and the environment (``KBQE_ENV``)
decides the resources — both read once, here.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from kbqe_dagster.core.config import parse_pipeline_text
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.defs.bigquery.assets import Destinations, bigquery_specs
from kbqe_dagster.defs.bigquery.checks import load_checks
from kbqe_dagster.defs.bigquery.jobs import (
    done_file_retention_job,
    duplicate_offsets_check_job,
    load_job,
    poll_load_jobs_job,
)
from kbqe_dagster.defs.bigquery.schedules import load_schedules
from kbqe_dagster.defs.completeness.checks import completeness_checks
from kbqe_dagster.defs.completeness.sensors import completeness_sensor
from kbqe_dagster.defs.kafka.assets import topic_specs
from kbqe_dagster.defs.keyed.assets import keyed_specs
from kbqe_dagster.defs.keyed.checks import keyed_checks
from kbqe_dagster.defs.keyed.jobs import merge_keyed_tables_job
from kbqe_dagster.defs.keyed.schedules import keyed_schedules
from kbqe_dagster.defs.resources import pipeline_config_path, resources_for_environment
from kbqe_dagster.defs.staging.assets import staging_asset
from kbqe_dagster.defs.staging.jobs import stage_job
from kbqe_dagster.defs.staging.sensors import kafka_backlog_sensor, staging_observation_sensor
from kbqe_dagster.resources.configurable import PipelineResource


def build_definitions(config_path: str | None = None, env: str | None = None) -> dg.Definitions:
    # The file is read and parsed once, here; the pipeline resource carries that text, so
    # sensors, ops and checks see the pipeline these definitions were built from.
    path = config_path or pipeline_config_path()
    try:
        content = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the pipeline configuration: {error}") from error
    config = parse_pipeline_text(content, source=path)
    destinations = Destinations.from_config(config)
    duplicate_check_job = duplicate_offsets_check_job(destinations)
    return dg.Definitions(
        assets=[
            *topic_specs(config),
            staging_asset(list(config.topic_names)),
            *bigquery_specs(destinations),
            *keyed_specs(config),
        ],
        asset_checks=[load_checks(destinations), *keyed_checks(config),
                      *completeness_checks(destinations)],
        jobs=[stage_job, load_job, poll_load_jobs_job, done_file_retention_job, duplicate_check_job,
              merge_keyed_tables_job],
        schedules=[*load_schedules(config, duplicate_check_job), *keyed_schedules(config)],
        sensors=[kafka_backlog_sensor, staging_observation_sensor, completeness_sensor],
        resources=resources_for_environment(
            env, PipelineResource(config_path=path, content=content)),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
