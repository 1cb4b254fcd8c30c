"""``erasure_request_sensor``: launches the ``erasure`` job when the requests topic has
messages past what the erasure state has read, and, while requests are pending, once every
``load.poll_interval`` (loads finish at polls: that is when a pending request can complete).
A tick costs one watermarks request and one read of the small state file; it reads no
request (subjects stay out of the sensor and its run config: the op reads them). One erasure
run at a time: none is launched while one is in flight."""

from __future__ import annotations

import time

import dagster as dg

from kbqe_dagster.defs.erasure.jobs import ERASURE_JOB, erasure_job
from kbqe_dagster.defs.staging.claims import job_run_in_flight
from kbqe_dagster.operations.erasure_batch import read_state
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource, StagingResource
from kbqe_dagster.resources.kafka.erasure_requests import request_topic_backlog


def erasure_in_flight(instance: dg.DagsterInstance) -> bool:
    return job_run_in_flight(instance, ERASURE_JOB) is not None


@dg.sensor(
    job=erasure_job, minimum_interval_seconds=30, default_status=dg.DefaultSensorStatus.RUNNING
)
def erasure_request_sensor(
    context: dg.SensorEvaluationContext,
    pipeline: PipelineResource,
    staging: StagingResource,
    kafka: KafkaResource,
) -> dg.SensorResult | dg.SkipReason:
    config = pipeline.load()
    if not config.erasure.enabled:
        return dg.SkipReason("no erasure: section in the pipeline file")
    if erasure_in_flight(context.instance):
        return dg.SkipReason("an erasure run is in flight")
    state = read_state(staging.store())
    topic = config.erasure.requests_topic
    backlog = request_topic_backlog(kafka.settings(), topic, state.requests_read) if topic else 0
    last = float(context.cursor or 0)
    now = time.time()
    recheck = bool(state.pending) and now - last >= config.load.poll_interval.total_seconds()
    if not backlog and not recheck:
        pending = f"; {len(state.pending)} pending, next pass after a poll" if state.pending else ""
        return dg.SkipReason(f"no new erasure request{pending}")
    why = f"{backlog} new request message(s)" if backlog else f"{len(state.pending)} pending"
    return dg.SensorResult(
        run_requests=[dg.RunRequest(tags={"kbqe/erasure_reason": why})], cursor=str(now)
    )
