"""``stage_job``: materialize ``staging`` for one topic or a group of topics (run config
``topic`` or ``topics``; core/stage_runs/groups.py), and the run config and tags of one run;
``stage_loop_job``: the same asset staged round after round by one long run (the topics that
may write a ``delivery: storage_write`` table; defs/staging/loop_run.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

import dagster as dg

from kbqe_dagster.core.stage_runs.due import from_offsets
from kbqe_dagster.core.stage_runs.groups import StageGroup, join_topics
from kbqe_dagster.defs.keys import (
    FROM_OFFSETS_TAG,
    GROUP_TAG,
    PIPELINE_DIGEST_TAG,
    STAGE_LOOP_TAG,
    STAGE_TAG,
    STAGING_KEY,
    TOPIC_TAG,
    TOPICS_TAG,
)
from kbqe_dagster.defs.staging.claims import STAGE_LOOP_JOB
from kbqe_dagster.resources.configurable import PipelineResource

stage_job = dg.define_asset_job(
    "stage_job",
    selection=dg.AssetSelection.assets(STAGING_KEY),
    description=(
        "Stage the offset ranges of one Kafka topic, or of a group of small topics, into avro "
        "+ done files in one Spark job. Launched by kafka_backlog_sensor; dagster.yaml bounds "
        "the stage runs in flight (tag kbqe/stage); each range commits once (create-only "
        "done files), whatever run it belongs to."
    ),
    tags={STAGE_TAG: "true"},
)

stage_loop_job = dg.define_asset_job(
    STAGE_LOOP_JOB,
    selection=dg.AssetSelection.assets(STAGING_KEY),
    description=(
        "Stage the topics that may write a delivery: storage_write table round after round in "
        "one long run (one Spark context): every staging.loop_interval their watermarks are "
        "read, and what is new is staged and appended to BigQuery. Launched by "
        "stage_loop_sensor; ends when terminated (after its round), after max_run_s, or when "
        "the code location's pipeline changed (the sensor then relaunches it). dagster.yaml "
        "bounds the loop runs in flight (tag kbqe/stage_loop)."
    ),
    tags={STAGE_LOOP_TAG: "true"},
    config={"ops": {"staging": {"config": {"loop": True}}}},
    # One step: the run worker runs it itself. A step process of its own would load the
    # definitions a second time before the loop starts (seconds, tens of them on a loaded
    # machine), and outlive a run worker killed with it, looping beside the run's successor.
    executor_def=dg.in_process_executor,
)


def stage_run_config(topic: str) -> dict:
    """The run config of one topic's run (as written before grouped runs; still valid)."""
    return {"ops": {"staging": {"config": {"topic": topic}}}}


def stage_group_run_config(topics: Sequence[str]) -> dict:
    """One topic: :func:`stage_run_config`; several: ``topics``."""
    if len(topics) == 1:
        return stage_run_config(topics[0])
    return {"ops": {"staging": {"config": {"topics": list(topics)}}}}


def stage_tags(group: StageGroup, reason: str | None = None) -> dict[str, str]:
    """The tags of a run of ``group``: what the sensor's in-flight check and run history read.
    A single topic keeps ``kbqe/topic`` and ``kbqe/from_offsets``; a group names its topics
    and its digest."""
    tags = {"kbqe/reason": reason or group.reason}
    if len(group.topics) == 1:
        only = group.topics[0]
        tags.update({TOPIC_TAG: only.topic, FROM_OFFSETS_TAG: from_offsets(only.next_offsets)})
    else:
        tags.update({TOPICS_TAG: join_topics(group.names), GROUP_TAG: group.group_id})
    return tags


def stage_loop_run_config(topics: Sequence[str]) -> dict:
    """A loop run of ``topics``."""
    return {"ops": {"staging": {"config": {"topics": list(topics), "loop": True}}}}


def stage_loop_tags(topics: Sequence[str], pipeline_digest: str) -> dict[str, str]:
    """The tags of a loop run: its topics always under ``kbqe/topics``, even one (``kbqe/topic``
    has a limit of one run per topic in dagster.yaml: an ordinary run of the topic launched by
    hand would queue behind the loop for up to max_run_s, while the loop waits for it), and
    the pipeline it was launched with."""
    return {
        TOPICS_TAG: join_topics(topics),
        PIPELINE_DIGEST_TAG: pipeline_digest,
        "kbqe/reason": "stage loop (topics writing delivery: storage_write tables)",
    }


def pipeline_digest(pipeline: PipelineResource) -> str:
    """What identifies the pipeline a code location loaded: its file's text (read now when
    the resource was built by hand, without the text)."""
    if pipeline.content is not None:
        text = pipeline.content
    else:
        with open(pipeline.config_path, encoding="utf-8") as f:
            text = f.read()
    return hashlib.sha256(text.encode()).hexdigest()[:16]
