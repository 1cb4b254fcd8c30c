"""The staging domain's definitions: the staging area asset, the stage and stage-loop jobs, and
the sensors that launch stage runs and observe the staging area."""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.defs.keys import Destinations
from kbqe_dagster.defs.staging.assets import staging_asset
from kbqe_dagster.defs.staging.jobs import stage_job, stage_loop_job
from kbqe_dagster.defs.staging.sensors import (
    kafka_backlog_sensor,
    stage_loop_sensor,
    staging_observation_sensor,
)


def staging_definitions(config: PipelineConfig, destinations: Destinations) -> dg.Definitions:
    return dg.Definitions(
        assets=[staging_asset(list(config.topic_names))],
        jobs=[stage_job, stage_loop_job],
        sensors=[kafka_backlog_sensor, stage_loop_sensor, staging_observation_sensor],
    )
