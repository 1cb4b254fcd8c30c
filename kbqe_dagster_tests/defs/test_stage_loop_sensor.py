"""Who stages a topic that may write a ``delivery: storage_write`` table under the daemon, with
Dagster's own context builders: ``stage_loop_sensor`` launches one loop run holding those
topics that no run in flight holds (again once it ended), ``kafka_backlog_sensor`` observes
them but launches batch runs for the other topics only; a loop run is a stage run in flight
(an ordinary run yields it its topics); a loop run launched with another pipeline is asked to
stop; a loop run stops when terminated or tagged, an interrupt ends it after its round; its
rounds are reported folded every ``report_every_s``; the instance bounds loop runs apart from
stage runs."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import dagster as dg
import pytest
import yaml

from kbqe_dagster.core.protocol.offsets import RangePlan, Watermarks
from kbqe_dagster.defs.keys import (
    LOOP_STATE_TAG,
    PIPELINE_DIGEST_TAG,
    STAGE_LOOP_TAG,
    STAGE_TAG,
    STANDBY_TAG,
    STOP_TAG,
    TOPICS_TAG,
    Destinations,
)
from kbqe_dagster.defs.staging import sensors
from kbqe_dagster.defs.staging.claims import topics_in_flight, yielded_to_older_runs
from kbqe_dagster.defs.staging.jobs import pipeline_digest, stage_job, stage_loop_job
from kbqe_dagster.defs.staging.loop_run import (
    LoopReport,
    LoopStop,
    interrupts_between_rounds,
    wait_for_older_runs,
)
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource, StagingResource
from kbqe_dagster.staging.backlog import PartitionBacklog, TopicBacklog
from kbqe_dagster.staging.context import RangeResult
from kbqe_dagster.staging.job import StageSummary
from kbqe_dagster.staging.prepare import Preparation
from kbqe_dagster.staging.range_sink import TableDelivery
from kbqe_dagster.staging.stage_loop import LoopRound

OLD = 16 * 60  # seconds: past allowed_latency


@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def pipeline_text(extra_topic: str | None = None) -> str:
    """``orders`` and ``refunds`` feed the storage_write table sales.orders; ``views`` a load
    table."""
    names = {"orders": "orders", "refunds": "orders", "views": "views"}
    if extra_topic:
        names[extra_topic] = "orders"
    return yaml.safe_dump(
        {
            "version": 1,
            "topics": [
                {
                    "name": name,
                    "event_time": {"fields": ["ts"]},
                    "routing": {"mode": "static", "dataset": "sales", "table": table},
                }
                for name, table in names.items()
            ],
            "staging": {"max_messages_per_batch": 1000, "allowed_latency": "15m"},
            "tables": {"sales.orders": {"delivery": "storage_write"}},
        }
    )


@pytest.fixture
def resources(tmp_path: Path) -> dict:
    path = tmp_path / "pipeline.yaml"
    path.write_text(pipeline_text())
    (tmp_path / "staging").mkdir()
    return {
        "pipeline": PipelineResource(config_path=str(path), content=path.read_text()),
        "kafka": KafkaResource(bootstrap_servers="127.0.0.1:1"),
        "staging": StagingResource(url=str(tmp_path / "staging")),
    }


def loop_tick(instance, resources, cursor: str | None = None) -> dg.SensorResult:
    context = dg.build_sensor_context(instance=instance, resources=resources, cursor=cursor)
    return sensors.stage_loop_sensor(context)


def started(
    instance, job_name: str, tags: dict, status=dg.DagsterRunStatus.STARTED
) -> dg.DagsterRun:
    return instance.add_run(
        dg.DagsterRun(job_name=job_name, run_id=str(uuid.uuid4()), status=status, tags=tags)
    )


def test_the_loop_sensor_launches_one_run_holding_the_storage_write_topics(
    instance, resources
) -> None:
    result = loop_tick(instance, resources)
    [request] = result.run_requests
    assert request.tags[TOPICS_TAG] == "orders,refunds"
    assert "kbqe/topic" not in request.tags  # no per-topic limit: see stage_loop_tags
    assert request.tags[PIPELINE_DIGEST_TAG] == pipeline_digest(resources["pipeline"])
    assert request.run_config == {
        "ops": {"staging": {"config": {"topics": ["orders", "refunds"], "loop": True}}}
    }
    assert (request.run_key, result.cursor) == ("stage_loop:1", "1")
    assert sensors.stage_loop_sensor.job_name == "stage_loop_job"


def test_topics_held_by_a_run_in_flight_are_left_to_it_and_relaunched_once_it_ended(
    instance, resources
) -> None:
    digest = pipeline_digest(resources["pipeline"])
    loop = started(instance, "stage_loop_job", {TOPICS_TAG: "orders", PIPELINE_DIGEST_TAG: digest})
    started(instance, "stage_job", {"kbqe/topic": "refunds"})
    assert loop_tick(instance, resources).run_requests == []

    instance.report_run_canceled(loop)  # terminated: its topic is free again
    [request] = loop_tick(instance, resources, cursor="7").run_requests
    assert request.tags[TOPICS_TAG] == "orders"
    assert request.run_key == "stage_loop:8"


def test_a_loop_run_of_another_pipeline_is_asked_to_stop_and_succeeded_once_it_ended(
    instance, resources, tmp_path
) -> None:
    before = PipelineResource(
        config_path=str(tmp_path / "pipeline.yaml"), content=pipeline_text(extra_topic="returns")
    )
    old = started(
        instance,
        "stage_loop_job",
        {TOPICS_TAG: "orders,refunds,returns", PIPELINE_DIGEST_TAG: pipeline_digest(before)},
    )
    same = started(
        instance,
        "stage_loop_job",
        {TOPICS_TAG: "refunds", PIPELINE_DIGEST_TAG: pipeline_digest(resources["pipeline"])},
    )

    assert loop_tick(instance, resources).run_requests == []
    assert instance.get_run_by_id(old.run_id).tags[STOP_TAG] == "config_changed"
    assert STOP_TAG not in instance.get_run_by_id(same.run_id).tags

    instance.report_run_canceled(old)  # it ended after its round
    [request] = loop_tick(instance, resources).run_requests
    assert request.tags[TOPICS_TAG] == "orders"


def test_a_looping_run_gets_one_warm_standby_which_takes_over_once_it_ended(
    instance, resources
) -> None:
    digest = pipeline_digest(resources["pipeline"])
    tags = {TOPICS_TAG: "orders,refunds", PIPELINE_DIGEST_TAG: digest}
    loop = started(instance, "stage_loop_job", tags)
    assert loop_tick(instance, resources).run_requests == [], "starting: no second cold start"

    instance.add_run_tags(loop.run_id, {LOOP_STATE_TAG: "looping"})
    [request] = loop_tick(instance, resources, cursor="3").run_requests
    assert request.tags[STANDBY_TAG] == "true" and request.tags[TOPICS_TAG] == "orders,refunds"
    assert request.run_key == "stage_loop:4"

    standby = started(instance, "stage_loop_job", {**request.tags, LOOP_STATE_TAG: "warm"})
    assert loop_tick(instance, resources).run_requests == []
    # The standby loops only once no older run holds its topics (loop_run.py waits for it).
    assert yielded_to_older_runs(instance, standby.run_id, ["orders", "refunds"]) == {
        "orders",
        "refunds",
    }
    instance.report_run_failed(loop)  # its run worker killed: the code server saw it die
    assert yielded_to_older_runs(instance, standby.run_id, ["orders", "refunds"]) == frozenset()


def test_a_deploy_hands_a_looping_run_over_to_a_warm_standby_of_the_new_pipeline(
    instance, resources, tmp_path
) -> None:
    before = PipelineResource(
        config_path=str(tmp_path / "pipeline.yaml"), content=pipeline_text(extra_topic="returns")
    )
    tags = {TOPICS_TAG: "orders,refunds", PIPELINE_DIGEST_TAG: pipeline_digest(before)}
    old = started(instance, "stage_loop_job", {**tags, LOOP_STATE_TAG: "looping"})
    old_standby = started(instance, "stage_loop_job", {**tags, LOOP_STATE_TAG: "warm"})

    [request] = loop_tick(instance, resources).run_requests
    assert request.tags[STANDBY_TAG] == "true"
    assert request.tags[PIPELINE_DIGEST_TAG] == pipeline_digest(resources["pipeline"])
    assert instance.get_run_by_id(old_standby.run_id).tags[STOP_TAG] == "config_changed"
    assert STOP_TAG not in instance.get_run_by_id(old.run_id).tags, "looping until a warm one"

    new = started(instance, "stage_loop_job", request.tags)
    assert loop_tick(instance, resources).run_requests == []
    assert STOP_TAG not in instance.get_run_by_id(old.run_id).tags
    instance.add_run_tags(new.run_id, {LOOP_STATE_TAG: "warm"})
    assert loop_tick(instance, resources).run_requests == []
    assert instance.get_run_by_id(old.run_id).tags[STOP_TAG] == "config_changed"


def test_a_standby_stands_by_warm_until_the_run_it_follows_ended_then_takes_over(
    instance,
) -> None:
    active = started(instance, "stage_loop_job", {TOPICS_TAG: "orders"})
    standby = started(instance, "stage_loop_job", {TOPICS_TAG: "orders", STANDBY_TAG: "true"})
    context = SimpleNamespace(instance=instance, run=standby, log=logging.getLogger("t"))
    states, asked = [], []

    def should_stop() -> str | None:
        asked.append(True)
        if len(asked) == 3:
            instance.report_run_failed(active)  # its worker killed: the code server saw it
        return None

    waited = wait_for_older_runs(
        context, ["orders"], should_stop, 60, poll_s=0.01, on_wait=lambda: states.append("warm")
    )
    assert (waited, states) == (None, ["warm"]), "took over, after standing by once"
    assert len(asked) >= 3


def test_a_run_recorded_as_ended_never_takes_over(instance) -> None:
    """Its process lives on (a worker taken for dead): no older run holds its topics for it,
    but it is not in flight either."""
    gone = started(instance, "stage_loop_job", {TOPICS_TAG: "orders"})
    instance.report_run_failed(gone)
    context = SimpleNamespace(instance=instance, run=gone, log=logging.getLogger("t"))
    assert wait_for_older_runs(context, ["orders"], LoopStop(instance, gone.run_id), 60) == (
        "terminated"
    )


def test_without_standbys_a_looping_run_has_none(instance, tmp_path) -> None:
    path = tmp_path / "no_standby.yaml"
    path.write_text(pipeline_text() + "stage_runs: {loop_standby: false}\n")
    pipeline = PipelineResource(config_path=str(path), content=path.read_text())
    tags = {TOPICS_TAG: "orders,refunds", PIPELINE_DIGEST_TAG: pipeline_digest(pipeline)}
    started(instance, "stage_loop_job", {**tags, LOOP_STATE_TAG: "looping"})
    resources = {"pipeline": pipeline, "kafka": KafkaResource(bootstrap_servers="127.0.0.1:1")}
    assert loop_tick(instance, resources).run_requests == []


def test_no_loop_run_without_a_storage_write_table(instance, tmp_path) -> None:
    path = tmp_path / "plain.yaml"
    path.write_text(pipeline_text().replace("storage_write", "load"))
    result = loop_tick(
        instance,
        {
            "pipeline": PipelineResource(config_path=str(path)),
            "kafka": KafkaResource(bootstrap_servers="127.0.0.1:1"),
        },
    )
    assert result.run_requests == [] and "storage_write" in result.skip_reason.skip_message


def test_the_backlog_sensor_observes_loop_topics_but_launches_batch_runs_for_the_others(
    instance, resources, monkeypatch
) -> None:
    def fleet_backlog(store, settings, topics, **kwargs):
        oldest = int((time.time() - OLD) * 1000)
        return {t: TopicBacklog(t, (PartitionBacklog(0, 0, 50, 0, 50),), oldest) for t in topics}

    monkeypatch.setattr(sensors, "fleet_backlog", fleet_backlog)
    result = sensors.kafka_backlog_sensor(
        dg.build_sensor_context(instance=instance, resources=resources)
    )
    assert [r.tags.get("kbqe/topic") for r in result.run_requests] == ["views"]
    assert sorted(e.asset_key.path[1] for e in result.asset_events) == [
        "orders",
        "refunds",
        "views",
    ]


def test_a_loop_run_is_a_stage_run_in_flight_and_an_ordinary_run_yields_it_its_topics(
    instance,
) -> None:
    loop = started(instance, "stage_loop_job", {TOPICS_TAG: "orders,refunds"})
    younger = started(instance, "stage_job", {TOPICS_TAG: "refunds,views"})
    assert topics_in_flight(instance) == {"orders", "refunds", "views"}
    assert yielded_to_older_runs(instance, younger.run_id, ["refunds", "views"]) == {"refunds"}
    assert yielded_to_older_runs(instance, loop.run_id, ["orders", "refunds"]) == frozenset()


def test_a_loop_run_stops_when_terminated_or_tagged_and_reads_the_run_at_most_every_second(
    instance,
) -> None:
    now = [0.0]
    run = started(instance, "stage_loop_job", {TOPICS_TAG: "orders"})
    stop = LoopStop(instance, run.run_id, check_every_s=1.0, clock=lambda: now[0])
    assert stop() is None
    instance.add_run_tags(run.run_id, {STOP_TAG: "config_changed"})
    now[0] = 0.5
    assert stop() is None, "not read again within the second"
    now[0] = 1.0
    assert stop() == "config_changed"

    other = started(instance, "stage_loop_job", {TOPICS_TAG: "refunds"})
    stop = LoopStop(instance, other.run_id, clock=lambda: now[0])
    instance.report_run_canceling(other)
    assert stop() == "terminated"

    # Recorded as ended while this process still loops (its run worker was taken for dead):
    # it stops, never looping beside the standby that takes over.
    gone = started(instance, "stage_loop_job", {TOPICS_TAG: "views"})
    stop = LoopStop(instance, gone.run_id, clock=lambda: now[0])
    instance.report_run_failed(gone)
    assert stop() == "terminated"
    interrupted = LoopStop(instance, str(uuid.uuid4()))
    interrupted.interrupted = True
    assert interrupted() == "terminated"


def test_the_instance_bounds_loop_runs_apart_from_stage_runs(tmp_path) -> None:
    shutil.copyfile(Path(__file__).resolve().parents[2] / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
    assert {"key": STAGE_LOOP_TAG, "limit": 4} in limits  # two loop runs, each with a standby
    assert stage_loop_job.tags == {STAGE_LOOP_TAG: "true"}  # never kbqe/stage: see defs/keys.py
    assert STAGE_TAG in stage_job.tags


def test_an_interrupt_ends_the_loop_after_its_round_and_one_much_later_interrupts_at_once(
    instance,
) -> None:
    seen: list[int] = []
    now = [0.0]
    previous = signal.signal(signal.SIGINT, lambda signo, frame: seen.append(signo))
    try:
        stop = LoopStop(instance, str(uuid.uuid4()))
        with interrupts_between_rounds(stop, clock=lambda: now[0]):
            os.kill(os.getpid(), signal.SIGINT)
            assert stop() == "terminated" and seen == []
            now[0] = 2.0  # Ctrl-C's copy forwarded by the run worker: the same request
            os.kill(os.getpid(), signal.SIGINT)
            assert seen == []
            now[0] = 10.0  # asked again, deliberately: interrupted at once
            os.kill(os.getpid(), signal.SIGINT)
            assert seen == [signal.SIGINT]
        os.kill(os.getpid(), signal.SIGINT)
        assert seen == [signal.SIGINT] * 2, "the handler before the loop is back"
    finally:
        signal.signal(signal.SIGINT, previous)


class FakeContext:
    """What LoopReport uses of an asset's context."""

    def __init__(self) -> None:
        self.events: list = []
        self.log = logging.getLogger("fake-context")

    def log_event(self, event) -> None:
        self.events.append(event)


