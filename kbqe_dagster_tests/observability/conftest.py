"""Fixtures of the exporter tests: sources over a staging directory, with Kafka and the
registry on a closed port unless a test points them elsewhere."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbqe_dagster.core.config.pipeline import PipelineConfig, load_pipeline_config
from kbqe_dagster.observability.sources import ExporterSources
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation

REPO = Path(__file__).resolve().parents[2]
CLOSED = "127.0.0.1:1"  # nothing listens on port 1: connections are refused at once


@pytest.fixture(scope="session")
def example_pipeline() -> PipelineConfig:
    return load_pipeline_config(REPO / "examples" / "pipeline.yaml")


def sources_for(staging: Path, pipeline: PipelineConfig, **overrides) -> ExporterSources:
    fields = dict(
        staging=StagingLocation(str(staging)),
        kafka=KafkaSettings(CLOSED),
        registry=RegistrySettings(f"http://{CLOSED}"),
        pipeline=pipeline,
    )
    fields.update(overrides)
    return ExporterSources(**fields)
