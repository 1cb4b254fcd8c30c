"""What the definitions are named by: the asset keys and groups, and the tags of stage runs
(what the sensors' in-flight checks, the run-concurrency limits of ``dagster.yaml`` and the run
history read).

A leaf: it imports nothing of ``defs/``, so any module of it may name an asset or a tag without
importing the module that defines the asset (issue 41: ``defs/`` was a knot of seven modules
importing each other for these names).
"""

import dagster as dg

from kbqe_dagster.core.protocol.naming import STAGING_ASSET

# --- assets ----------------------------------------------------------------------------------
STAGING_KEY = dg.AssetKey([STAGING_ASSET])
"""The staging area's asset: materialized by the stage runs, upstream of every table."""
STAGING_GROUP = "staging"
BIGQUERY_GROUP = "bigquery"


def table_asset_key(dataset: str, table: str) -> dg.AssetKey:
    """A table named in the pipeline file: ``bigquery/<dataset>/<table>``."""
    return dg.AssetKey(["bigquery", dataset, table])


def dataset_asset_key(dataset: str) -> dg.AssetKey:
    """A wildcard dataset's one asset: ``bigquery/<dataset>`` (defs/destinations.py)."""
    return dg.AssetKey(["bigquery", dataset])


def tables_partitions_name(dataset: str) -> str:
    """Name of the dynamic partitions holding the loaded tables of a wildcard dataset."""
    return f"bigquery_{dataset}_tables"


# --- the tags of stage runs ------------------------------------------------------------------
TOPIC_TAG = "kbqe/topic"
"""The topic of a single-topic stage run."""
TOPICS_TAG = "kbqe/topics"
"""The topics of a grouped stage run, comma-separated (core/stage_runs/groups.py)."""
GROUP_TAG = "kbqe/stage_group"
"""A grouped run's digest of its topics and start offsets: earlier runs of the same group."""
FROM_OFFSETS_TAG = "kbqe/from_offsets"
"""Where a single-topic run starts, per partition (``0=12,1=40``)."""
STAGE_TAG = "kbqe/stage"
"""On every stage run (a tag of the job): dagster.yaml bounds how many run at once."""
STAGE_LOOP_TAG = "kbqe/stage_loop"
"""On every stage loop run (a tag of ``stage_loop_job``, never with ``kbqe/stage``: a loop run
lasts up to ``max_run_s`` and would hold a slot of the stage runs' limit all along):
dagster.yaml bounds the loop runs in flight on its own."""
PIPELINE_DIGEST_TAG = "kbqe/pipeline_digest"
"""The digest of the pipeline file a loop run was launched with: the loop sensor asks the loop
runs of another pipeline (the code location reloaded since) to stop."""
STOP_TAG = "kbqe/stop"
"""Added to a loop run in flight to ask it to end after its round (its value: why)."""
LOOP_STATE_TAG = "kbqe/loop_state"
"""Set by a loop run on itself: ``warm`` (Spark up, waiting for an older run holding its topics
to end: a standby), then ``looping``; none while it starts (core/stage_runs/loop_plan.py)."""
STANDBY_TAG = "kbqe/standby"
"""On a loop run the loop sensor launched as the standby of a looping run (for the run history:
what a run does is its ``kbqe/loop_state``)."""
