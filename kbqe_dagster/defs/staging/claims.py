"""Which topics the stage runs in flight hold, read from the run storage in one query: the
sensors skip them, and a stage run leaves to an older run in flight the topics they share
(core/stage_runs/groups.py ``yielded_topics``: one run prepares a topic at a time). A stage
loop run (``stage_loop_job``, defs/staging/loop_run.py) is a stage run in flight like any other:
it holds its topics for as long as it loops."""

from __future__ import annotations

from collections.abc import Iterable

import dagster as dg

from kbqe_dagster.core.stage_runs.groups import split_topics, yielded_topics
from kbqe_dagster.defs.keys import TOPIC_TAG, TOPICS_TAG

STAGE_JOB = "stage_job"
STAGE_LOOP_JOB = "stage_loop_job"
STAGE_JOBS = frozenset({STAGE_JOB, STAGE_LOOP_JOB})
IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def job_run_in_flight(instance: dg.DagsterInstance, job_name: str) -> dg.DagsterRun | None:
    """A run of ``job_name`` queued or running, if any: what a schedule or sensor of a job
    that must not run twice at once (load, poll, retention, erasure) checks before asking."""
    runs = instance.get_runs(filters=dg.RunsFilter(job_name=job_name, statuses=IN_FLIGHT), limit=1)
    return runs[0] if runs else None


def run_topics(run: dg.DagsterRun) -> frozenset[str]:
    """The topics a stage run holds: its run config (``topic``/``topics``, also when launched
    by hand without tags) and its tags."""
    config = (((run.run_config or {}).get("ops") or {}).get("staging") or {}).get("config") or {}
    names = set(config.get("topics") or ())
    if config.get("topic"):
        names.add(config["topic"])
    names.update(split_topics(run.tags.get(TOPICS_TAG)))
    if run.tags.get(TOPIC_TAG):
        names.add(run.tags[TOPIC_TAG])
    return frozenset(names)


def _in_flight(instance: dg.DagsterInstance) -> list[dg.RunRecord]:
    # One query for both jobs (a filter names one job): the runs in flight are few.
    return [
        r
        for r in instance.get_run_records(filters=dg.RunsFilter(statuses=IN_FLIGHT))
        if r.dagster_run.job_name in STAGE_JOBS
    ]


def stage_runs_in_flight(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    """The stage runs in flight, loop runs among them, oldest first."""
    return [r.dagster_run for r in sorted(_in_flight(instance), key=lambda r: r.storage_id)]


def loop_runs_in_flight(instance: dg.DagsterInstance) -> list[dg.DagsterRun]:
    """The stage loop runs in flight, oldest first."""
    return [r for r in stage_runs_in_flight(instance) if r.job_name == STAGE_LOOP_JOB]


def topics_in_flight(instance: dg.DagsterInstance) -> frozenset[str]:
    """Every topic a stage run in flight holds."""
    return frozenset(t for record in _in_flight(instance) for t in run_topics(record.dagster_run))


def yielded_to_older_runs(
    instance: dg.DagsterInstance, run_id: str, topics: Iterable[str]
) -> frozenset[str]:
    """Of ``topics``, those an older stage run in flight holds (empty when this run is not
    recorded, as in a direct invocation)."""
    records = _in_flight(instance)
    mine = next((r.storage_id for r in records if r.dagster_run.run_id == run_id), None)
    if mine is None:
        return frozenset()
    return yielded_topics(
        mine,
        topics,
        (
            (r.storage_id, run_topics(r.dagster_run))
            for r in records
            if r.dagster_run.run_id != run_id
        ),
    )
