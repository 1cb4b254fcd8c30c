"""When the load side runs: the load cycle at ``load.cadence`` (default 15m), the poll of
pending jobs at ``load.poll_interval`` (~2m), done-file retention at ``retention.cadence``
(~9m), and the opt-in duplicate-offset check daily (stopped unless an operator starts it).

Cadences become cron expressions: whole minutes below an hour run at ``*/m`` (``*/9`` fires
at :00, :09 … :54, so one gap per hour is shorter), whole hours at ``0 */h``; anything finer
than a minute runs every minute. A tick is skipped while a run of the same job is still
queued or running, so slow runs never pile up behind the singleton pool.
"""

from __future__ import annotations

from datetime import timedelta

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.defs.bigquery.jobs import done_file_retention_job, load_job, poll_load_jobs_job
from kbqe_dagster.defs.staging.claims import job_run_in_flight

MINUTE_STEPS = (1, 2, 3, 4, 5, 6, 10, 12, 15, 20, 30)
"""Steps of ``*/n`` that divide an hour: any other ``n`` fires twice closer together at the
top of the hour (``*/7`` at :56 and :00)."""
HOUR_STEPS = (1, 2, 3, 4, 6, 8, 12)


def cron_every(interval: timedelta) -> str:
    """The cron expression that fires every ``interval`` or less often, never more often: the
    load cadence keeps a table's load jobs under BigQuery's daily quota (the config check
    counts them at the cadence), so a cadence is rounded up to the next step cron can keep
    evenly (``1m56s`` fires every 2 minutes, ``7m`` every 10), not down."""
    minutes = max(1, -(-int(interval.total_seconds()) // 60))
    if minutes < 60:
        step = next((m for m in MINUTE_STEPS if m >= minutes), 60)
        if step < 60:
            return "* * * * *" if step == 1 else f"*/{step} * * * *"
    hours = -(-minutes // 60)
    step = next((h for h in HOUR_STEPS if h >= hours), 24)
    if step < 24:
        return "0 * * * *" if step == 1 else f"0 */{step} * * *"
    return "0 0 * * *"


def skipping_schedule(
    name: str, job: dg.JobDefinition, interval: timedelta, description: str
) -> dg.ScheduleDefinition:
    @dg.schedule(
        name=name,
        job=job,
        cron_schedule=cron_every(interval),
        description=description,
        default_status=dg.DefaultScheduleStatus.RUNNING,
    )
    def _schedule(context: dg.ScheduleEvaluationContext) -> dg.RunRequest | dg.SkipReason:
        running = job_run_in_flight(context.instance, job.name)
        if running is not None:
            return dg.SkipReason(f"{job.name} run {running.run_id} is still in flight")
        return dg.RunRequest()

    return _schedule


def load_schedules(
    config: PipelineConfig, duplicate_check_job: dg.JobDefinition | None = None
) -> list[dg.ScheduleDefinition]:
    schedules = [
        skipping_schedule(
            "load_cycle",
            load_job,
            config.load.cadence,
            f"Load cycle every {config.load.cadence} (load.cadence).",
        ),
        skipping_schedule(
            "poll_load_jobs",
            poll_load_jobs_job,
            config.load.poll_interval,
            f"Follow pending load jobs every {config.load.poll_interval} (load.poll_interval).",
        ),
        skipping_schedule(
            "done_file_retention",
            done_file_retention_job,
            config.retention.cadence,
            f"Done-file retention every {config.retention.cadence} (retention.cadence).",
        ),
    ]
    if duplicate_check_job is not None:
        schedules.append(
            dg.ScheduleDefinition(
                name="duplicate_offsets_schedule",
                job=duplicate_check_job,
                cron_schedule="30 3 * * *",
                default_status=dg.DefaultScheduleStatus.STOPPED,
                description="Opt-in daily duplicate-offset query (billed for bytes scanned).",
            )
        )
    return schedules
