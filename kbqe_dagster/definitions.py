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
from collections.abc import Callable
from pathlib import Path

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig, parse_pipeline_text
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.defs.bigquery.definitions import bigquery_definitions
from kbqe_dagster.defs.completeness.definitions import completeness_definitions
from kbqe_dagster.defs.erasure.definitions import erasure_definitions
from kbqe_dagster.defs.kafka.definitions import kafka_definitions
from kbqe_dagster.defs.keyed.definitions import keyed_definitions
from kbqe_dagster.defs.keys import Destinations
from kbqe_dagster.defs.resources import pipeline_config_path, resources_for_environment
from kbqe_dagster.defs.staging.definitions import staging_definitions
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource
from kbqe_dagster.resources.kafka.clients import KafkaReadError
from kbqe_dagster.resources.kafka.cluster import discover_topics

log = logging.getLogger(__name__)

DomainDefinitions = Callable[[PipelineConfig, Destinations], dg.Definitions]
"""A domain of ``defs/`` (``defs/<domain>/definitions.py``): its assets, checks, jobs, schedules
and sensors for one pipeline, with the conditions on the pipeline (keyed topics, erasure) its
own. A new domain is one such function and one line of :data:`DOMAINS`."""

DOMAINS: tuple[DomainDefinitions, ...] = (
    kafka_definitions,
    staging_definitions,
    bigquery_definitions,
    keyed_definitions,
    completeness_definitions,
    erasure_definitions,
)


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
    return dg.Definitions.merge(
        *(domain(config, destinations) for domain in DOMAINS),
        dg.Definitions(resources=resources),
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
