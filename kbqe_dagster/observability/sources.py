"""Where the exporter reads from: the connections of the current environment's Dagster
resources, the pipeline file and the Dagster instance.

The resources are the ones ``defs/resources.py`` chooses from ``KBQE_ENV`` — the exporter
watches exactly the Kafka, registry, staging area and BigQuery the runs use, configured by
the same environment variables. ``dg.EnvVar`` values are resolved here, once, outside any
Dagster run; they stay in memory and only :meth:`ExporterSources.redactor` ever looks at the
secret ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.observability.redact import Redactor, secret_settings
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation


@dataclass(frozen=True)
class ExporterSources:
    """Everything the collectors and health checks connect to."""

    staging: StagingLocation
    kafka: KafkaSettings
    registry: RegistrySettings
    pipeline: PipelineConfig
    bigquery: BigQueryResource | None = None
    """``None``: BigQuery is not checked (a staging-only deployment, unit tests)."""
    dagster_home: str | None = None
    """The Dagster instance whose event log holds stage and load materializations; ``None``
    disables the event-log metrics (reported as ``kbqe_exporter_source_up{source="dagster"} 0``)."""

    def redactor(self) -> Redactor:
        return Redactor.of(
            [
                *secret_settings(self.kafka.client_config),
                *secret_settings(dict(self.registry.client_properties)),
                self.registry.basic_auth_user_info,
            ]
        )

    def __repr__(self) -> str:  # short, and only through the settings' own redacting reprs
        return (
            f"ExporterSources(staging={self.staging.url!r}, kafka={self.kafka!r}, "
            f"registry={self.registry!r}, dagster_home={self.dagster_home!r})"
        )


def sources_from_environment(
    env: str | None = None, dagster_home: str | None = None
) -> ExporterSources:
    """The sources of ``env`` (default: ``KBQE_ENV``), resolved from its Dagster resources."""
    from kbqe_dagster.resources.environment import (
        current_environment,
        default_dagster_home,
        resolved,
        resources_for_environment,
    )

    env = env or current_environment()
    resources = resources_for_environment(env)
    staging = resolved(resources["staging"])
    kafka = resolved(resources["kafka"])
    registry = resolved(resources["schema_registry"])
    pipeline = resolved(resources["pipeline"])
    return ExporterSources(
        staging=staging.location(),
        kafka=kafka.settings(),
        registry=registry.settings(),
        pipeline=pipeline.load(),
        bigquery=resolved(resources["bigquery"]),
        dagster_home=dagster_home or default_dagster_home(env),
    )


def open_instance(home: str) -> dg.DagsterInstance:
    if not Path(home).is_dir():
        raise FileNotFoundError(f"Dagster home {home} does not exist")
    return dg.DagsterInstance.from_config(home)
