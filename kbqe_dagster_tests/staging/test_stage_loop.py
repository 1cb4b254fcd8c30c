"""The stage loop (staging/loop.py) with Kafka's watermarks, the stage function and time faked
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
from kbqe_dagster.staging.loop import (
    MAX_RUN_S,
    LoopRound,
    LoopSettings,
    due_topics,
    run_stage_loop,
    staged_positions,
)
from kbqe_dagster.staging.prepare import Preparation

PIPELINE = parse_pipeline_config({
    "version": 1,
    "topics": [{"name": "orders", "event_time": {"fields": ["ts"]}},
               {"name": "clicks", "event_time": {"fields": ["ts"]}}],
    "allowed_destinations": ["d.*"],
})


@pytest.fixture
def ctx(tmp_path) -> StageContext:
    return StageContext(KafkaSettings("127.0.0.1:1"), RegistrySettings("http://127.0.0.1:1"),
                        StagingLocation(str(tmp_path)), PIPELINE, "orders")


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

    def __init__(self, clock: FakeClock, highs: dict[tuple[str, int], int],
                 stage_seconds: float = 0.25) -> None:
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
                    results.append(RangeResult(t, p, rng.start, rng.last, rng.last, rng.size,
                                               rng.size, (), 0))
                    self.staged_upto[(t, p)] = mark.high
            prep = Preparation((), (), (), RangePlan(tuple(ranges), tuple(partitions)))
            summaries.append(StageSummary(topic, prep, tuple(results), self.stage_seconds))
        return tuple(summaries)


def stop_after(rounds_seen: list[LoopRound], n: int):
    return lambda: "terminated" if len(rounds_seen) >= n else None


def loop(ctx, kafka: FakeKafka, clock: FakeClock, settings=LoopSettings(), *, rounds: int,
         topics=("orders", "clicks")):
    seen: list[LoopRound] = []
    outcome = run_stage_loop(None, ctx, topics, settings, should_stop=stop_after(seen, rounds),
                             on_round=seen.append, stage=kafka.stage, marks_of=kafka.marks_of,
                             clock=clock, sleep=clock.sleep)
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
    outcome, seen = loop(ctx, kafka, clock, LoopSettings(interval_s=1.0, max_run_s=3.5),
                         rounds=100)
    assert outcome.stopped_because == MAX_RUN_S
    assert len(seen) == outcome.rounds == 4  # rounds at 0, 1, 2 and 3 s; none at 4 s


def test_should_stop_is_asked_before_the_first_round(ctx):
    clock = FakeClock()
    kafka = FakeKafka(clock, {("orders", 0): 5})
    outcome = run_stage_loop(None, ctx, ["orders"], LoopSettings(),
                             should_stop=lambda: "config_changed", stage=kafka.stage,
                             marks_of=kafka.marks_of, clock=clock, sleep=clock.sleep)
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
        run_stage_loop(None, ctx, ["orders"], LoopSettings(), should_stop=lambda: None,
                       on_round=seen.append, stage=stage, marks_of=kafka.marks_of,
                       clock=clock, sleep=clock.sleep)
    assert [r.idle for r in seen] == [False, True]


def test_positions_are_vouched_by_committed_ranges_or_an_empty_plan():
    def summary(partitions, results):
        ranges = tuple(r for p in partitions for r in p.ranges)
        return StageSummary("t", Preparation((), (), (), RangePlan(ranges, tuple(partitions))),
                            tuple(results), 0.0)

    nothing_new = PartitionPlan("t", 0, 40, (), (), None, 0)
    committed = PartitionPlan("t", 1, 10, (OffsetRange("t", 1, 10, 20),), (), None, 0)
    short = PartitionPlan("t", 2, 0, (OffsetRange("t", 2, 0, 9),), (), None, 0)
    read_nothing = PartitionPlan("t", 3, 0, (OffsetRange("t", 3, 0, 9),), (), None, 0)
    positions = staged_positions([summary(
        [nothing_new, committed, short, read_nothing],
        [RangeResult("t", 1, 10, 19, 19, 10, 10, (), 0),
         RangeResult("t", 2, 0, 8, 4, 5, 5, (), 0),  # the reader stopped at 4: 5.. next round
         RangeResult("t", 3, 0, 8, None, 0, 0, (), 0)])])
    assert positions == {("t", 0): 40, ("t", 1): 20, ("t", 2): 5}
    marks = {("t", 0): Watermarks(0, 40), ("t", 1): Watermarks(0, 20)}
    assert due_topics(["t"], marks, positions) == []
    assert due_topics(["t"], {**marks, ("t", 3): Watermarks(0, 9)}, positions) == ["t"]
