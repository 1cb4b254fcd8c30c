"""The tags of stage runs: what the sensor's in-flight check, the run-concurrency limits of
``dagster.yaml`` and the run history read."""

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