def _busy_round(number: int, start: int, last: int) -> LoopRound:
    result = RangeResult(
        "orders",
        0,
        start,
        last,
        last,
        last - start + 1,
        last - start + 1,
        (),
        0,
        delivered=(
            TableDelivery(
                "sales",
                "orders",
                "s0",
                start,
                last - start + 1,
                last - start + 1,
                0,
                10,
                (("2026-11-25", last - start + 1),),
                1,
            ),
        ),
    )
    prep = Preparation((), (), (), RangePlan((), ()))
    marks = {("orders", 0): Watermarks(0, last + 1)}
    return LoopRound(
        number,
        0.0,
        0.5,
        (StageSummary("orders", prep, (result,), 0.5),),
        marks,
        {("orders", 0): last + 1},
    )


def test_the_rounds_are_reported_folded_every_report_every_s(tmp_path) -> None:
    now = [0.0]
    path = tmp_path / "pipeline.yaml"
    path.write_text(pipeline_text())
    destinations = Destinations.from_config(PipelineResource(config_path=str(path)).load())
    context = FakeContext()
    report = LoopReport(context, destinations, ["orders"], 30.0, clock=lambda: now[0])
    for number, (start, last) in enumerate([(0, 9), (10, 19), (20, 24)], 1):
        now[0] += 1
        report(_busy_round(number, start, last))
    report(LoopRound(4, 0.0, 0.01, (), {("orders", 0): Watermarks(0, 25)}, {("orders", 0): 25}))
    assert context.events == [], "nothing before report_every_s"
    now[0] = 30.0
    report(LoopRound(5, 0.0, 0.01, (), {("orders", 0): Watermarks(0, 27)}, {("orders", 0): 25}))
    materializations = [e for e in context.events if isinstance(e, dg.AssetMaterialization)]
    [one] = materializations  # three busy rounds, one table, one day, one partition
    assert one.metadata["dagster/row_count"].value == 25
    assert one.metadata["stream_rows"].value == [0, 24]
    [check] = [e for e in context.events if isinstance(e, dg.AssetCheckEvaluation)]
    assert check.passed
    [lag] = [e for e in context.events if isinstance(e, dg.AssetObservation)]
    assert (lag.asset_key, lag.metadata["lag"].value) == (dg.AssetKey(["kafka", "orders"]), 2)
    assert report.metadata() == {"idle_round_seconds": 0.01, "busy_round_seconds": 0.5}
    report.flush()
    assert len(context.events) == 3, "nothing new to report"


