"""A staging area and Kafka watermarks for the completeness tests of an HOUR table (``web.clicks``,
written by ``clicks`` on Kafka time and ``views`` on event time): real done files on disk,
one file of clicks[1] not loaded yet; at NOW, 2026-11-23 16:30 UTC."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kbqe_dagster.core.protocol.commit import avro_file_name, plan_range_commit
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.resources.staging_store import LocalStagingStore
from kbqe_dagster_tests.operations.completeness_area import ms

NOW = datetime(2026, 11, 23, 16, 30, tzinfo=UTC)


PIPELINE: dict[str, Any] = {
    "topics": [
        {
            "name": "clicks",
            "routing": {"mode": "static", "dataset": "web", "table": "clicks"},
            "event_time": {"kafka_timestamp_fallback": True},
        },
        {
            "name": "views",
            "routing": {"mode": "static", "dataset": "web", "table": "clicks"},
            "event_time": {"kafka_timestamp_fallback": True},
            "completeness": {"basis": "event_time", "lateness": "10m"},
        },
    ],
    "tables": {"web.clicks": {"partitioning": "hour"}},
}


def commit(store: LocalStagingStore, topic: str, partition: int, start: int, end: int,
            kafka: str, hours: dict[str, int], loaded: bool) -> str:  # fmt: skip
    rng = OffsetRange(topic, partition, start, end)
    avro = avro_file_name(rng, "web", "clicks", 3)
    days: dict[str, int] = {}
    for hour, n in hours.items():
        days[hour[:10]] = days.get(hour[:10], 0) + n
    plan = plan_range_commit(
        rng,
        [(avro, sum(hours.values()))],
        created_at=NOW,
        days={avro.name: days},
        hours={avro.name: hours},
        kafka_ts_max=ms(kafka),
    )
    if not loaded:
        store.put_bytes(avro.name, b"Obj\x01 pending")
    for done in plan.done_files:
        store.create_only(done.name, plan.content)
    return avro.name


def build(root: Path) -> tuple[LocalStagingStore, str]:
    root.mkdir(parents=True, exist_ok=True)
    store = LocalStagingStore(root)
    commit(store, "clicks", 0, 0, 10, "2026-11-23T16:10:00", {"2026-11-23T16": 10}, loaded=True)
    commit(store, "clicks", 1, 0, 10, "2026-11-23T14:40:00", {"2026-11-23T14": 10}, loaded=True)
    pending = commit(
        store,
        "clicks",
        1,
        10,
        20,
        "2026-11-23T15:50:00",
        {"2026-11-23T13": 2, "2026-11-23T15": 8},
        loaded=False,
    )
    # views[0] (event_time basis) reached event hour 16:00 and Kafka's end.
    commit(store, "views", 0, 0, 5, "2026-11-23T16:20:00", {"2026-11-23T16": 5}, loaded=True)
    return store, pending


MARKS = {
    ("clicks", 0): (0, 10),
    ("clicks", 1): (0, 30),
    ("clicks", 2): (0, 0),
    ("views", 0): (0, 5),
}
