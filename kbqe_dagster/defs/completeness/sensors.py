"""``completeness_sensor``: after loads, which DAY (or HOUR) partitions became complete.

Each tick reads the staging area, the kept state and Kafka's watermarks once
(operations/completeness.py), updates the kept state (declared days, late records, the marks
that survive retention) and reports ``day_complete`` passed for every day of every checked
table that became complete since the last tick: one evaluation per day, with the evidence as
metadata. Its interval is short against retention's (9 min by default) so the times of
loaded ranges are read before retention deletes their done files.
"""

from __future__ import annotations

from datetime import datetime, timezone

import dagster as dg

# Dagster 1.13 ties a partitioned check's verdict to the partition's latest materialization:
# an evaluation that names none does not count once the partition was materialized, and a
# check-only run cannot take a partition key yet (partitioned checks are a preview). A
# sensor's evaluation therefore names the materialization it judged, with this record, which
# dagster does not export at the top level. The one private import of defs/; see
# docs/architecture.md (Completeness) for what to change when Dagster lets the check run.
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

from kbqe_dagster.defs.bigquery.assets import Destinations
from kbqe_dagster.defs.completeness.checks import check_metadata, check_name, checked_tables
from kbqe_dagster.operations.completeness import CompletenessReport, evaluate
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource, StagingResource
from kbqe_dagster.resources.kafka.cluster import watermarks_of


def day_complete_events(
    report: CompletenessReport, destinations: Destinations, instance: dg.DagsterInstance
) -> list[dg.AssetCheckEvaluation]:
    """A passed ``day_complete`` per newly complete day of each checked table
    (``hour_complete`` per newly complete hour of an HOUR table)."""
    checked = {f"{d}.{t}" for d, t in checked_tables(destinations)}
    start = destinations.partition_start.isoformat()
    events = []
    for name, table in sorted(report.tables.items()):
        if name not in checked:
            continue
        dataset, table_name = name.split(".")
        key = dg.AssetKey(["bigquery", dataset, table_name])
        check = check_name(destinations, dataset, table_name)
        for period in table.newly_complete:
            partition = table.unit.key(period)
            if partition < start:  # ISO keys of either unit sort as their times
                continue
            events.append(dg.AssetCheckEvaluation(
                asset_key=key, check_name=check, passed=True, partition=partition,
                severity=dg.AssetCheckSeverity.WARN, metadata=check_metadata(table, period),
                target_materialization_data=_latest_materialization(instance, key, partition),
            ))
    return events


def _latest_materialization(
    instance: dg.DagsterInstance, key: dg.AssetKey, partition: str
) -> AssetCheckEvaluationTargetMaterializationData | None:
    """The partition's latest load (None: no record of it loaded, e.g. an empty day)."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1
    ).records
    if not records:
        return None
    latest = records[0]
    return AssetCheckEvaluationTargetMaterializationData(
        storage_id=latest.storage_id, run_id=latest.run_id, timestamp=latest.timestamp
    )


@dg.sensor(minimum_interval_seconds=60, default_status=dg.DefaultSensorStatus.RUNNING)
def completeness_sensor(
    context: dg.SensorEvaluationContext,
    pipeline: PipelineResource,
    staging: StagingResource,
    kafka: KafkaResource,
) -> dg.SensorResult:
    """Report ``day_complete`` (``hour_complete``) for each partition that became complete."""
    config = pipeline.load()
    settings = kafka.settings()
    report = evaluate(config, staging.store(), lambda topics: watermarks_of(settings, topics),
                      datetime.now(timezone.utc), write=True)
    for name, table in sorted(report.tables.items()):
        held = ", ".join(f"{h.topic}[{h.partition}]" for h in table.verdict.held_back_by)
        context.log.debug("%s: newest complete %s; next held back by %s", name,
                          table.verdict.newest_complete, held or "nothing")
    events = day_complete_events(report, Destinations.from_config(config), context.instance)
    if not events:
        return dg.SensorResult(skip_reason="no day became complete")
    return dg.SensorResult(asset_events=events)
