"""The completeness domain's definitions: a completeness check per table partition and the
sensor that evaluates them after loads."""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.defs.completeness.checks import completeness_checks
from kbqe_dagster.defs.completeness.sensors import completeness_sensor
from kbqe_dagster.defs.keys import Destinations


def completeness_definitions(config: PipelineConfig, destinations: Destinations) -> dg.Definitions:
    return dg.Definitions(
        asset_checks=completeness_checks(destinations), sensors=[completeness_sensor]
    )
