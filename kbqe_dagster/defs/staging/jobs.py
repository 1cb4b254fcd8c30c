"""``stage_job``: materialize ``staging`` for one topic or a group of topics (run config
``topic`` or ``topics``; core/stage_runs/groups.py), and the run config and tags of one run."""

from __future__ import annotations

from typing import Sequence

import dagster as dg

from kbqe_dagster.core.stage_runs.due import from_offsets
from kbqe_dagster.core.stage_runs.groups import StageGroup, join_topics
from kbqe_dagster.defs.staging.assets import STAGING_KEY
from kbqe_dagster.defs.staging.tags import (
    FROM_OFFSETS_TAG,
    GROUP_TAG,
    STAGE_TAG,
    TOPIC_TAG,
    TOPICS_TAG,
)

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
