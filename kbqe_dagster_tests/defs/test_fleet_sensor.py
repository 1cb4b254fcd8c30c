"""The backlog sensor over a fleet of topics, evaluated with Dagster's own context builder: one
backlog read for every topic per tick (whatever their number), the oldest-message time asked
only below the size trigger, small due topics grouped into runs and a hot one alone, a topic
held by a run in flight not launched again, a failed grouped run retried under a new key; a
stage run leaves to an older run the topics they share; the instance bounds the stage runs."""

from __future__ import annotations

import shutil
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest
import yaml

from kbqe_dagster.defs.keys import GROUP_TAG, STAGE_TAG, TOPIC_TAG, TOPICS_TAG
from kbqe_dagster.defs.staging import sensors
from kbqe_dagster.defs.staging.claims import yielded_to_older_runs
from kbqe_dagster.defs.staging.jobs import stage_job
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource, StagingResource
from kbqe_dagster.staging.backlog import PartitionBacklog, TopicBacklog

BATCH = 1_000


def resources_for(tmp_path: Path, topics: list[str], **stage_runs) -> dict:
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topics": [{"name": t, "event_time": {"fields": ["ts"]}} for t in topics],
                "staging": {"max_messages_per_batch": BATCH, "allowed_latency": "15m"},
                "allowed_destinations": ["sales.*"],
                **({"stage_runs": stage_runs} if stage_runs else {}),
            }
        )
    )
    (tmp_path / "staging").mkdir(exist_ok=True)
    return {
        "pipeline": PipelineResource(config_path=str(pipeline)),
        "kafka": KafkaResource(bootstrap_servers="127.0.0.1:1"),
        "staging": StagingResource(url=str(tmp_path / "staging")),
    }


def backlog(topic: str, lag: int, age_s: float | None = None) -> TopicBacklog:
    oldest = None if age_s is None else int((time.time() - age_s) * 1000)
    return TopicBacklog(
        topic,
        (
            PartitionBacklog(0, 0, 7 + lag, 7, lag),
            PartitionBacklog(1, 0, 3, 3, 0),
            PartitionBacklog(2, 0, 0, 0, 0),
        ),
        oldest,
    )


class FakeFleet:
    """``fleet_backlog`` as the sensor calls it: counts calls and what it was asked."""

    def __init__(self, backlogs: dict[str, TopicBacklog]) -> None:
        self.backlogs = backlogs
        self.calls = 0
        self.topics: list[str] = []
        self.oldest_wanted: dict[str, bool] = {}

    def __call__(self, store, settings, topics, *, oldest_wanted):
        self.calls += 1
        self.topics = list(topics)
        self.oldest_wanted = {t: oldest_wanted(self.backlogs[t]) for t in topics}
        return {t: self.backlogs[t] for t in topics}


@pytest.fixture
def instance():
    with dg.instance_for_test() as instance:
        yield instance


def tick(instance, resources, monkeypatch, fleet: FakeFleet) -> dg.SensorResult:
    monkeypatch.setattr(sensors, "fleet_backlog", fleet)
    return sensors.kafka_backlog_sensor(
        dg.build_sensor_context(instance=instance, resources=resources)
    )


OLD = 16 * 60  # seconds: past allowed_latency


def test_one_backlog_read_for_all_topics_and_the_age_only_below_the_size_trigger(
    tmp_path, instance, monkeypatch
) -> None:
    names = [f"fleet.t{i:03d}" for i in range(200)]
    fleet = FakeFleet({n: backlog(n, BATCH if n == "fleet.t007" else 0) for n in names})

    result = tick(instance, resources_for(tmp_path, names), monkeypatch, fleet)

    assert fleet.calls == 1 and fleet.topics == names
    assert fleet.oldest_wanted["fleet.t007"] is False  # due by size whatever its age
    assert fleet.oldest_wanted["fleet.t008"] is True
    assert len(result.asset_events) == 200
    [request] = result.run_requests
    assert request.tags[TOPIC_TAG] == "fleet.t007"


