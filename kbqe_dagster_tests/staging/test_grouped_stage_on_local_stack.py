"""A grouped stage run on the real local stack (core/stage_runs/groups.py): several topics' ranges
staged in **one** Spark job, every message of every topic staged exactly once, a second run
stages nothing; and two writers racing over the same ranges commit each range once (the
create-only done files are the writer guard, whatever runs the ranges belong to)."""

from __future__ import annotations

import dataclasses
from concurrent.futures import ThreadPoolExecutor

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.stager_registry import stage_context
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.job import run_stage_group
from kbqe_dagster.staging.prepare import prepare_topic
from kbqe_dagster.staging.task import stage_range
from kbqe_dagster_tests.staging.conftest import make_demo_topic
from kbqe_dagster_tests.support.staged_exactly_once import assert_exactly_once

pytestmark = [pytest.mark.integration]


@pytest.fixture(scope="module")
def fleet(local_stack, local_endpoints):
    topics = [make_demo_topic(local_endpoints, count=300 + 50 * i) for i in range(3)]
    pipeline = parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": d.topic,
                    "routing": {"mode": "fields"},
                    "event_time": {"fields": ["eventTime", "occurredAt"]},
                }
                for d in topics
            ],
            "allowed_destinations": ["acme_sales.*", "acme_web.*"],
            "staging": {"max_messages_per_range": 100},
        },
        source="test",
    )
    return topics, pipeline


def context(fleet, staging) -> StageContext:
    topics, pipeline = fleet
    first = topics[0]
    return stage_context(
        first.kafka, first.registry, staging, pipeline, first.topic, native_kernel=False
    )


def test_a_grouped_run_stages_several_topics_in_one_spark_job_each_message_once(
    fleet, gcs_staging, spark_context
) -> None:
    topics, _ = fleet
    ctx = context(fleet, gcs_staging)
    names = [d.topic for d in topics]
    sc = spark_context
    sc.setJobGroup("kbqe-grouped-stage-test", "grouped stage run")
    try:
        summaries = run_stage_group(spark_context, ctx, names)
        jobs = sc.statusTracker().getJobIdsForGroup("kbqe-grouped-stage-test")
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)

    assert len(jobs) == 1, "every topic's ranges in one Spark job"
    assert [s.topic for s in summaries] == names
    assert all(len(s.results) == 3 for s in summaries), "each partition's anchoring range"
    messages = {s.topic: s.messages for s in summaries}
    while any(s.results for s in summaries):  # the rest in parallel ranges, runs of 3 topics
        summaries = run_stage_group(spark_context, ctx, names)
        for s in summaries:
            messages[s.topic] += s.messages
    for demo in topics:
        assert messages[demo.topic] == len(demo.placed)
        assert_exactly_once(demo, gcs_staging.open())


def test_two_writers_racing_over_the_same_ranges_commit_each_range_once(fleet, gcs_staging) -> None:
    topics, _ = fleet
    ctx = context(fleet, gcs_staging)
    store = gcs_staging.open()
    ranges = [
        rng
        for d in topics
        for rng in prepare_topic(
            store,
            d.kafka,
            d.topic,
            max_messages_per_run=1_000_000,
            max_messages_per_range=200,
            start_policy=ctx.start_policy,
        ).plan.ranges
    ]
    assert len(ranges) == 9  # a partition's first range commits alone: it anchors the chain

    def stage(rng):
        return stage_range(dataclasses.replace(ctx, topic_name=rng.topic), rng)

    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = list(pool.map(stage, ranges + ranges))  # every range by two writers

    for rng, first, second in zip(ranges, outcomes[: len(ranges)], outcomes[len(ranges) :]):
        winners = [r for r in (first, second) if not r.conflict and r.committed_last is not None]
        # One writer commits; or, when each took one of the range's files first, neither
        # does and the range is staged again by the next run. Never both.
        assert len(winners) <= 1 and (first.conflict or second.conflict), rng
        assert not winners or winners[0].committed_last == rng.last, rng
    assert any(not r.conflict for r in outcomes)

    for _ in range(3):  # later runs: clean up the losers' uploads, stage what is left
        for demo in topics:
            plan = prepare_topic(
                store,
                demo.kafka,
                demo.topic,
                max_messages_per_run=1_000_000,
                max_messages_per_range=200,
                start_policy=ctx.start_policy,
            ).plan
            for rng in plan.ranges:
                stage(rng)
    for demo in topics:
        assert_exactly_once(demo, store)