def test_a_loop_run_silent_for_ten_minutes_is_marked_failed_and_its_topics_relaunched(
    instance, resources
) -> None:
    """A run worker killed without Dagster noticing (the default run launcher cannot check a
    worker's health) would hold its topics for ever: once its run has logged nothing for
    SILENT_LOOP_S, the sensor marks it failed and launches a new loop run in the same tick."""
    digest = pipeline_digest(resources["pipeline"])
    tags = {TOPICS_TAG: "orders,refunds", PIPELINE_DIGEST_TAG: digest}
    loop = started(instance, "stage_loop_job", tags)
    instance.report_engine_event("stage loop: 30 round(s) since the last report", loop)
    assert loop_tick(instance, resources).run_requests == []  # alive: just reported

    with dg.build_sensor_context(instance=instance, resources=resources) as context:
        later = time.time() + sensors.SILENT_LOOP_S - 5
        assert sensors.fail_silent_loop_runs(context, now=later) == []
        much_later = time.time() + sensors.SILENT_LOOP_S + 5
        assert sensors.fail_silent_loop_runs(context, now=much_later) == [loop.run_id]
    assert instance.get_run_by_id(loop.run_id).status == dg.DagsterRunStatus.FAILURE
    [request] = loop_tick(instance, resources).run_requests
    assert request.tags[TOPICS_TAG] == "orders,refunds"
