"""The stage job on the real local stack: every message staged exactly once.

~10k messages over 3 partitions of a topic whose name has dots, two tables, two schema
versions and one message of every bad-input kind. Each good message must be in exactly one
avro file (read back and compared by offset), each bad one in a dead-letter file with its
reason, and the done files must tile the offsets.
"""

from __future__ import annotations

import multiprocessing
import os

import pytest

from kbqe_dagster.staging.job import run_stage
from kbqe_dagster.staging.prepare import prepare_topic
from kbqe_dagster.staging.task import stage_range
from kbqe_dagster_tests.staging.conftest import make_demo_topic
from kbqe_dagster_tests.staging.staged_files import read_staging
from kbqe_dagster_tests.support.staged_exactly_once import assert_exactly_once

pytestmark = [pytest.mark.integration]


def test_every_message_is_staged_once_and_a_run_with_no_new_messages_stages_nothing(
    demo_topic, gcs_staging, spark_context
) -> None:
    ctx = demo_topic.context(gcs_staging)

    def stage():
        return run_stage(
            spark_context, ctx, max_messages_per_run=1_000_000, max_messages_per_range=500
        )

    first = stage()
    assert len(first.results) == 3, "a partition's first range commits alone: it anchors the chain"
    rest = stage()
    assert len(rest.results) >= 6, "anchored hot partitions are split into parallel ranges"

    assert first.messages + rest.messages == len(demo_topic.placed)
    assert first.records + rest.records == len(demo_topic.good)
    dead = sum(first.dead_letters.values()) + sum(rest.dead_letters.values())
    assert dead == len(demo_topic.bad)
    assert_exactly_once(demo_topic, gcs_staging.open())

    again = stage()
    assert again.results == ()
    assert again.preparation.orphans_deleted == ()
    assert_exactly_once(demo_topic, gcs_staging.open())


def test_skip_policy_counts_bad_input_and_writes_no_dead_letters(
    demo_topic, gcs_staging, spark_context
) -> None:
    ctx = demo_topic.context(gcs_staging, on_bad_input="skip")
    summary = run_stage(
        spark_context, ctx, max_messages_per_run=1_000_000, max_messages_per_range=5_000
    )
    assert sum(summary.skipped.values()) == len(demo_topic.bad)
    assert summary.dead_letters == {}
    staged = read_staging(gcs_staging.open(), demo_topic.topic)
    assert set(staged.good) == set(demo_topic.good) and not staged.dead


def test_fail_policy_stops_with_topic_partition_and_offset_and_commits_nothing_of_that_range(
    demo_topic, gcs_staging, spark_context
) -> None:
    ctx = demo_topic.context(gcs_staging, on_bad_input="fail")
    with pytest.raises(Exception) as failure:
        run_stage(
            spark_context, ctx, max_messages_per_run=1_000_000, max_messages_per_range=100_000
        )
    first_bad = min(demo_topic.bad)
    assert f"{demo_topic.topic}[{first_bad[0]}] offset" in str(failure.value)
    staged = read_staging(gcs_staging.open(), demo_topic.topic)
    assert first_bad[0] not in staged.done_ranges or all(
        not (first <= first_bad[1] <= last) for first, last in staged.done_ranges[first_bad[0]]
    )


def _stage_all_in_child(ctx, crash_at: str) -> None:
    if crash_at:
        os.environ["KBQE_CRASH_AT"] = crash_at
    else:
        os.environ.pop("KBQE_CRASH_AT", None)
    store = ctx.staging.open()
    prep = prepare_topic(
        store,
        ctx.kafka,
        ctx.topic_name,
        max_messages_per_run=1_000_000,
        max_messages_per_range=1_500,
        start_policy=ctx.start_policy,
    )
    for rng in prep.plan.ranges:
        stage_range(ctx, rng)


@pytest.mark.slow
@pytest.mark.parametrize(
    "crash_at",
    ["avro_uploaded:1", "avro_uploaded:5", "done_created:1", "done_created:4"],
    ids=["after-first-avro", "after-some-avro", "between-done-files", "later-between-done-files"],
)
def test_a_stage_killed_with_sigkill_and_rerun_is_still_exactly_once(
    local_endpoints, gcs_staging, crash_at
) -> None:
    demo = make_demo_topic(local_endpoints, count=3_000)
    ctx = demo.context(gcs_staging)
    child = multiprocessing.get_context("spawn").Process(
        target=_stage_all_in_child, args=(ctx, crash_at)
    )
    child.start()
    child.join(300)
    assert child.exitcode == -9, "the stage was killed mid-commit"

    _stage_all_in_child(ctx, crash_at="")  # the rerun: prepare (roll forward, orphans) + stage
    assert_exactly_once(demo, gcs_staging.open())


def test_the_native_kernel_and_the_python_path_stage_the_same_files_from_real_kafka(
    demo_topic, tmp_path, spark_context
) -> None:
    """Both stage paths over the same real topic: the same files, the same records in them,
    the same dead letters and done files (sync markers are random per file, so records are
    compared, not bytes; the byte-level proof is test_native_kernel.py's)."""
    import dataclasses

    from kbqe_dagster.resources.staging_store import StagingLocation
    from kbqe_dagster.staging.native_kernel import kernel_built, kernel_status
    from kbqe_dagster_tests.staging.kernel_equality import committed_records

    if not kernel_built():
        pytest.skip(str(kernel_status()))
    # The kernel with its native consumer (the default), the kernel fed by confluent-kafka's
    # consumer, and the Python path.
    ways = {"native": (True, True), "kernel_confluent": (True, False), "python": (False, False)}
    areas = {path: StagingLocation(str(tmp_path / path)) for path in ways}
    runs = {
        path: run_stage(spark_context, dataclasses.replace(
            demo_topic.context(area), native_kernel=ways[path][0], native_consumer=ways[path][1]),
            max_messages_per_run=1_000_000, max_messages_per_range=5_000)
        for path, area in areas.items()
    }  # fmt: skip
    assert [runs[p].stage_path for p in ways] == ["native", "native", "python"]
    assert [runs[p].reader for p in ways] == ["native", "confluent-kafka", "confluent-kafka"]
    assert runs["python"].kernel_handbacks == {}
    assert runs["native"].kernel_handbacks == runs["kernel_confluent"].kernel_handbacks
    # The kernel hands back each schema's and route's first message and every bad one.
    assert sum(runs["native"].kernel_handbacks.values()) < runs["native"].messages / 10

    python = committed_records(areas["python"])
    for way in ("native", "kernel_confluent"):
        staged = committed_records(areas[way])
        assert sorted(staged) == sorted(python), way
        for name in python:
            assert staged[name] == python[name], f"{way}: {name}"
    assert_exactly_once(demo_topic, areas["native"].open())
