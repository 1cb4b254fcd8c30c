"""``stage_job``: materialize ``staging`` for one topic (run config ``topic``)."""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.defs.staging.assets import STAGING_KEY

stage_job = dg.define_asset_job(
    "stage_job",
    selection=dg.AssetSelection.assets(STAGING_KEY),
    description=(
        "Stage one Kafka topic's offset ranges into avro + done files on Spark. Launched by "
        "kafka_backlog_sensor; at most one run per topic (tag kbqe/topic, dagster.yaml)."
    ),
)


def stage_run_config(topic: str) -> dict:
    return {"ops": {"staging": {"config": {"topic": topic}}}}
