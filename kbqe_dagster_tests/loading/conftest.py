"""Fixtures of the load-coordinator unit tests: a local staging directory, the fake BigQuery
client at the boundary, a controllable clock and the pipeline configuration."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kbqe_dagster.core.config.pipeline import PipelineConfig, parse_pipeline_config
from kbqe_dagster.loading.coordinator import LoadCoordinator
from kbqe_dagster.resources.bigquery import GoogleBigQueryLoads
from kbqe_dagster.resources.staging_store import LocalStagingStore
from kbqe_dagster_tests.loading.fake_bigquery import FakeBigQueryClient
from kbqe_dagster_tests.loading.staged import ORDER_V1, ORDER_V2, PAGE_VIEW, Table

TOPIC = "com.acme.events"
ORDERS_V1 = Table("acme_sales", "orders", 11, ORDER_V1)
ORDERS_V2 = Table("acme_sales", "orders", 12, ORDER_V2)
PAGE_VIEWS = Table("acme_web", "page_views", 21, PAGE_VIEW)
DEAD_LETTERS = Table("kbqe_dead_letters", "dead_letters", 0, {})


def pipeline(**load: Any) -> PipelineConfig:
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [{"name": TOPIC, "event_time": {"fields": ["eventTime"]}}],
            "allowed_destinations": ["acme_sales.*", "acme_web.page_views"],
            "load": {"max_retries": 2, **load},
        },
        source="test",
    )


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2024, 9, 14, 8, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now

    def advance(self, delta: timedelta) -> None:
        self.now += delta


@pytest.fixture
def store(tmp_path) -> LocalStagingStore:
    return LocalStagingStore(tmp_path / "staging")


@pytest.fixture
def bq() -> FakeBigQueryClient:
    return FakeBigQueryClient()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def make_coordinator(store, bq, clock):
    """A new coordinator each call: a restarted process with the same staging and BigQuery."""

    def make(config: PipelineConfig | None = None, **kwargs: Any) -> LoadCoordinator:
        return LoadCoordinator(
            store, GoogleBigQueryLoads(bq), config or pipeline(), now=clock, **kwargs
        )

    return make
