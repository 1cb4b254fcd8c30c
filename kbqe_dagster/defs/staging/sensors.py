"""Sensors of the stage side.

``kafka_backlog_sensor`` observes every topic — listed, or found in Kafka by the pipeline's
``topic_patterns`` at this tick (core/discovery.py) — (end offsets, staged offsets, lag per
partition → observations on ``kafka/<topic>``) and launches a stage run for a topic whose
backlog reaches ``max_messages_per_batch`` or whose oldest unstaged message is older than
``allowed_latency``. Its run key is the topic plus the offsets the run starts from, plus the
number of earlier runs from those offsets: a tick never double-launches a queued run, and a
failed run (which committed nothing) can be retried by a later tick.

``staging_observation_sensor`` records what waits in the staging area on ``staging``.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone

import dagster as dg

from kbqe_dagster.core.config import PipelineConfig
from kbqe_dagster.core.pending import staging_view
from kbqe_dagster.core.stage_decision import from_offsets, stage_due, stage_run_key
from kbqe_dagster.defs.kafka.assets import topic_asset_key
from kbqe_dagster.defs.staging.assets import FROM_OFFSETS_TAG, STAGING_KEY, TOPIC_TAG
from kbqe_dagster.defs.staging.jobs import stage_job, stage_run_config
from kbqe_dagster.loading.state_file import StateFile
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource, StagingResource
from kbqe_dagster.resources.kafka import KafkaReadError, discover_topics
from kbqe_dagster.staging.backlog import TopicBacklog, topic_backlog

IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def stage_decision(config: PipelineConfig, backlog: TopicBacklog, now_ms: int) -> str | None:
    """Why a stage run is due for this topic (core/stage_decision.py), or None."""
    return stage_due(config.topic(backlog.topic).staging, backlog.lag,
                     backlog.oldest_unstaged_ms, now_ms)


def lag_observation(backlog: TopicBacklog) -> dg.AssetObservation:
    return dg.AssetObservation(
        asset_key=topic_asset_key(backlog.topic),
        metadata={
            "lag": backlog.lag,
            "end_offsets": dg.MetadataValue.json({str(p.partition): p.high for p in backlog.partitions}),
            "staged_offsets": dg.MetadataValue.json(
                {str(p.partition): p.next_offset for p in backlog.partitions}
            ),
            "lag_by_partition": dg.MetadataValue.json({str(p.partition): p.lag for p in backlog.partitions}),
            "oldest_unstaged_age_s": (
                round(time.time() - backlog.oldest_unstaged_ms / 1000, 1)
                if backlog.oldest_unstaged_ms is not None
                else 0.0
            ),
        },
    )


@dg.sensor(job=stage_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING)
def kafka_backlog_sensor(
    context: dg.SensorEvaluationContext,
    pipeline: PipelineResource,
    kafka: KafkaResource,
    staging: StagingResource,
) -> dg.SensorResult:
    """Observe Kafka lag per topic and launch stage runs when a topic's backlog or latency is due."""
    # Patterns are resolved at every tick (one metadata request): a topic created in Kafka is
    # staged from the next tick on, without a reload; one deleted is no longer polled.
    config = discover_topics(pipeline.load(), kafka.settings())
    store = staging.store()
    now_ms = int(time.time() * 1000)
    observations, requests = [], []
    for topic in config.topics:
        try:
            backlog = topic_backlog(store, kafka.settings(), topic.name,
                                    topic.staging.start_offset)
        except KafkaReadError as error:
            if topic.pattern is None:
                raise  # a listed topic that cannot be read is an error to see at every tick
            # Listed a moment ago, gone now (deleted): the next tick's listing drops it.
            context.log.info("%s: skipped this tick: %s", topic.name, error)
            continue
        observations.append(lag_observation(backlog))
        reason = stage_decision(config, backlog, now_ms)
        if reason is None:
            continue
        starts = from_offsets(backlog.next_offsets)
        earlier = context.instance.get_runs(
            filters=dg.RunsFilter(tags={TOPIC_TAG: topic.name, FROM_OFFSETS_TAG: starts})
        )
        if any(run.status in IN_FLIGHT for run in earlier):
            continue
        context.log.info("%s: stage run due: %s", topic.name, reason)
        requests.append(
            dg.RunRequest(
                run_key=stage_run_key(topic.name, backlog.next_offsets, len(earlier)),
                run_config=stage_run_config(topic.name),
                tags={TOPIC_TAG: topic.name, FROM_OFFSETS_TAG: starts, "kbqe/reason": reason},
            )
        )
    return dg.SensorResult(run_requests=requests, asset_events=observations)


@dg.sensor(minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING,
           asset_selection=dg.AssetSelection.assets(STAGING_KEY))
def staging_observation_sensor(
    context: dg.SensorEvaluationContext, staging: StagingResource
) -> dg.SensorResult:
    """Record what waits in the staging area (core/pending.py): pending files, their bytes and
    the oldest one's age, as the freshness check and the health judge them."""
    store = staging.store()
    view = staging_view(store.list(), StateFile(store).read(), datetime.now(timezone.utc))
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
