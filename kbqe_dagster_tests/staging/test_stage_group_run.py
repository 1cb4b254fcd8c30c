"""``run_stage_group`` on the driver, with Spark, Kafka and the ranges' staging faked at their
seams: every topic's watermarks in one read, each topic prepared with its own settings, every
range of every topic in one Spark job staged under its own topic's context, one summary per
topic; a topic Kafka does not hold (not created yet, or gone since the tick) is skipped, with a
warning naming it, whether a pattern found it or it is listed; a failed range fails the run
naming it after the others had their chance."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.core.protocol.offsets import OffsetRange, RangePlan
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.kafka.cluster import PartitionWatermarks
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.staging import job as job_module
from kbqe_dagster.staging.context import RangeResult, StageContext
from kbqe_dagster.staging.prepare import Preparation

PIPELINE = parse_pipeline_config(
    {
        "version": 1,
        "topics": [
            {
                "name": "listed",
                "event_time": {"fields": ["ts"]},
                "staging": {"max_messages_per_range": 7},
            },
            {"name": "listed.gone", "event_time": {"fields": ["ts"]}},
        ],
        "topic_patterns": [{"match": r"shop\..*", "event_time": {"fields": ["ts"]}}],
        "allowed_destinations": ["d.*"],
    }
)


class FakeSpark:
    """A SparkContext's ``parallelize(items, n).map(f).collect()``, run here; counts the jobs."""

    def __init__(self) -> None:
        self.jobs: list[int] = []

    def parallelize(self, items, slices):
        assert slices == len(items)
        return _Rdd(self, list(items))


class _Rdd:
    def __init__(self, spark: FakeSpark, items: list) -> None:
        self.spark, self.items, self.fn = spark, items, None

    def map(self, fn):
        self.fn = fn
        return self

    def collect(self):
        self.spark.jobs.append(len(self.items))
        return [self.fn(item) for item in self.items]


@pytest.fixture
def seams(monkeypatch, tmp_path):
    calls = {"watermarks": [], "prepared": {}, "staged": []}
    kafka = {("listed", 0), ("shop.a", 0), ("shop.a", 1), ("shop.b", 0)}

    def watermarks_of(settings, topics, timeout=10.0):
        calls["watermarks"].append(list(topics))
        return {tp: PartitionWatermarks(tp[0], tp[1], 0, 10) for tp in kafka if tp[0] in topics}

    def prepare_topic(
        store, settings, topic, *, max_messages_per_run, max_messages_per_range, start_policy, marks
    ):
        calls["prepared"][topic] = (max_messages_per_range, sorted(marks))
        ranges = tuple(OffsetRange(t, p, 0, 10) for t, p in sorted(marks))
        return Preparation((), (), (), RangePlan(ranges, ()))

    def stage_range(ctx, rng):
        calls["staged"].append((ctx.topic_name, rng.topic))
        if rng.topic == "shop.b":
            raise RuntimeError("broker gone at offset 3")
        return RangeResult(rng.topic, rng.partition, rng.start, rng.last, rng.last, 10, 10, (), 0)

    monkeypatch.setattr(job_module, "watermarks_of", watermarks_of)
    monkeypatch.setattr(job_module, "prepare_topic", prepare_topic)
    monkeypatch.setattr(job_module, "stage_range", stage_range)
    ctx = StageContext(
        KafkaSettings("127.0.0.1:1"),
        RegistrySettings("http://127.0.0.1:1"),
        StagingLocation(str(tmp_path)),
        PIPELINE,
        "listed",
        native_kernel=False,
    )
    return calls, ctx


def test_every_topic_in_one_spark_job_each_range_under_its_own_topic(seams) -> None:
    calls, ctx = seams
    spark = FakeSpark()

    summaries = job_module.run_stage_group(spark, ctx, ["listed", "shop.a"])

    assert calls["watermarks"] == [["listed", "shop.a"]]
    assert calls["prepared"] == {
        "listed": (7, [("listed", 0)]),
        "shop.a": (500_000, [("shop.a", 0), ("shop.a", 1)]),
    }
    assert spark.jobs == [3]
    assert sorted(calls["staged"]) == [
        ("listed", "listed"),
        ("shop.a", "shop.a"),
        ("shop.a", "shop.a"),
    ]
    assert [(s.topic, len(s.results), s.messages) for s in summaries] == [
        ("listed", 1, 10),
        ("shop.a", 2, 20),
    ]


def test_a_pattern_topic_gone_from_kafka_is_skipped(seams) -> None:
    _, ctx = seams
    summaries = job_module.run_stage_group(FakeSpark(), ctx, ["shop.gone", "shop.a"])
    assert [s.topic for s in summaries] == ["shop.a"]


def test_a_failed_range_fails_the_run_naming_it_after_the_others_staged(seams) -> None:
    calls, ctx = seams
    with pytest.raises(StagingError) as failure:
        job_module.run_stage_group(FakeSpark(), ctx, ["shop.a", "shop.b"])
    assert "shop.b[0] 0..9: RuntimeError: broker gone at offset 3" in str(failure.value)
    assert calls["staged"].count(("shop.a", "shop.a")) == 2


def test_a_listed_topic_kafka_does_not_hold_is_skipped_naming_it_and_the_others_staged(
    seams, caplog
) -> None:
    calls, ctx = seams
    with caplog.at_level("WARNING", logger=job_module.__name__):
        summaries = job_module.run_stage_group(FakeSpark(), ctx, ["listed.gone", "shop.a"])
    assert [s.topic for s in summaries] == ["shop.a"]
    assert calls["staged"].count(("shop.a", "shop.a")) == 2
    assert "listed.gone" not in calls["prepared"]
    assert [r.getMessage() for r in caplog.records] == [
        "not staged: topic 'listed.gone' does not exist in Kafka (not created yet, or deleted);"
        " not staged until it exists"
    ]
