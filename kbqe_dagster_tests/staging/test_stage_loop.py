"""The stage loop (staging/stage_loop.py) with Kafka's watermarks, the stage function and time faked
at its seams: a round stages only the topics with something new since the position the
previous rounds staged up to, an idle round stages nothing, rounds start at most every
``interval_s``, and the loop stops between rounds when ``should_stop`` says why or
``max_run_s`` has passed; a failed stage fails the loop after ``on_round`` saw every earlier
round."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.core.protocol.offsets import OffsetRange, PartitionPlan, RangePlan, Watermarks
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.staging.context import RangeResult, StageContext
from kbqe_dagster.staging.job import StageSummary
from kbqe_dagster.staging.prepare import Preparation
from kbqe_dagster.staging.range_sink import TableDelivery
from kbqe_dagster.staging.stage_loop import (
    MAX_RUN_S,
    LoopRound,
    LoopSettings,
    due_topics,
    fold_rounds,
    run_stage_loop,
    staged_positions,
    warm_up,
)

PIPELINE = parse_pipeline_config(
    {
        "version": 1,
        "topics": [
            {"name": "orders", "event_time": {"fields": ["ts"]}},
            {"name": "clicks", "event_time": {"fields": ["ts"]}},
        ],
        "allowed_destinations": ["d.*"],
    }
)


@pytest.fixture
def ctx(tmp_path) -> StageContext:
    return StageContext(
        KafkaSettings("127.0.0.1:1"),
        RegistrySettings("http://127.0.0.1:1"),
        StagingLocation(str(tmp_path)),
        PIPELINE,
        "orders",
    )


class FakeClock:
    """``time.monotonic`` and ``time.sleep``: sleeping moves the clock; each stage call costs
    ``stage_seconds``."""

    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(round(seconds, 6))
        self.now += seconds


class FakeKafka:
    """High watermarks per partition, and a stage function that stages each due topic's
    partitions up to them (one range per partition with something new), as run_stage_group
    does: its preparation lists the staging area for what it has committed."""

    def __init__(
        self, clock: FakeClock, highs: dict[tuple[str, int], int], stage_seconds: float = 0.25
    ) -> None:
        self.clock, self.highs, self.stage_seconds = clock, highs, stage_seconds
        self.staged_upto: dict[tuple[str, int], int] = {}
        self.stage_calls: list[list[str]] = []
        self.marks_passed: list[dict] = []
        self.produce_at: dict[int, dict[tuple[str, int], int]] = {}  # marks read n -> new highs
        self.marks_reads = 0

    def marks_of(self, ctx, topics):
        self.marks_reads += 1
        self.highs.update(self.produce_at.get(self.marks_reads, {}))
        return {tp: Watermarks(0, high) for tp, high in self.highs.items() if tp[0] in topics}

    def stage(self, spark, ctx, topics, *, marks):
        self.stage_calls.append(list(topics))
        self.marks_passed.append(dict(marks))
        self.clock.now += self.stage_seconds
        summaries = []
        for topic in topics:
            partitions, ranges, results = [], [], []
            for (t, p), mark in sorted(marks.items()):
                if t != topic:
                    continue
                start = self.staged_upto.get((t, p), 0)
                planned = (OffsetRange(t, p, start, mark.high),) if mark.high > start else ()
                partitions.append(PartitionPlan(t, p, start, planned, (), None, 0))
                ranges.extend(planned)
                for rng in planned:
                    results.append(
                        RangeResult(t, p, rng.start, rng.last, rng.last, rng.size, rng.size, (), 0)
                    )
                    self.staged_upto[(t, p)] = mark.high
            prep = Preparation((), (), (), RangePlan(tuple(ranges), tuple(partitions)))
            summaries.append(StageSummary(topic, prep, tuple(results), self.stage_seconds))
        return tuple(summaries)


def stop_after(rounds_seen: list[LoopRound], n: int):
    return lambda: "terminated" if len(rounds_seen) >= n else None


DEFAULT_SETTINGS = LoopSettings()


def loop(
    ctx,
    kafka: FakeKafka,
    clock: FakeClock,
    settings=DEFAULT_SETTINGS,
    *,
    rounds: int,
    topics=("orders", "clicks"),
):
    seen: list[LoopRound] = []
    outcome = run_stage_loop(
        None,
        ctx,
        topics,
        settings,
        should_stop=stop_after(seen, rounds),
        on_round=seen.append,
        stage=kafka.stage,
        marks_of=kafka.marks_of,
        clock=clock,
        sleep=clock.sleep,
    )
    return outcome, seen


def test_the_first_round_stages_every_topic_then_rounds_without_news_are_idle(ctx):
    clock = FakeClock()
    kafka = FakeKafka(clock, {("orders", 0): 5, ("orders", 1): 0, ("clicks", 0): 3})
    outcome, seen = loop(ctx, kafka, clock, rounds=4)
    assert kafka.stage_calls == [["orders", "clicks"]]
    assert [r.idle for r in seen] == [False, True, True, True]
    assert (outcome.rounds, outcome.idle_rounds, outcome.stopped_because) == (4, 3, "terminated")
    assert sum(s.records for s in outcome.summaries) == 8
    assert [r.number for r in seen] == [1, 2, 3, 4]


def test_a_round_stages_only_the_topics_with_new_messages_with_the_watermarks_it_read(ctx):
    clock = FakeClock()
    kafka = FakeKafka(clock, {("orders", 0): 5, ("clicks", 0): 3})
    kafka.produce_at = {3: {("clicks", 0): 10}, 5: {("orders", 0): 6, ("clicks", 0): 11}}
    outcome, seen = loop(ctx, kafka, clock, rounds=6)
    assert kafka.stage_calls == [["orders", "clicks"], ["clicks"], ["orders", "clicks"]]
    assert kafka.marks_passed[1] == {("clicks", 0): Watermarks(0, 10)}
    assert [r.idle for r in seen] == [False, True, False, True, False, True]
    assert outcome.idle_rounds == 3
    assert [s.records for s in seen[2].summaries] == [7]
    # Every offset staged once: 0..5 of orders (one then one more), 0..10 of clicks.
    assert sum(s.records for s in outcome.summaries if s.topic == "orders") == 6
    assert sum(s.records for s in outcome.summaries if s.topic == "clicks") == 11


def test_rounds_start_at_most_every_interval(ctx):
    clock = FakeClock()
    kafka = FakeKafka(clock, {("orders", 0): 5}, stage_seconds=0.25)
    kafka.produce_at = {3: {("orders", 0): 9}}
    _, seen = loop(ctx, kafka, clock, LoopSettings(interval_s=1.0), rounds=4)
    # Busy rounds take 0.25 s, idle ones no time: each start is one interval after the last.
    assert [round(r.seconds, 6) for r in seen] == [0.25, 0.0, 0.25, 0.0]
    # The last wait precedes the should_stop that ends the loop (asked right before a round).
    assert clock.sleeps == [0.75, 1.0, 0.75, 1.0]


def test_a_round_longer_than_the_interval_is_followed_at_once(ctx):
    clock = FakeClock()
    kafka = FakeKafka(clock, {("orders", 0): 5}, stage_seconds=2.5)
    kafka.produce_at = {2: {("orders", 0): 9}, 3: {("orders", 0): 12}}
    loop(ctx, kafka, clock, LoopSettings(interval_s=1.0), rounds=3)
    assert clock.sleeps == []


def test_the_loop_ends_with_max_run_s_and_starts_no_round_after_it(ctx):
    clock = FakeClock()
    kafka = FakeKafka(clock, {("orders", 0): 5})
    outcome, seen = loop(ctx, kafka, clock, LoopSettings(interval_s=1.0, max_run_s=3.5), rounds=100)
    assert outcome.stopped_because == MAX_RUN_S
    assert len(seen) == outcome.rounds == 4  # rounds at 0, 1, 2 and 3 s; none at 4 s


def test_should_stop_is_asked_before_the_first_round(ctx):
    clock = FakeClock()
    kafka = FakeKafka(clock, {("orders", 0): 5})
    outcome = run_stage_loop(
        None,
        ctx,
        ["orders"],
        LoopSettings(),
        should_stop=lambda: "config_changed",
        stage=kafka.stage,
        marks_of=kafka.marks_of,
        clock=clock,
        sleep=clock.sleep,
    )
    assert (outcome.rounds, outcome.stopped_because, outcome.summaries) == (0, "config_changed", ())
    assert kafka.marks_reads == 0


def test_a_topic_kafka_does_not_hold_is_not_staged_until_it_appears(ctx):
    clock = FakeClock()
    kafka = FakeKafka(clock, {("orders", 0): 5})
    kafka.produce_at = {3: {("clicks", 0): 2}}
    outcome, _ = loop(ctx, kafka, clock, rounds=4)
    assert kafka.stage_calls == [["orders"], ["clicks"]]


def test_a_failed_stage_fails_the_loop_after_on_round_saw_the_earlier_rounds(ctx):
    clock = FakeClock()
    kafka = FakeKafka(clock, {("orders", 0): 5})
    kafka.produce_at = {3: {("orders", 0): 7}}
    staged = kafka.stage

    def stage(spark, ctx, topics, *, marks):
        if kafka.stage_calls:
            raise StagingError("orders[0] 5..6: broker gone")
        return staged(spark, ctx, topics, marks=marks)

    seen: list[LoopRound] = []
    with pytest.raises(StagingError, match=r"orders\[0\] 5..6"):
        run_stage_loop(
            None,
            ctx,
            ["orders"],
            LoopSettings(),
            should_stop=lambda: None,
            on_round=seen.append,
            stage=stage,
            marks_of=kafka.marks_of,
            clock=clock,
            sleep=clock.sleep,
        )
    assert [r.idle for r in seen] == [False, True]


def test_positions_are_vouched_by_committed_ranges_or_an_empty_plan():
    def summary(partitions, results):
        ranges = tuple(r for p in partitions for r in p.ranges)
        return StageSummary(
            "t", Preparation((), (), (), RangePlan(ranges, tuple(partitions))), tuple(results), 0.0
        )

    nothing_new = PartitionPlan("t", 0, 40, (), (), None, 0)
    committed = PartitionPlan("t", 1, 10, (OffsetRange("t", 1, 10, 20),), (), None, 0)
    short = PartitionPlan("t", 2, 0, (OffsetRange("t", 2, 0, 9),), (), None, 0)
    read_nothing = PartitionPlan("t", 3, 0, (OffsetRange("t", 3, 0, 9),), (), None, 0)
    positions = staged_positions(
        [
            summary(
                [nothing_new, committed, short, read_nothing],
                [
                    RangeResult("t", 1, 10, 19, 19, 10, 10, (), 0),
                    RangeResult(
                        "t", 2, 0, 8, 4, 5, 5, (), 0
                    ),  # the reader stopped at 4: 5.. next round
                    RangeResult("t", 3, 0, 8, None, 0, 0, (), 0),
                ],
            )
        ]
    )
    assert positions == {("t", 0): 40, ("t", 1): 20, ("t", 2): 5}
    marks = {("t", 0): Watermarks(0, 40), ("t", 1): Watermarks(0, 20)}
    assert due_topics(["t"], marks, positions) == []
    assert due_topics(["t"], {**marks, ("t", 3): Watermarks(0, 9)}, positions) == ["t"]


def _delivered(first_row: int, rows: int, day: str, stream: str = "s0") -> TableDelivery:
    return TableDelivery(
        "d", "t", stream, first_row, rows, rows + 1, 1, rows * 10, ((day, rows + 1),), 1, 0
    )


def _round(partition: int, start: int, last: int, *deliveries: TableDelivery) -> StageSummary:
    result = RangeResult(
        "orders",
        partition,
        start,
        last,
        last,
        last - start + 1,
        last - start + 1,
        (),
        0,
        dead_letters={"refused": 1} if deliveries else {},
        delivered=deliveries,
    )
    prep = Preparation(
        (),
        (),
        ("orders/README",),
        RangePlan((), (PartitionPlan("orders", partition, start, (), (), None, 0),)),
    )
    return StageSummary("orders", prep, (result,), 0.5)


def test_folded_rounds_have_one_range_and_one_delivery_per_contiguous_run():
    rounds = [
        _round(0, 0, 9, _delivered(0, 9, "2026-11-24")),
        _round(1, 0, 4),
        _round(0, 10, 19, _delivered(9, 9, "2026-11-25")),
        _round(0, 20, 29, _delivered(18, 9, "2026-11-25")),
        # The stream was replaced: its rows are not contiguous with the earlier ones.
        _round(0, 30, 39, _delivered(0, 9, "2026-11-25", stream="s1")),
        _round(1, 7, 9),  # after a gap (5..6 staged elsewhere): a range of its own
    ]
    [folded] = fold_rounds(rounds)
    assert [(r.partition, r.start, r.committed_last) for r in folded.results] == [
        (0, 0, 39),
        (1, 0, 4),
        (1, 7, 9),
    ]
    p0 = folded.results[0]
    assert (p0.messages, p0.dead_letters) == (40, {"refused": 4})
    assert [
        (d.stream, d.first_row, d.rows, d.records, d.bytes, d.days, d.requests)
        for d in p0.delivered
    ] == [
        ("s0", 0, 27, 30, 270, (("2026-11-24", 10), ("2026-11-25", 20)), 3),
        ("s1", 0, 9, 10, 90, (("2026-11-25", 10),), 1),
    ]
    assert folded.records == sum(s.records for s in rounds)
    assert folded.seconds == 3.0
    assert folded.preparation.unrecognized == ("orders/README",)


def test_a_rounds_lag_is_what_kafka_held_beyond_the_positions_staged():
    marks = {
        ("orders", 0): Watermarks(0, 12),
        ("orders", 1): Watermarks(3, 7),
        ("clicks", 0): Watermarks(0, 1),
    }
    r = LoopRound(1, 0.0, 0.0, (), marks, {("orders", 0): 10})
    assert r.lag("orders") == {0: 2, 1: 4}
    assert r.lag("clicks") == {0: 1}


def test_the_warm_up_is_one_spark_job_of_a_task_per_slot(ctx):
    class Spark:
        defaultParallelism = 3

        def __init__(self):
            self.jobs = []

        def parallelize(self, items, slices):
            items = list(items)
            assert slices == len(items)
            return _Collect(self, items)

    class _Collect:
        def __init__(self, spark, items):
            self.spark, self.items = spark, items

        def map(self, fn):
            self.fn = fn
            return self

        def collect(self):
            self.spark.jobs.append([self.fn(i) for i in self.items])
            return self.spark.jobs[-1]

    spark = Spark()
    assert warm_up(spark, ctx) >= 0
    assert spark.jobs == [[0, 0, 0]]  # the context names no stager chooser: 0 each
