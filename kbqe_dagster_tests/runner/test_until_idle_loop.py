"""The loop of ``kbqe run --until-idle``: it stages and loads until there is no backlog and
nothing pending, without waiting; it stops with a one-line reason on failures, quarantines,
load jobs that never finish and runs that never get idle; after the last round it evaluates
completeness once, as the sensor does. Against a fake pipeline."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.resources.kafka.clients import KafkaReadError
from kbqe_dagster.runner.after_load import AfterLoadResult, TableMerge
from kbqe_dagster.runner.after_load_steps import AFTER_LOAD_STEPS
from kbqe_dagster.runner.report import TableCompleteness
from kbqe_dagster.runner.until_idle import Limits, run_until_idle
from kbqe_dagster_tests.runner.fake_pipeline import FakePipeline


class Clock:
    """A clock that only moves when the loop sleeps; records the sleeps."""

    def __init__(self) -> None:
        self.now = 0.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def run(pipeline: FakePipeline, topics=None, clock: Clock | None = None, **kwargs):
    clock = clock or Clock()
    progress: list[str] = []
    report = run_until_idle(
        pipeline,
        topics or tuple(pipeline.lags),
        progress=progress.append,
        sleep=clock.sleep,
        clock=clock,
        **kwargs,
    )
    return report, progress


LOAD_ONLY = {"bytes_loaded": 0, "rows_appended": 0, "bytes_appended": 0, "list_price_usd": 0.0}
"""The Storage Write keys of a table only loaded (the fake's loads report no bytes)."""


def test_a_backlog_is_staged_and_loaded_round_after_round_until_idle() -> None:
    pipeline = FakePipeline({"a": 2_500, "b": 10}, per_run=1_000)

    report, progress = run(pipeline)

    assert report.ok and report.error is None
    assert pipeline.calls.count("stage a") == 3 and pipeline.calls.count("stage b") == 1
    assert report.rounds == 4, "three rounds with work, then one that finds nothing to do"
    assert pipeline.lags == {"a": 0, "b": 0} and pipeline.load_side().busy is False
    assert report.to_json()["topics"] == {
        "a": {
            "staged": 2_497,
            "dead_lettered": 3,
            "tombstones": 3,
            "messages": 2_500,
            "stage_runs": 3,
        },
        "b": {"staged": 9, "dead_lettered": 1, "tombstones": 1, "messages": 10, "stage_runs": 1},
    }
    assert report.to_json()["tables"] == {
        "ds.a": {
            "rows_loaded": 2_497,
            "keys_merged": 0,
            "merge_bytes_processed": None,
            "load_jobs": 3,
            **LOAD_ONLY,
        },
        "ds.b": {
            "rows_loaded": 9,
            "keys_merged": 0,
            "merge_bytes_processed": None,
            "load_jobs": 1,
            **LOAD_ONLY,
        },
    }
    assert progress[-1] == "round 4: idle"
    assert any(line.startswith("round 1: a: staged 999 record(s)") for line in progress)


def test_load_jobs_that_finish_at_once_are_never_waited_for() -> None:
    clock = Clock()
    report, _ = run(FakePipeline({"a": 100}), clock=clock)
    assert report.ok and clock.sleeps == []


def test_with_nothing_new_one_round_runs_no_job_and_succeeds() -> None:
    pipeline = FakePipeline({"a": 0, "b": 0})

    report, progress = run(pipeline)

    assert report.ok and report.rounds == 1 and report.run_ids == []
    assert [c for c in pipeline.calls if not c.startswith("backlog")] == []
    assert report.to_json()["tables"] == {}
    assert report.to_json()["topics"]["a"]["staged"] == 0
    assert progress == ["round 1: idle"]


def test_only_the_given_topics_are_staged() -> None:
    pipeline = FakePipeline({"a": 10, "b": 10})

    report, _ = run(pipeline, topics=("b",))

    assert report.ok and "stage a" not in pipeline.calls and "backlog a" not in pipeline.calls
    assert set(report.topics) == {"b"}


def test_pending_load_jobs_are_polled_with_a_growing_pause_until_they_finish() -> None:
    clock = Clock()
    pipeline = FakePipeline({"a": 100}, polls_to_finish=4)

    report, _ = run(pipeline, clock=clock)

    assert report.ok
    assert pipeline.calls.count("poll") == 4
    assert clock.sleeps == [0.5, 1.0, 2.0, 4.0]
    assert report.tables["ds.a"].rows_loaded == 99


def test_polling_gives_up_after_the_poll_timeout_naming_the_pending_jobs() -> None:
    pipeline = FakePipeline({"a": 100}, polls_to_finish=1_000)

    report, _ = run(pipeline, limits=Limits(poll_timeout_s=30))

    assert not report.ok
    assert report.error.startswith("1 load job(s) still pending after 30s: job-a-0")
    assert "\n" not in report.error


def test_a_failed_stage_run_fails_its_topic_while_the_others_are_staged_and_loaded() -> None:
    pipeline = FakePipeline({"bad": 10, "good": 2_000}, fail_stage={"bad"})

    report, progress = run(pipeline)

    assert not report.ok
    assert report.error == (
        "bad: stage run stage-1 failed: StageRangeFailed: broker gone at offset 7"
    )
    assert pipeline.calls.count("stage bad") == 1, "a failed topic is not staged again"
    assert pipeline.lags["good"] == 0 and report.tables["ds.good"].rows_loaded == 1_998
    assert f"round 1: {report.error}" in progress


def test_a_stage_run_that_commits_no_range_over_a_backlog_is_no_progress() -> None:
    pipeline = FakePipeline({"stuck": 42}, no_progress={"stuck"})

    report, _ = run(pipeline)

    assert not report.ok
    assert report.error == (
        "stuck: stage run stage-1 committed no offset range although 42 message(s) wait from "
        "offsets 0=0"
    )
    assert pipeline.calls.count("stage stuck") == 1


def test_several_failed_topics_are_counted_in_the_one_line_reason() -> None:
    report, _ = run(FakePipeline({"x": 1, "y": 1}, fail_stage={"x", "y"}))
    assert report.error.endswith("(and 1 more topic(s))") and report.error.startswith("x: ")


def test_a_failed_load_run_stops_the_run_at_once() -> None:
    pipeline = FakePipeline({"a": 3_000}, fail_load=True)

    report, _ = run(pipeline)

    assert not report.ok and report.rounds == 1
    assert report.error == ("load cycle run load-2 failed: LoadError: BigQuery unreachable")
    assert pipeline.calls.count("stage a") == 1


def test_quarantined_files_fail_the_run_once_every_other_table_is_loaded() -> None:
    pipeline = FakePipeline({"a": 1_500, "q": 10}, quarantine={"ds.q"})

    report, _ = run(pipeline)

    assert not report.ok
    assert report.error.startswith("quarantined files in ds.q: loading them failed too often")
    assert report.quarantined_tables == ("ds.q",)
    assert report.to_json()["quarantined_tables"] == ["ds.q"]
    assert report.tables["ds.a"].rows_loaded == 1_498 and pipeline.lags["a"] == 0


def test_quarantined_files_from_an_earlier_run_fail_a_run_that_had_nothing_to_do() -> None:
    pipeline = FakePipeline({"a": 0})
    pipeline.quarantined.add("ds.old")

    report, _ = run(pipeline)

    assert not report.ok and "ds.old" in report.error


def test_a_topic_that_never_catches_up_ends_after_max_rounds_saying_what_is_left() -> None:
    pipeline = FakePipeline({"a": 5_000}, per_run=100, arrivals_per_backlog=100)

    report, _ = run(pipeline, limits=Limits(max_rounds=3))

    assert not report.ok and report.rounds == 3
    assert report.error.startswith("not idle after 3 round(s): a lag ")
    assert "raise --max-rounds" in report.error


def test_an_error_of_a_system_ends_the_run_with_its_message() -> None:
    pipeline = FakePipeline({"a": 10})

    def unreachable(topic):
        raise StagingError(f"cannot list gs://bucket/staging for topic {topic}: 503\nbody...")

    pipeline.backlog = unreachable

    report, _ = run(pipeline)

    assert not report.ok
    assert report.error == "cannot list gs://bucket/staging for topic a: 503"


# --- the after-load extension point ----------------------------------------------------------
def test_the_registered_steps_merge_then_erase_and_run_nothing_for_a_plain_pipeline() -> None:
    from kbqe_dagster.core.config.pipeline import parse_pipeline_config
    from kbqe_dagster.runner.after_load import AfterLoadContext, JobRun

    plain = {
        "version": 1,
        "topics": [
            {
                "name": "orders",
                "routing": {"mode": "static", "dataset": "d", "table": "t"},
                "event_time": {"fields": ["ts"]},
            }
        ],
    }
    config = parse_pipeline_config(plain)

    def no_job(*args, **kwargs):
        raise AssertionError("an append-only pipeline without erasure: runs no job")

    assert [s.__name__ for s in AFTER_LOAD_STEPS] == ["_merge_keyed_tables", "_apply_erasures"]
    for step in AFTER_LOAD_STEPS:
        assert step(AfterLoadContext(1, config, {}, no_job)) == AfterLoadResult()

    # With erasure: the erasure step runs the erasure job, tagged for dagster.yaml's limit.
    erasing = parse_pipeline_config({**plain, "erasure": {"tables": {"d.t": {"columns": ["c"]}}}})
    ran = []

    def run_job(name, run_config=None, tags=None):
        ran.append((name, dict(tags or {})))
        return JobRun(name, "run-1", ok=True)

    assert AFTER_LOAD_STEPS[1](AfterLoadContext(1, erasing, {}, run_job)) == AfterLoadResult(
        run_ids=("run-1",)
    )
    assert ran == [("erasure", {"kbqe/erasure": "1"})]


def test_after_load_steps_run_every_round_after_the_loads_with_what_the_round_loaded() -> None:
    pipeline = FakePipeline({"a": 1_500}, per_run=1_000, polls_to_finish=1)
    seen = []

    def merge(context):
        loaded = {t: (load.rows, load.offset_ranges) for t, load in context.loaded.items()}
        seen.append((context.round, loaded, tuple(j.job_id for j in pipeline.pending)))
        run = context.run_job("merge_job", None, {"kbqe/table": "ds.a"})
        rows = sum(load.rows for load in context.loaded.values())
        return AfterLoadResult(
            {"ds.a": TableMerge(rows // 10, 1_000 if rows else None)}, run_ids=(run.run_id,)
        )

    report, _ = run(pipeline, after_load_steps=[merge])

    assert report.ok
    assert seen == [
        (1, {"ds.a": (999, (("a", 0, 0, 999),))}, ()),
        (2, {"ds.a": (499, (("a", 0, 1_000, 1_499),))}, ()),
        (3, {}, ()),
    ], "called once per round, after its load jobs finished, also when nothing was loaded"
    assert report.tables["ds.a"].keys_merged == 99 + 49
    assert report.tables["ds.a"].merge_bytes_processed == 2_000
    assert pipeline.calls.count("job merge_job") == 3
    assert len([r for r in report.run_ids if r.startswith("merge_job")]) == 3


def test_an_after_load_step_with_work_left_keeps_the_run_going() -> None:
    pipeline = FakePipeline({"a": 0})
    left = [2]

    def merge(context):
        left[0] -= 1
        return AfterLoadResult(pending=left[0] > 0)

    report, _ = run(pipeline, after_load_steps=[merge])

    assert report.ok and report.rounds == 2


def test_an_after_load_step_error_stops_the_run_naming_the_step() -> None:
    def merge_keyed_tables(context):
        return AfterLoadResult(error="inventory.customers: MERGE failed: quota exceeded")

    report, _ = run(FakePipeline({"a": 10}), after_load_steps=[merge_keyed_tables])

    assert not report.ok and report.rounds == 1
    assert report.error == "merge_keyed_tables: inventory.customers: MERGE failed: quota exceeded"


@pytest.mark.parametrize("merged_bytes", [None, 0, 512])
def test_merge_bytes_stay_null_until_a_merge_reports_them(merged_bytes) -> None:
    def merge(context):
        return AfterLoadResult({"ds.a": TableMerge(1, merged_bytes)})

    report, _ = run(FakePipeline({"a": 0}), after_load_steps=[merge])

    assert report.to_json()["tables"]["ds.a"]["merge_bytes_processed"] == merged_bytes


def test_small_topics_share_stage_runs_up_to_max_topics_per_run() -> None:
    pipeline = FakePipeline({"a": 10, "b": 20, "c": 30}, max_topics_per_run=2)

    report, progress = run(pipeline)

    assert report.ok
    assert [c for c in pipeline.calls if c.startswith("stage")] == ["stage a,b", "stage c"]
    assert {t: totals.messages for t, totals in report.topics.items()} == {
        "a": 10,
        "b": 20,
        "c": 30,
    }
    assert all(totals.stage_runs == 1 for totals in report.topics.values())
    assert "round 1: b: staged 19 record(s) from 20 message(s)" in "\n".join(progress)


def test_a_failed_grouped_run_stages_its_topics_alone_and_fails_only_the_bad_one() -> None:
    pipeline = FakePipeline({"bad": 10, "good": 10}, max_topics_per_run=10, fail_stage={"bad"})

    report, progress = run(pipeline)

    assert not report.ok
    assert [c for c in pipeline.calls if c.startswith("stage")] == [
        "stage bad,good",
        "stage bad",
        "stage good",
    ]
    assert report.error.startswith("bad: stage run stage-")
    assert pipeline.lags["good"] == 0 and report.tables["ds.good"].rows_loaded == 9
    assert any("their next runs stage them one by one" in line for line in progress)


# --- completeness after the last round (what a cron job gets without the daemon) ----------
def declared_per_loaded_table(pipeline: FakePipeline) -> dict[str, TableCompleteness]:
    """Every table that loaded something: 2026-11-23 complete, declared now; late records
    of 11-22 in ds.a."""
    return {
        f"ds.{t}": TableCompleteness(
            {
                "partitioning": "day",
                "newest_complete": "2026-11-23",
                "late_after_complete": 4 if t == "a" else 0,
                "late_after_complete_by_day": {"2026-11-22": 4} if t == "a" else {},
            },
            ("2026-11-23",),
        )
        for t, offset in pipeline.offsets.items()
        if offset
    }


def test_completeness_is_evaluated_once_after_the_last_round_and_reported_per_table() -> None:
    pipeline = FakePipeline(
        {"a": 1_500, "b": 10},
        per_run=1_000,
        polls_to_finish=1,
        completeness_of=declared_per_loaded_table,
    )

    report, progress = run(pipeline)

    assert report.ok
    assert pipeline.evaluations == [{"a": 1_500, "b": 10, "pending jobs": 0}], (
        "once, after everything was staged and every load job finished"
    )
    assert report.to_json()["completeness"] == {
        "ds.a": {
            "partitioning": "day",
            "newest_complete": "2026-11-23",
            "late_after_complete": 4,
            "late_after_complete_by_day": {"2026-11-22": 4},
            "newly_complete": ["2026-11-23"],
        },
        "ds.b": {
            "partitioning": "day",
            "newest_complete": "2026-11-23",
            "late_after_complete": 0,
            "late_after_complete_by_day": {},
            "newly_complete": ["2026-11-23"],
        },
    }
    assert progress[-2:] == [
        "completeness: ds.a: newest complete 2026-11-23; declared 2026-11-23; "
        "4 late after complete",
        "completeness: ds.b: newest complete 2026-11-23; declared 2026-11-23; "
        "0 late after complete",
    ]


def test_a_run_that_stopped_still_evaluates_what_it_loaded() -> None:
    pipeline = FakePipeline(
        {"a": 1_500, "q": 10}, quarantine={"ds.q"}, completeness_of=declared_per_loaded_table
    )

    report, _ = run(pipeline)

    assert not report.ok and report.error.startswith("quarantined files in ds.q")
    assert len(pipeline.evaluations) == 1
    assert report.completeness["ds.a"].late_after_complete == 4


def test_an_evaluation_that_fails_fails_the_run_unless_it_already_failed() -> None:
    def unreachable(pipeline):
        raise KafkaReadError("cannot read the watermarks of topic a: broker down\ntrace...")

    report, progress = run(FakePipeline({"a": 10}, completeness_of=unreachable))
    assert not report.ok and report.completeness == {}
    assert report.error == (
        "completeness not evaluated: cannot read the watermarks of topic a: broker down"
    )
    assert progress[-1] == report.error

    failed = FakePipeline({"a": 10}, fail_load=True, completeness_of=unreachable)
    report, _ = run(failed)
    assert report.error == "load cycle run load-2 failed: LoadError: BigQuery unreachable"


def test_text_output_shows_completeness_per_table() -> None:
    from kbqe_dagster.cli.run import render

    report, _ = run(FakePipeline({"a": 10}, completeness_of=declared_per_loaded_table))

    assert render(report).splitlines()[-4:] == [
        "table  newest complete  declared now  late after complete",
        "ds.a   2026-11-23       2026-11-23    4",
        "",
        f"idle after 2 round(s); {len(report.run_ids)} run(s) recorded in the Dagster instance",
    ]
