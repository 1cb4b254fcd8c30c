"""The erasure domain's definitions, present only when ``erasure`` is enabled: the audit
table's asset and check, the erasure job and the sensor on the requests topic."""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.defs.erasure.assets import erasure_checks, erasure_specs
from kbqe_dagster.defs.erasure.jobs import erasure_job
from kbqe_dagster.defs.erasure.sensors import erasure_request_sensor
from kbqe_dagster.defs.keys import Destinations


def erasure_definitions(config: PipelineConfig, destinations: Destinations) -> dg.Definitions:
    if not config.erasure.enabled:
        return dg.Definitions()
    return dg.Definitions(
        assets=erasure_specs(config),
        asset_checks=erasure_checks(config),
        jobs=[erasure_job],
        sensors=[erasure_request_sensor],
    )
