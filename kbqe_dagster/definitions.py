"""The one entry point of kbqe_dagster's Dagster definitions.

Definitions are built when Dagster loads them (``@dg.definitions``), not at import time:
the pipeline file decides which topic assets exist, and the environment (``KBQE_ENV``)
decides the resources — both read once, here. A pipeline with ``topic_patterns`` also lists
Kafka's topics here, once, so every topic the patterns take has its ``kafka/<topic>`` asset
(core/config/discovery.py; a topic created later gets its asset at the next reload, and is staged
before that by the backlog sensor, which resolves the patterns at every tick).
"""

from __future__ import annotations

import logging
from pathlib import Path

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig, parse_pipeline_text
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.defs.bigquery.assets import bigquery_specs
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
from kbqe_dagster.defs.erasure.assets import erasure_checks, erasure_specs
from kbqe_dagster.defs.erasure.jobs import erasure_job
from kbqe_dagster.defs.erasure.sensors import erasure_request_sensor
from kbqe_dagster.defs.kafka.assets import topic_specs
from kbqe_dagster.defs.keyed.assets import keyed_specs
from kbqe_dagster.defs.keyed.checks import keyed_checks
from kbqe_dagster.defs.keyed.jobs import merge_keyed_tables_job
from kbqe_dagster.defs.keyed.schedules import keyed_schedules
from kbqe_dagster.defs.keys import Destinations
from kbqe_dagster.defs.resources import pipeline_config_path, resources_for_environment
from kbqe_dagster.defs.staging.assets import staging_asset
from kbqe_dagster.defs.staging.jobs import stage_job, stage_loop_job
from kbqe_dagster.defs.staging.sensors import (
    kafka_backlog_sensor,
    stage_loop_sensor,
    staging_observation_sensor,
)
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource
from kbqe_dagster.resources.kafka.clients import KafkaReadError
from kbqe_dagster.resources.kafka.cluster import discover_topics

log = logging.getLogger(__name__)


def build_definitions(config_path: str | None = None, env: str | None = None) -> dg.Definitions:
    # The file is read and parsed once, here; the pipeline resource carries that text, so
    # sensors, ops and checks see the pipeline these definitions were built from.
    path = config_path or pipeline_config_path()
    try:
        content = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{path}: cannot read the pipeline configuration: {error}") from error
    resources = resources_for_environment(env, PipelineResource(config_path=path, content=content))
    config = _discovered(parse_pipeline_text(content, source=path), resources["kafka"])
    if config.topic_patterns:
        # Ops, checks and schedules then see the topics these assets were built from.
        resources["pipeline"] = PipelineResource(
            config_path=path,
            content=content,
            discovered_topics=[t.name for t in config.topics if t.pattern is not None],
        )
    destinations = Destinations.from_config(config)
    duplicate_check_job = duplicate_offsets_check_job(destinations)
    return dg.Definitions(
        assets=[
            *topic_specs(config),
            staging_asset(list(config.topic_names)),
            *bigquery_specs(destinations),
            *keyed_specs(config),
            *erasure_specs(config),
        ],
        asset_checks=[
            load_checks(destinations),
            *keyed_checks(config),
            *completeness_checks(destinations),
            *erasure_checks(config),
        ],
        jobs=[
            stage_job,
            stage_loop_job,
            load_job,
            poll_load_jobs_job,
            done_file_retention_job,
            duplicate_check_job,
            merge_keyed_tables_job,
            *([erasure_job] if config.erasure.enabled else []),
        ],
        schedules=[*load_schedules(config, duplicate_check_job), *keyed_schedules(config)],
        sensors=[
            kafka_backlog_sensor,
            stage_loop_sensor,
            staging_observation_sensor,
            completeness_sensor,
            *([erasure_request_sensor] if config.erasure.enabled else []),
        ],
        resources=resources,
    )


def _discovered(config: PipelineConfig, kafka: KafkaResource) -> PipelineConfig:
    """``config`` with the topics its patterns take in Kafka now. Kafka out of reach must not
    take the whole code location down (loads, checks and schedules do not need it): the
    definitions then hold the listed topics only, with a warning, and the sensor still
    stages every matching topic."""
    if not config.topic_patterns:
        return config
    try:
        # The resource as Dagster would initialize it: dg.EnvVar values resolved.
        return discover_topics(config, kafka.process_config_and_initialize().settings())
    except (KafkaReadError, dg.DagsterError) as error:
        log.warning(
            "%s: topic_patterns not resolved while loading the definitions, so only "
            "listed topics have kafka/<topic> assets until the next reload: %s",
            config.source,
            error,
        )
        return config


@dg.definitions
def defs() -> dg.Definitions:
    return build_definitions()
