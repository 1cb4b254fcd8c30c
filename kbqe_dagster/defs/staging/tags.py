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
