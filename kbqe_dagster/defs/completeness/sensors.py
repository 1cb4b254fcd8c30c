"""``completeness_sensor``: after loads, which DAY (or HOUR) partitions became complete.

Each tick reads the staging area, the kept state and Kafka's watermarks once
(operations/completeness.py), updates the kept state (declared days, late records, the marks
that survive retention) and reports ``day_complete`` passed for every day of every checked
table that became complete since the last tick: one evaluation per day, with the evidence as
metadata. ``kbqe run --until-idle`` calls the same function after its loads
(``declare.py``), so the daemon and a cron job keep one state. Its interval is short against
retention's (9 min by default) so the times of loaded ranges are read before retention deletes
their done files.
"""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg

from kbqe_dagster.defs.completeness.declare import day_complete_events, declare_complete_days
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource, StagingResource
from kbqe_dagster.resources.kafka.cluster import watermarks_of

__all__ = ["completeness_sensor", "day_complete_events"]


@dg.sensor(minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def completeness_sensor(
    context: dg.SensorEvaluationContext,
    pipeline: PipelineResource,
    staging: StagingResource,
    kafka: KafkaResource,
) -> dg.SensorResult:
    """Report ``day_complete`` (``hour_complete``) for each partition that became complete."""
    settings = kafka.settings()
    declared = declare_complete_days(
        pipeline.load(),
        staging.store(),
        lambda topics: watermarks_of(settings, topics),
        datetime.now(UTC),
        context.instance,
    )
    for name, table in sorted(declared.report.tables.items()):
        held = ", ".join(f"{h.topic}[{h.partition}]" for h in table.verdict.held_back_by)
        context.log.debug(
            "%s: newest complete %s; next held back by %s",
            name,
            table.verdict.newest_complete,
            held or "nothing",
        )
    if not declared.events:
        return dg.SensorResult(skip_reason="no day became complete")
    return dg.SensorResult(asset_events=list(declared.events))
