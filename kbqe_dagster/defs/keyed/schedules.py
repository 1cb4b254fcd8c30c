"""When the daemon merges keyed tables: every ``load.poll_interval`` (the poll is when load
jobs finish), skipped while a merge is in flight. The tick does not wait for a load: a
changelog delivered through the Storage Write API has new rows whenever a range commits, and
the merge op finds them in the staging area (keyed/merge.py). A tick with no new load job and
no newly committed range merges nothing and bills nothing; ``keyed.merge_every`` spaces the
merges of a table further."""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.defs.bigquery.schedules import skipping_schedule
from kbqe_dagster.defs.keyed.jobs import merge_keyed_tables_job
from kbqe_dagster.keyed.merge import keyed_destinations


def keyed_schedules(config: PipelineConfig) -> list[dg.ScheduleDefinition]:
    if not keyed_destinations(config):
        return []
    every = config.load.poll_interval
    return [
        skipping_schedule(
            "merge_keyed_tables",
            merge_keyed_tables_job,
            every,
            f"MERGE new changelog rows into keyed tables every {every} (load.poll_interval).",
        )
    ]
