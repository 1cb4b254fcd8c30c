"""A staging area and Kafka watermarks for the completeness tests (fakes at the Kafka boundary,
real done files and manifests on disk).

    shop.orders ← orders (static, kafka_time, lateness 5m) and clicks (static, event_time, 1h)
    orders[0]  0..9 loaded (Kafka time 11-23 23:00), 10..19 loaded (11-24 01:00); high 20
    orders[1]  0..9 loaded (11-23 12:00), 10..19 committed and pending (days 11-22: 3,
               11-23: 4); high 30                                          → lagging
    clicks[0]  nothing ever (high 0)                                       → idle
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from kbqe_dagster.core.config.pipeline import PipelineConfig, parse_pipeline_config
from kbqe_dagster.core.protocol.commit import avro_file_name, plan_range_commit
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.resources.kafka.cluster import PartitionWatermarks
from kbqe_dagster.resources.staging_store import LocalStagingStore

UTC = UTC
NOW = datetime(2026, 11, 24, 6, 0, tzinfo=UTC)
PIPELINE = {
    "topics": [
        {
            "name": "orders",
            "routing": {"mode": "static", "dataset": "shop", "table": "orders"},
            "event_time": {"kafka_timestamp_fallback": True},
        },
        {
            "name": "clicks",
            "routing": {"mode": "static", "dataset": "shop", "table": "orders"},
            "event_time": {"kafka_timestamp_fallback": True},
            "completeness": {"basis": "event_time", "lateness": "1h"},
        },
    ],
}
WATERMARKS = {("orders", 0): (0, 20), ("orders", 1): (0, 30), ("clicks", 0): (0, 0)}
PENDING = avro_file_name(OffsetRange("orders", 1, 10, 20), "shop", "orders", 7).name


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=UTC).timestamp() * 1000)


def config() -> PipelineConfig:
    return parse_pipeline_config(PIPELINE, source="test.yaml")


def commit(store: LocalStagingStore, partition: int, start: int, end: int, kafka: str,
           days: dict[str, int], loaded: bool) -> None:  # fmt: skip
    rng = OffsetRange("orders", partition, start, end)
    avro = avro_file_name(rng, "shop", "orders", 7)
    plan = plan_range_commit(
        rng,
        [(avro, sum(days.values()))],
        created_at=NOW,
        days={avro.name: days},
        kafka_ts_max=ms(kafka),
    )
    if not loaded:
        store.put_bytes(avro.name, b"Obj\x01 pending")
    for done in plan.done_files:
        store.create_only(done.name, plan.content)


def build(root: Path) -> LocalStagingStore:
    root.mkdir(parents=True, exist_ok=True)
    store = LocalStagingStore(root)
    commit(store, 0, 0, 10, "2026-11-23T23:00:00", {"2026-11-23": 10}, loaded=True)
    commit(store, 0, 10, 20, "2026-11-24T01:00:00", {"2026-11-24": 10}, loaded=True)
    commit(store, 1, 0, 10, "2026-11-23T12:00:00", {"2026-11-23": 10}, loaded=True)
    commit(
        store, 1, 10, 20, "2026-11-23T20:00:00", {"2026-11-22": 3, "2026-11-23": 4}, loaded=False
    )
    return store


def watermarks(marks=WATERMARKS):
    def read(topics):
        return {
            tp: PartitionWatermarks(tp[0], tp[1], lo, hi)
            for tp, (lo, hi) in marks.items()
            if tp[0] in set(topics)
        }

    return read
