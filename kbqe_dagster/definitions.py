"""The one entry point of kbqe_dagster's Dagster definitions.

Definitions are built when Dagster loads them (``@dg.definitions``), not at import time:
the pipeline file decides which topic assets exist, and the environment (``KBQE_ENV``)
decides the resources — both read once, here.
"""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.core.config import load_pipeline_config
from kbqe_dagster.defs.kafka.assets import topic_specs
from kbqe_dagster.defs.resources import pipeline_config_path, resources_for_environment
from kbqe_dagster.defs.staging.assets import staging_asset
from kbqe_dagster.defs.staging.jobs import stage_job
from kbqe_dagster.defs.staging.sensors import kafka_backlog_sensor, staging_observation_sensor


def build_definitions(config_path: str | None = None, env: str | None = None) -> dg.Definitions:
    config = load_pipeline_config(config_path or pipeline_config_path())
    return dg.Definitions(
        assets=[*topic_specs(config), staging_asset(list(config.topic_names))],
        jobs=[stage_job],
        sensors=[kafka_backlog_sensor, staging_observation_sensor],
        resources=resources_for_environment(env),
    )


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