def test_small_due_topics_share_runs_and_a_hot_topic_runs_alone(
    tmp_path, instance, monkeypatch
) -> None:
    names = ["a", "b", "c", "hot", "idle", "young"]
    fleet = FakeFleet(
        {
            "a": backlog("a", 5, OLD),
            "b": backlog("b", 6, OLD),
            "c": backlog("c", 7, OLD),
            "hot": backlog("hot", 400, OLD),
            "idle": backlog("idle", 0),
            "young": backlog("young", 9, 60),
        }
    )
    resources = resources_for(tmp_path, names, max_topics_per_run=2, max_messages_per_run=300)

    requests = tick(instance, resources, monkeypatch, fleet).run_requests

    assert [r.run_config["ops"]["staging"]["config"] for r in requests] == [
        {"topic": "hot"},
        {"topics": ["a", "b"]},
        {"topic": "c"},
    ]
    hot, pair, single = requests
    assert hot.run_key == "hot|0=7,1=3,2=0|0" and hot.tags[TOPIC_TAG] == "hot"
    assert pair.tags[TOPICS_TAG] == "a,b" and TOPIC_TAG not in pair.tags
    assert pair.run_key == f"group|{pair.tags[GROUP_TAG]}|0"
    assert pair.tags["kbqe/reason"] == "2 topics due, backlog 11 together"
    assert single.run_key == "c|0=7,1=3,2=0|0"


def _run(instance, status: dg.DagsterRunStatus, tags: dict) -> None:
    job = dg.JobDefinition(graph_def=dg.GraphDefinition(name="stage_job"))
    instance.create_run_for_job(job, status=status, tags=tags)


def test_topics_held_by_a_grouped_run_in_flight_are_not_launched_again(
    tmp_path, instance, monkeypatch
) -> None:
    _run(instance, dg.DagsterRunStatus.STARTED, {TOPICS_TAG: "a,b"})
    _run(instance, dg.DagsterRunStatus.SUCCESS, {TOPICS_TAG: "c"})  # finished: holds nothing
    fleet = FakeFleet({t: backlog(t, 5, OLD) for t in "abcd"})

    requests = tick(
        instance, resources_for(tmp_path, list("abcd")), monkeypatch, fleet
    ).run_requests

    assert [r.tags.get(TOPICS_TAG) for r in requests] == ["c,d"]


def test_a_failed_grouped_run_from_the_same_offsets_is_retried_under_a_new_key(
    tmp_path, instance, monkeypatch
) -> None:
    fleet = FakeFleet({t: backlog(t, 5, OLD) for t in "ab"})
    resources = resources_for(tmp_path, ["a", "b"])
    [first] = tick(instance, resources, monkeypatch, fleet).run_requests
    _run(instance, dg.DagsterRunStatus.FAILURE, first.tags)

    [retry] = tick(instance, resources, monkeypatch, fleet).run_requests

    assert first.run_key.endswith("|0") and retry.run_key == first.run_key[:-1] + "1"


def test_a_stage_run_leaves_the_topics_an_older_run_in_flight_holds(tmp_path, instance) -> None:
    def started(**kwargs) -> dg.DagsterRun:
        return instance.add_run(
            dg.DagsterRun(
                job_name="stage_job",
                run_id=str(uuid.uuid4()),
                status=dg.DagsterRunStatus.STARTED,
                **kwargs,
            )
        )

    older = started(run_config={"ops": {"staging": {"config": {"topic": "a"}}}})  # by hand
    mine = started(tags={TOPICS_TAG: "a,b,c"})
    younger = started(tags={TOPICS_TAG: "b"})
    assert yielded_to_older_runs(instance, mine.run_id, ["a", "b", "c"]) == {"a"}
    assert yielded_to_older_runs(instance, younger.run_id, ["b"]) == {"b"}
    assert yielded_to_older_runs(instance, older.run_id, ["a"]) == frozenset()


def test_the_instance_bounds_the_stage_runs_every_stage_run_is_counted_in(tmp_path) -> None:
    shutil.copyfile(Path(__file__).resolve().parents[2] / "dagster.yaml", tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        limits = instance.get_concurrency_config().run_queue_config.tag_concurrency_limits
    assert {"key": STAGE_TAG, "limit": 2} in limits
    assert stage_job.tags[STAGE_TAG] == "true"  # on every run, launched by hand too
