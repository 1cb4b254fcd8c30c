"""How the runner reads the Dagster runs it executes: a failed run gives a one-line reason
that still names the partition and offset, never an exception; materializations become the
stage and load totals; every run is tagged as launched by ``kbqe run --until-idle``. Tiny
jobs on an ephemeral instance (the real jobs run in ``test_run_until_idle_on_local_stack.py``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from types import SimpleNamespace

import dagster as dg
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.resources.kafka.clients import TopicMissing
from kbqe_dagster.runner import in_process
from kbqe_dagster.runner.after_load import JobRun
from kbqe_dagster.runner.in_process import (
    LAUNCHED_BY,
    LAUNCHED_BY_TAG,
    RUNNER_HOST_TAG,
    RUNNER_PID_TAG,
    InProcessPipeline,
    execute_job,
    fail_abandoned_runs,
    load_outcome,
    one_line_error,
    stage_outcome,
)
from kbqe_dagster.runner.report import UntilIdleReport
from kbqe_dagster.staging.backlog import PartitionBacklog, TopicBacklog

RANGE_FAILED = (
    "t: 1 of 3 range(s) failed (the others are committed; the failed ones are redone by the "
    "next run):\n  t[0] 0..10: StageRangeFailed: t[0] offset 5: bad_magic: bad magic byte 0x01"
)


@dg.op
def explode() -> None:
    raise StagingError(RANGE_FAILED)


@dg.job
def exploding() -> None:
    explode()


@dg.op(out={})
def loads():
    """Two DAY partitions of one job (the same file range in both), one of another table."""
    ranges = [{"topic": "t", "partition": 0, "first": 0, "last": 9}]
    for table, key, day, rows, job in (
        ("ds.a", "a", "2024-09-13", 4, "j1"),
        ("ds.a", "a", "2024-09-14", 6, "j1"),
        ("ds.b", "b", "2024-09-14", 5, "j2"),
    ):
        yield dg.AssetMaterialization(
            asset_key=["bigquery", "ds", key],
            partition=day,
            metadata={
                "table": table,
                "job_id": job,
                "dagster/row_count": rows,
                "job_input_bytes": {"j1": 7000, "j2": 300}[job],
                "offset_ranges": dg.MetadataValue.json(ranges),
            },
        )


@dg.job
def loading() -> None:
    loads()


DEFS = dg.Definitions(jobs=[exploding, loading])


@pytest.fixture
def instance():
    with dg.DagsterInstance.ephemeral() as instance:
        yield instance


def test_a_failed_run_is_a_one_line_reason_naming_partition_and_offset(instance, capfd) -> None:
    run = execute_job(DEFS, instance, "exploding", tags={"kbqe/topic": "t"})

    assert run.ok is False
    assert run.error == (
        "StagingError: t: 1 of 3 range(s) failed (the others are committed; the failed ones "
        "are redone by the next run): t[0] 0..10: StageRangeFailed: t[0] offset 5: bad_magic: "
        "bad magic byte 0x01"
    )
    assert 'File "' not in capfd.readouterr().err, "the traceback stays in the instance"
    recorded = instance.get_run_by_id(run.run_id)
    assert recorded.status == dg.DagsterRunStatus.FAILURE
    assert recorded.tags[LAUNCHED_BY_TAG] == LAUNCHED_BY and recorded.tags["kbqe/topic"] == "t"


def test_the_load_totals_are_summed_per_table_with_each_job_and_range_once(instance) -> None:
    outcome = load_outcome(execute_job(DEFS, instance, "loading"))

    assert outcome.ok and outcome.error is None
    assert {
        t: (load.rows, load.job_ids, load.offset_ranges) for t, load in outcome.tables.items()
    } == {
        "ds.a": (10, ("j1",), (("t", 0, 0, 9),)),
        "ds.b": (5, ("j2",), (("t", 0, 0, 9),)),
    }
    assert {t: load.bytes for t, load in outcome.tables.items()} == {"ds.a": 7000, "ds.b": 300}, (
        "a job's input bytes once, not once per day it wrote"
    )


def test_the_stage_totals_come_from_the_staging_materialization() -> None:
    metadata = {
        "dagster/row_count": 90,
        "messages": 100,
        "dead_letters": 7,
        "dead_letters_by_reason": {"tombstone": 2, "bad_magic": 5},
        "skipped_by_reason": {"tombstone": 3},
        "ranges": ["t[0] 0..49", "t[1] 0..49"],
    }
    run = JobRun("stage_job", "r1", True, materializations=((("staging",), metadata),))

    outcome = stage_outcome("t", run)

    assert (
        outcome.records,
        outcome.messages,
        outcome.dead_letters,
        outcome.tombstones,
        outcome.ranges,
    ) == (90, 100, 7, 5, 2)


def test_a_grouped_stage_run_gives_each_topic_its_own_share() -> None:
    metadata = {
        "topics": ["t", "u", "v"],
        "dagster/row_count": 95,
        "messages": 100,
        "ranges": ["t[0] 0..49", "u[0] 0..49"],
        "by_topic": {
            "t": {
                "dagster/row_count": 45,
                "messages": 50,
                "dead_letters": 5,
                "dead_letters_by_reason": {"tombstone": 1},
                "ranges": ["t[0] 0..49"],
            },
            "u": {
                "dagster/row_count": 50,
                "messages": 50,
                "dead_letters": 0,
                "ranges": ["u[0] 0..49"],
            },
        },
    }
    run = JobRun("stage_job", "r1", True, materializations=((("staging",), metadata),))

    t, u, v = (stage_outcome(topic, run) for topic in ("t", "u", "v"))

    assert (t.records, t.messages, t.dead_letters, t.tombstones, t.ranges) == (45, 50, 5, 1, 1)
    assert (u.records, u.messages, u.ranges) == (50, 50, 1)
    assert (v.ok, v.records, v.ranges) == (True, 0, 0)  # left to an older run: no progress


def test_the_bytes_appended_through_storage_write_come_with_each_topics_share() -> None:
    appended = {"acme_web.clicks": {"rows": 40, "bytes": 3200, "list_price_usd": 0.0}}
    metadata = {
        "topics": ["t", "u"],
        "dagster/row_count": 60,
        "messages": 60,
        "storage_write_by_table": appended,
        "by_topic": {
            "t": {"dagster/row_count": 50, "messages": 50, "storage_write_by_table": appended},
            "u": {"dagster/row_count": 10, "messages": 10, "storage_write_by_table": {}},
        },
    }
    run = JobRun("stage_job", "r1", True, materializations=((("staging",), metadata),))

    t, u = (stage_outcome(topic, run) for topic in ("t", "u"))

    assert t.appended == {"acme_web.clicks": (40, 3200)} and u.appended == {}
    report = UntilIdleReport({})
    report.add_stage(t)
    report.add_stage(u)
    assert (
        report.tables["acme_web.clicks"].rows_appended,
        report.tables["acme_web.clicks"].bytes_appended,
    ) == (40, 3200)


def test_a_keyed_stage_run_reports_its_tombstones_itself() -> None:
    metadata = {
        "dagster/row_count": 8,
        "messages": 10,
        "dead_letters": 0,
        "tombstones": 2,
        "ranges": ["t[0] 0..9"],
    }
    run = JobRun("stage_job", "r1", True, materializations=((("staging",), metadata),))
    assert stage_outcome("t", run).tombstones == 2


def test_a_stage_run_that_failed_before_reporting_counts_nothing() -> None:
    outcome = stage_outcome("t", JobRun("stage_job", "r1", False, "StagingError: x"))
    assert (outcome.ok, outcome.error, outcome.records, outcome.ranges) == (
        False,
        "StagingError: x",
        0,
        0,
    )


@pytest.mark.parametrize(
    "message, cls_name, expected",
    [
        ("kbqe_dagster.core.errors.LoadError: a\n  b\n", "LoadError", "LoadError: a b"),
        ("ValueError: plain", "ValueError", "ValueError: plain"),
        ("a message without its class", "LoadError", "a message without its class"),
        ("", "LoadError", "LoadError"),
        ("x" * 600, "E", "x" * 499 + "…"),
    ],
)
def test_one_line_error(message, cls_name, expected) -> None:
    assert one_line_error(message, cls_name) == expected


# --- runs of a runner that died --------------------------------------------------------------
def test_runs_left_in_flight_by_a_dead_runner_on_this_host_are_failed_and_free_their_slot(
    tmp_path,
) -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    with dg.DagsterInstance.local_temp(str(tmp_path)) as instance:
        storage = instance.event_log_storage
        storage.set_concurrency_slots("bigquery_load", 1)

        def run(host: str, pid: int, launched_by: str = LAUNCHED_BY) -> str:
            created = instance.create_run_for_job(
                job_def=exploding,
                status=dg.DagsterRunStatus.STARTED,
                tags={
                    LAUNCHED_BY_TAG: launched_by,
                    RUNNER_HOST_TAG: host,
                    RUNNER_PID_TAG: str(pid),
                },
            )
            return created.run_id

        abandoned = run("here", dead.pid)
        storage.claim_concurrency_slot("bigquery_load", abandoned, "load_cycle")
        running = run("here", os.getpid())
        elsewhere = run("there", dead.pid)
        not_ours = run("here", dead.pid, launched_by="dagster-daemon")

        assert fail_abandoned_runs(instance, host="here") == [abandoned]

        status = {
            r: instance.get_run_by_id(r).status for r in (abandoned, running, elsewhere, not_ours)
        }
        assert status == {
            abandoned: dg.DagsterRunStatus.FAILURE,
            running: dg.DagsterRunStatus.STARTED,
            elsewhere: dg.DagsterRunStatus.STARTED,
            not_ours: dg.DagsterRunStatus.STARTED,
        }
        assert storage.get_concurrency_info("bigquery_load").active_slot_count == 0
        assert fail_abandoned_runs(instance, host="here") == [], "once is enough"


def test_each_run_names_the_runner_process_that_executes_it(instance) -> None:
    run = instance.get_run_by_id(execute_job(DEFS, instance, "loading").run_id)
    assert run.tags[RUNNER_PID_TAG] == str(os.getpid())
    assert run.tags[RUNNER_HOST_TAG] == socket.gethostname()


def test_backlogs_are_read_at_once_and_a_deleted_pattern_topic_has_none(monkeypatch) -> None:
    config = parse_pipeline_config(
        {
            "version": 1,
            "topics": [{"name": "listed", "event_time": {"fields": ["ts"]}}],
            "topic_patterns": [{"match": r"shop\..*", "event_time": {"fields": ["ts"]}}],
            "allowed_destinations": ["d.*"],
        }
    )
    reads = []

    def fleet_backlog(store, kafka, topics, oldest_wanted):
        reads.append(list(topics))
        return {
            "listed": TopicBacklog("listed", (PartitionBacklog(0, 0, 9, 4, 5),), None),
            "shop.gone": TopicMissing("shop.gone"),
        }

    monkeypatch.setattr(in_process, "fleet_backlog", fleet_backlog)
    resources = SimpleNamespace(
        pipeline=SimpleNamespace(load=lambda: config),
        staging=SimpleNamespace(store=lambda: None),
        kafka=SimpleNamespace(settings=lambda: None),
    )
    pipeline = InProcessPipeline(None, None, resources)

    backlogs = pipeline.backlogs(["listed", "shop.gone"])

    assert reads == [["listed", "shop.gone"]]
    assert (backlogs["listed"].lag, dict(backlogs["listed"].next_offsets)) == (5, {0: 4})
    assert (backlogs["shop.gone"].lag, dict(backlogs["shop.gone"].next_offsets)) == (0, {})
    assert backlogs["shop.gone"].missing == str(TopicMissing("shop.gone"))
    assert backlogs["listed"].missing is None
    # A listed topic Kafka does not hold (not created yet) is a state, not an error either.
    monkeypatch.setattr(
        in_process, "fleet_backlog", lambda *a, **k: {"listed": TopicMissing("listed")}
    )
    [(topic, listed)] = pipeline.backlogs(["listed"]).items()
    assert (topic, listed.lag, listed.missing) == ("listed", 0, str(TopicMissing("listed")))
