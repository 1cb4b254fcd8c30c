"""The keyed domain's definitions: current-state and history assets with their checks, the
merge job and its schedules (assets, checks and schedules only where a topic is keyed)."""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.defs.keyed.assets import keyed_specs
from kbqe_dagster.defs.keyed.checks import keyed_checks
from kbqe_dagster.defs.keyed.jobs import merge_keyed_tables_job
from kbqe_dagster.defs.keyed.schedules import keyed_schedules
from kbqe_dagster.defs.keys import Destinations


def keyed_definitions(config: PipelineConfig, destinations: Destinations) -> dg.Definitions:
    # The merge job is always there: `kbqe run` and the UI name it whether or not a topic is
    # keyed, and with none it merges nothing.
    return dg.Definitions(
        assets=keyed_specs(config),
        asset_checks=keyed_checks(config),
        jobs=[merge_keyed_tables_job],
        schedules=keyed_schedules(config),
    )
