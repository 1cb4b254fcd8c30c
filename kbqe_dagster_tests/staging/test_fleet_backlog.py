"""The backlog of a fleet of topics in a bounded number of calls (staging/backlog.py
``fleet_backlog``): one staging listing, one watermark read and one oldest-time read for all
topics together, whatever their number; the same lags as one topic at a time."""

from __future__ import annotations

from pathlib import Path

import pytest

from kbqe_dagster.core.protocol.offsets import StartPolicy
from kbqe_dagster.resources.kafka.clients import KafkaSettings, TopicMissing
from kbqe_dagster.resources.kafka.cluster import PartitionWatermarks
from kbqe_dagster.resources.staging_store import LocalStagingStore
from kbqe_dagster.staging import backlog as backlog_module
from kbqe_dagster.staging.backlog import fleet_backlog, staging_names_by_topic

KAFKA = KafkaSettings("127.0.0.1:1")


class CountingStore(LocalStagingStore):
    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.listings: list[str] = []

    def list(self, prefix: str = ""):
        self.listings.append(prefix)
        return super().list(prefix)


class FakeKafka:
    """``watermarks_of`` and ``first_timestamps_ms`` as fleet_backlog calls them."""

    def __init__(self, highs: dict[tuple[str, int], int]) -> None:
        self.highs = highs
        self.watermark_calls = 0
        self.timestamp_calls: list[dict] = []

    def watermarks_of(self, settings, topics, timeout: float = 10.0):
        self.watermark_calls += 1
        return {
            tp: PartitionWatermarks(tp[0], tp[1], 0, high)
            for tp, high in self.highs.items()
            if tp[0] in set(topics)
        }

    def first_timestamps_ms(self, settings, positions, timeout: float = 5.0):
        self.timestamp_calls.append(dict(positions))
        # Older the further the partition number: partition 2 holds the oldest message.
        return {tp: 1_000 * (offset + 1) - tp[1] for tp, offset in positions.items()}


@pytest.fixture
def store(tmp_path: Path) -> CountingStore:
    store = CountingStore(tmp_path / "staging")
    # Committed: fleet.a[0] 0..9, fleet.a.sub[0] 0..4 (a topic whose name extends another's).
    store.put_bytes("fleet.a.0.sales.x.1.0.9.done", b"")
    store.put_bytes("fleet.a.sub.0.sales.x.1.0.4.done", b"")
    store.put_bytes("notes.txt", b"not a staging file")
    store.listings.clear()
    return store


def kafka(monkeypatch, highs) -> FakeKafka:
    fake = FakeKafka(highs)
    monkeypatch.setattr(backlog_module, "watermarks_of", fake.watermarks_of)
    monkeypatch.setattr(backlog_module, "first_timestamps_ms", fake.first_timestamps_ms)
    return fake


def test_every_topic_from_one_listing_under_the_common_prefix(store) -> None:
    names = staging_names_by_topic(store, ["fleet.a", "fleet.a.sub", "fleet.b"])
    assert names == {
        "fleet.a": ["fleet.a.0.sales.x.1.0.9.done"],
        "fleet.a.sub": ["fleet.a.sub.0.sales.x.1.0.4.done"],
        "fleet.b": [],
    }
    assert store.listings == ["fleet."]


def test_lags_of_many_topics_cost_one_listing_one_watermark_read_one_timestamp_read(
    store, monkeypatch
) -> None:
    topics = {f"fleet.t{i:03d}": StartPolicy.EARLIEST for i in range(200)}
    topics["fleet.a"] = StartPolicy.EARLIEST
    highs = {(t, p): 5 for t in topics for p in range(3)}
    highs[("fleet.a", 0)] = 25
    fake = kafka(monkeypatch, highs)

    result = fleet_backlog(store, KAFKA, topics)

    assert store.listings == ["fleet."]
    assert fake.watermark_calls == 1 and len(fake.timestamp_calls) == 1
    assert len(fake.timestamp_calls[0]) == 201 * 3  # every partition with a backlog
    a = result["fleet.a"]
    assert a.next_offsets == {0: 10, 1: 0, 2: 0} and a.lag == 15 + 5 + 5
    assert a.oldest_unstaged_ms == 998  # the smallest of its partitions' stamps: 11_000, 999, 998
    assert result["fleet.t000"].lag == 15


def test_the_oldest_time_is_read_only_where_wanted_and_only_for_partitions_with_a_backlog(
    store, monkeypatch
) -> None:
    fake = kafka(monkeypatch, {("fleet.a", 0): 10, ("fleet.a", 1): 4, ("fleet.b", 0): 9})

    result = fleet_backlog(
        store,
        KAFKA,
        {"fleet.a": StartPolicy.EARLIEST, "fleet.b": StartPolicy.EARLIEST},
        oldest_wanted=lambda b: b.topic == "fleet.a",
    )

    assert fake.timestamp_calls == [{("fleet.a", 1): 0}]  # a[0] is staged up to its end
    assert result["fleet.a"].oldest_unstaged_ms == 999
    assert result["fleet.b"].lag == 9 and result["fleet.b"].oldest_unstaged_ms is None


def test_a_topic_kafka_does_not_hold_is_an_error_of_that_topic_only(store, monkeypatch) -> None:
    kafka(monkeypatch, {("fleet.a", 0): 12})
    result = fleet_backlog(
        store, KAFKA, {"fleet.a": StartPolicy.EARLIEST, "fleet.gone": StartPolicy.EARLIEST}
    )
    assert result["fleet.a"].lag == 2
    assert isinstance(result["fleet.gone"], TopicMissing)
    assert result["fleet.gone"].topic == "fleet.gone"
    assert "fleet.gone" in str(result["fleet.gone"])
