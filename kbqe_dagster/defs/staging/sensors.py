"""Sensors of the stage side.

``kafka_backlog_sensor`` observes every topic — listed, or found in Kafka by the pipeline's
``topic_patterns`` at this tick (core/config/discovery.py) — (end offsets, staged offsets, lag per
partition → observations on ``kafka/<topic>``) and launches stage runs for the topics whose
backlog reaches ``max_messages_per_batch`` or whose oldest unstaged message is older than
``allowed_latency``; due topics share runs (core/stage_runs/groups.py). A configured topic Kafka
does not hold (not created yet, or deleted) is a normal state, not an error: the tick skips it
with a one-line reason naming it (the tick's skip reason when nothing else is launched), records
``missing`` on ``kafka/<topic>`` and serves the other topics.

A tick costs the same few calls whatever the number of topics (staging/backlog.py
``fleet_backlog``): one staging listing, one metadata request, one ListOffsets request per
bound for every partition, one consumer reading one message per partition whose age is wanted
(only topics below the size trigger), and one query of the stage runs in flight.

A topic that may write a ``delivery: storage_write`` table is observed but never launched
here: ``stage_loop_sensor`` keeps one stage loop run holding it (defs/staging/loop_run.py), which
stages it every ``staging.loop_interval``.

A topic held by a stage run in flight is not launched again. A run's key is its topics plus
the offsets each starts from, plus the number of earlier runs from those offsets: a tick never
double-launches a queued run, and a failed run (which committed nothing) can be retried by a
later tick.

``stage_loop_sensor`` (every 5 s) launches one stage loop run holding the loop topics no run in
flight holds (at the start, and again after a loop run ended: terminated, ``max_run_s``, a new
pipeline, a crash), and one warm standby behind every looping run, which takes over within a
second or two of its end (``stage_runs.loop_standby``; core/stage_runs/loop_plan.py). It asks
the loop runs launched with another pipeline than its code location's to stop after their
round (the ``kbqe/stop`` tag): a looping one once a standby of the new pipeline is warm.

``staging_observation_sensor`` records what waits in the staging area on ``staging``.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.load.pending import staging_view
from kbqe_dagster.core.stage_runs.due import from_offsets, stage_due
from kbqe_dagster.core.stage_runs.groups import DueTopic, StageGroup, group_due_topics
from kbqe_dagster.core.stage_runs.loop_plan import LoopRunView, plan_loop_runs
from kbqe_dagster.defs.kafka.assets import topic_asset_key
from kbqe_dagster.defs.keys import (
    FROM_OFFSETS_TAG,
    GROUP_TAG,
    LOOP_STATE_TAG,
    PIPELINE_DIGEST_TAG,
    STAGING_KEY,
    STANDBY_TAG,
    STOP_TAG,
    TOPIC_TAG,
)
from kbqe_dagster.defs.staging.claims import (
    STAGE_LOOP_JOB,
    loop_runs_in_flight,
    run_topics,
    stage_runs_in_flight,
    topics_in_flight,
)
from kbqe_dagster.defs.staging.jobs import (
    pipeline_digest,
    stage_group_run_config,
    stage_job,
    stage_loop_job,
    stage_loop_run_config,
    stage_loop_tags,
    stage_tags,
)
from kbqe_dagster.loading.state_file import StateFile
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource, StagingResource
from kbqe_dagster.resources.kafka.clients import TopicMissing
from kbqe_dagster.resources.kafka.cluster import discover_topics
from kbqe_dagster.staging.backlog import TopicBacklog, fleet_backlog
from kbqe_dagster.staging.stage_loop import CONFIG_CHANGED, loop_topics


def stage_decision(config: PipelineConfig, backlog: TopicBacklog, now_ms: int) -> str | None:
    """Why a stage run is due for this topic (core/stage_runs/due.py), or None."""
    return stage_due(
        config.topic(backlog.topic).staging, backlog.lag, backlog.oldest_unstaged_ms, now_ms
    )


def lag_observation(backlog: TopicBacklog) -> dg.AssetObservation:
    return dg.AssetObservation(
        asset_key=topic_asset_key(backlog.topic),
        metadata={
            "missing": False,
            "lag": backlog.lag,
            "end_offsets": dg.MetadataValue.json(
                {str(p.partition): p.high for p in backlog.partitions}
            ),
            "staged_offsets": dg.MetadataValue.json(
                {str(p.partition): p.next_offset for p in backlog.partitions}
            ),
            "lag_by_partition": dg.MetadataValue.json(
                {str(p.partition): p.lag for p in backlog.partitions}
            ),
            # Not read for a topic at its size trigger (due whatever its age): 0.0 then.
            "oldest_unstaged_age_s": (
                round(time.time() - backlog.oldest_unstaged_ms / 1000, 1)
                if backlog.oldest_unstaged_ms is not None
                else 0.0
            ),
        },
    )


def missing_observation(missing: TopicMissing) -> dg.AssetObservation:
    """``kafka/<topic>`` says the topic is missing: its last lag figures no longer hold."""
    return dg.AssetObservation(
        asset_key=topic_asset_key(missing.topic),
        metadata={"missing": True, "reason": str(missing)},
    )


def missing_reason(missing: list[TopicMissing]) -> str:
    """One line naming the topics skipped because Kafka does not hold them."""
    if len(missing) == 1:
        return str(missing[0])
    names = [m.topic for m in missing]
    shown = ", ".join(names[:5]) + (f" and {len(names) - 5} more" if len(names) > 5 else "")
    return (
        f"{len(names)} topics do not exist in Kafka (not created yet, or deleted): "
        f"{shown}; not staged until they exist"
    )


def earlier_runs(instance: dg.DagsterInstance, group: StageGroup) -> int:
    """Runs of the same topics from the same offsets before this one (failed ones: a run
    that succeeded moved the offsets on)."""
    if len(group.topics) == 1:
        only = group.topics[0]
        tags = {TOPIC_TAG: only.topic, FROM_OFFSETS_TAG: from_offsets(only.next_offsets)}
    else:
        tags = {GROUP_TAG: group.group_id}
    return len(instance.get_run_ids(filters=dg.RunsFilter(tags=tags)))


@dg.sensor(
    job=stage_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING
)
def kafka_backlog_sensor(
    context: dg.SensorEvaluationContext,
    pipeline: PipelineResource,
    kafka: KafkaResource,
    staging: StagingResource,
) -> dg.SensorResult:
    """Observe Kafka lag per topic and launch stage runs for the topics whose backlog or
    latency is due, small topics together."""
    # Patterns are resolved at every tick (one metadata request): a topic created in Kafka is
    # staged from the next tick on, without a reload; one deleted is no longer polled.
    settings = kafka.settings()
    config = discover_topics(pipeline.load(), settings)
    topics = {t.name: t for t in config.topics}
    now_ms = int(time.time() * 1000)
    backlogs = fleet_backlog(
        staging.store(),
        settings,
        {name: t.staging.start_offset for name, t in topics.items()},
        # The latency trigger only matters below the size trigger: no read for a full batch.
        oldest_wanted=lambda b: b.lag < topics[b.topic].staging.max_messages_per_batch,
    )
    busy = topics_in_flight(context.instance)
    observations, due, skipped = [], [], []
    for topic in config.topics:
        backlog = backlogs[topic.name]
        if isinstance(backlog, TopicMissing):
            # Listed, or found by a pattern a moment ago and deleted since (the next tick's
            # listing drops it): skipped, the other topics served.
            context.log.info("skipped this tick: %s", backlog)
            skipped.append(backlog)
            observations.append(missing_observation(backlog))
            continue
        observations.append(lag_observation(backlog))
        reason = stage_decision(config, backlog, now_ms)
        if reason is None or topic.name in busy:
            continue
        if config.topic_may_deliver_by_storage_write(topic.name):
            continue  # the stage loop's (stage_loop_sensor), even between two loop runs
        due.append(DueTopic(topic.name, backlog.next_offsets, backlog.lag, reason))
    requests = []
    for group in group_due_topics(due, config.stage_runs):
        shown = ", ".join(group.names[:5]) + (
            f" and {len(group.names) - 5} more" if len(group.names) > 5 else ""
        )
        context.log.info("stage run due for %s: %s", shown, group.reason)
        requests.append(
            dg.RunRequest(
                run_key=group.run_key(earlier_runs(context.instance, group)),
                run_config=stage_group_run_config(group.names),
                tags=stage_tags(group),
            )
        )
    # Dagster takes a skip reason only from a tick that launches nothing; otherwise the log
    # lines above name the skipped topics.
    skip_reason = missing_reason(skipped) if skipped and not requests else None
    return dg.SensorResult(
        run_requests=requests, asset_events=observations, skip_reason=skip_reason
    )


SILENT_LOOP_S = 600.0
"""A loop run in STARTED with no event for this long is taken for dead. A live loop logs a
report every ``report_every_s`` (30 s) and one after every round longer than that (a standby,
that it stands by, as often); its run worker killed (``kill -9``, a lost host) leaves the run
STARTED for ever under the default run launcher, which cannot check a run worker's health,
and its topics held."""


def _last_event_at(instance: dg.DagsterInstance, run: dg.DagsterRun) -> float | None:
    records = instance.get_records_for_run(run.run_id, ascending=False, limit=1).records
    return records[0].event_log_entry.timestamp if records else None


def fail_silent_loop_runs(
    context: dg.SensorEvaluationContext, now: float | None = None
) -> list[str]:
    """Mark failed the STARTED loop runs silent for :data:`SILENT_LOOP_S`, so that their
    topics are staged again by a new loop run. A worker that is in fact alive but stuck stays
    harmless: a second writer of the same ranges is a zombie the delivery protocol already
    covers (one copy, one committer per range)."""
    now = time.time() if now is None else now
    failed = []
    for run in loop_runs_in_flight(context.instance):
        if run.status != dg.DagsterRunStatus.STARTED:
            continue
        last = _last_event_at(context.instance, run)
        if last is None or now - last < SILENT_LOOP_S:
            continue
        message = (
            f"stage loop run {run.run_id} logged nothing for {now - last:.0f}s (a live loop "
            f"reports every 30s): its run worker is taken for dead; marked failed so that its "
            f"topics are staged again"
        )
        context.log.warning(message)
        context.instance.report_run_failed(run, message)
        failed.append(run.run_id)
    return failed


LOOP_SENSOR_INTERVAL_S = 5
"""How often ``stage_loop_sensor`` ticks: a tick is one metadata request and one query of the
runs in flight. It bounds how soon a loop run follows the daemon's start and a standby
follows a takeover (a standby makes a loop run's end cost a second or two, not a tick)."""


def loop_run_view(run: dg.DagsterRun, digest: str) -> LoopRunView:
    return LoopRunView(
        run.run_id,
        run_topics(run),
        run.tags.get(PIPELINE_DIGEST_TAG) == digest,
        run.tags.get(LOOP_STATE_TAG),
        STOP_TAG in run.tags,
    )


@dg.sensor(
    job=stage_loop_job,
    minimum_interval_seconds=LOOP_SENSOR_INTERVAL_S,
    default_status=dg.DefaultSensorStatus.RUNNING,
)
def stage_loop_sensor(
    context: dg.SensorEvaluationContext,
    pipeline: PipelineResource,
    kafka: KafkaResource,
) -> dg.SensorResult:
    """Keep a stage loop run holding every topic that may write a storage_write table, and a
    warm standby behind it (core/stage_runs/loop_plan.py)."""
    config = discover_topics(pipeline.load(), kafka.settings())
    wanted = loop_topics(config)
    digest = pipeline_digest(pipeline)
    fail_silent_loop_runs(context)
    runs = stage_runs_in_flight(context.instance)
    loops = [r for r in runs if r.job_name == STAGE_LOOP_JOB]
    plan = plan_loop_runs(
        wanted,
        [loop_run_view(r, digest) for r in loops],
        {t for r in runs if r.job_name != STAGE_LOOP_JOB for t in run_topics(r)},
        standby=config.stage_runs.loop_standby,
    )
    for run_id in plan.stop:
        # Launched with another pipeline (the code location loaded another since): the run
        # ends after its round, its successor (a standby of this pipeline) loops once it did.
        context.log.info("asking stage loop run %s to stop: launched with another pipeline", run_id)
        context.instance.add_run_tags(run_id, {STOP_TAG: CONFIG_CHANGED})
    if not wanted:
        return dg.SensorResult(skip_reason="no topic may write a delivery: storage_write table")
    launched = int(context.cursor or 0)
    requests = []
    for topics, standby in [(t, False) for t in plan.launch] + [(t, True) for t in plan.standby]:
        launched += 1
        shown = ", ".join(topics[:5]) + (f" and {len(topics) - 5} more" if len(topics) > 5 else "")
        context.log.info("stage loop %s for %s", "standby" if standby else "run", shown)
        tags = stage_loop_tags(topics, digest)
        if standby:
            tags[STANDBY_TAG] = "true"
        requests.append(
            dg.RunRequest(
                run_key=f"stage_loop:{launched}",
                run_config=stage_loop_run_config(topics),
                tags=tags,
            )
        )
    if not requests:
        return dg.SensorResult(skip_reason="every loop topic is held by a run in flight")
    return dg.SensorResult(run_requests=requests, cursor=str(launched))


@dg.sensor(
    minimum_interval_seconds=60,
    default_status=dg.DefaultSensorStatus.RUNNING,
    asset_selection=dg.AssetSelection.assets(STAGING_KEY),
)
def staging_observation_sensor(
    context: dg.SensorEvaluationContext, staging: StagingResource
) -> dg.SensorResult:
    """Record what waits in the staging area (core/load/pending.py): pending files, their bytes and
    the oldest one's age, as the freshness check and the health judge them."""
    store = staging.store()
    view = staging_view(store.list(), StateFile(store).read(), datetime.now(UTC))
    return dg.SensorResult(
        asset_events=[
            dg.AssetObservation(
                asset_key=STAGING_KEY,
                metadata={
                    "pending_files": view.waiting_files,
                    "pending_bytes": view.waiting_bytes,
                    "oldest_pending_age_s": view.oldest_pending_age_s or 0.0,
                    "quarantined_files": view.quarantined_files,
                    "uncommitted_files": view.uncommitted_files,
                    "done_files": view.done_files,
                    "unrecognized_files": view.unrecognized_files,
                },
            )
        ]
    )
