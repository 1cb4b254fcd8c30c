"""The Kafka domain's definitions: one external asset per source topic."""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.defs.kafka.assets import topic_specs
from kbqe_dagster.defs.keys import Destinations


def kafka_definitions(config: PipelineConfig, destinations: Destinations) -> dg.Definitions:
    return dg.Definitions(assets=topic_specs(config))
