"""A stage run's summary of one range delivered through the Storage Write API to ``acme.clicks``
(``CONFIG``): what the delivery-event and delivery-cost tests report on."""

from __future__ import annotations

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.protocol.offsets import RangePlan
from kbqe_dagster.staging.context import RangeResult
from kbqe_dagster.staging.job import StageSummary
from kbqe_dagster.staging.prepare import Preparation
from kbqe_dagster.staging.range_sink import TableDelivery

CONFIG = parse_pipeline_config(
    {
        "version": 1,
        "topics": [{"name": "web", "event_time": {"fields": ["ts"]}}],
        "allowed_destinations": ["acme.clicks", "acme.views"],
        "tables": {"acme.clicks": {"delivery": "storage_write"}},
    }
)


STREAM = "projects/p/datasets/acme/tables/clicks/streams/s1"


def range_summary(delivery: TableDelivery, committed: int | None = 99) -> StageSummary:
    result = RangeResult("web", 0, 0, 99, committed, 100, 100, (), 0, delivered=(delivery,))
    return StageSummary("web", Preparation((), (), (), RangePlan((), ())), (result,), 1.0)


def table_delivery(rows: int = 60, refused: int = 0) -> TableDelivery:
    return TableDelivery(
        "acme",
        "clicks",
        STREAM,
        40,
        rows,
        60,
        refused,
        4096,
        (("2026-11-24", 20), ("2026-11-25", 40)),
        1,
        0,
    )
