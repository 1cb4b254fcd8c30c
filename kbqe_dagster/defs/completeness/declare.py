"""Declaring complete days: the one function ``completeness_sensor`` and ``kbqe run
--until-idle`` both call, so a pipeline run by the daemon and one run from cron keep the same
state and record the same verdicts in Dagster.

:func:`declare_complete_days` evaluates completeness as of ``now`` and updates the kept state
(operations/completeness.py: declared days, late records, the partitions' marks), then builds
a passed ``day_complete`` (``hour_complete``) evaluation for every day of every checked table
that became complete, on that table asset's partition, naming the partition's latest load on
``instance`` as the materialization it judged. The caller records the evaluations: the
sensor returns them in its ``SensorResult`` (the daemon records them on its instance), the
runner reports them on its instance with ``report_runless_asset_event`` — the same call the
daemon makes for a sensor's asset events.

No definition lives here (no sensor, asset or job): plain functions over Dagster's event
types, importable by the runner without the sensor's wiring.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import dagster as dg

# Dagster 1.13 ties a partitioned check's verdict to the partition's latest materialization:
# an evaluation that names none does not count once the partition was materialized, and a
# check-only run cannot take a partition key yet (partitioned checks are a preview). An
# evaluation reported outside a run of the check therefore names the materialization it
# judged, with this record, which dagster does not export at the top level. The one private
# import of defs/; see docs/architecture.md (Completeness) for what to change when Dagster
# lets the check run.
from dagster._core.definitions.asset_checks.asset_check_evaluation import (
    AssetCheckEvaluationTargetMaterializationData,
)

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.defs.completeness.checks import check_metadata, check_name, checked_tables
from kbqe_dagster.defs.keys import Destinations
from kbqe_dagster.operations.completeness import CompletenessReport, WatermarkReader, evaluate
from kbqe_dagster.resources.staging_store import StagingStore


@dataclass(frozen=True)
class Declaration:
    """One evaluation: the verdict per table (the kept state already updated) and the
    ``day_complete`` evaluations to record for the days it declared."""

    report: CompletenessReport
    events: tuple[dg.AssetCheckEvaluation, ...]


def declare_complete_days(
    config: PipelineConfig,
    store: StagingStore,
    read_watermarks: WatermarkReader,
    now: datetime,
    instance: dg.DagsterInstance,
) -> Declaration:
    """Evaluate completeness as of ``now``, write the kept state, and build the passed
    ``day_complete`` evaluations of the days that became complete."""
    report = evaluate(config, store, read_watermarks, now, write=True)
    events = day_complete_events(report, Destinations.from_config(config), instance)
    return Declaration(report, tuple(events))


def day_complete_events(
    report: CompletenessReport, destinations: Destinations, instance: dg.DagsterInstance
) -> list[dg.AssetCheckEvaluation]:
    """A passed ``day_complete`` per newly complete day of each checked table
    (``hour_complete`` per newly complete hour of an HOUR table, ``month_complete`` and
    ``year_complete`` likewise; an unpartitioned table's ``table_complete``: one unpartitioned
    evaluation naming the newest complete day)."""
    checked = {f"{d}.{t}" for d, t in checked_tables(destinations)}
    events = []
    for name, table in sorted(report.tables.items()):
        if name not in checked:
            continue
        dataset, table_name = name.split(".")
        key = dg.AssetKey(["bigquery", dataset, table_name])
        check = check_name(destinations, dataset, table_name)
        unit = table.unit
        unpartitioned = destinations.time_partitions(dataset, table_name) is None
        # ISO keys of either unit sort as their times; a month (year) from its first day.
        start = unit.key(unit.start_of(destinations.partition_start))
        declared = _declared_in_dagster(instance, dg.AssetCheckKey(key, check))
        for period in table.newly_complete[-1:] if unpartitioned else table.newly_complete:
            partition = None if unpartitioned else unit.key(period)
            if partition is not None and partition < start:
                continue
            if partition in declared:
                # Declared already (another staging area's state, or a kept state that was
                # deleted): Dagster holds one runless evaluation per check and partition, and
                # refuses a second one (a UNIQUE constraint), which failed the whole tick.
                continue
            events.append(
                dg.AssetCheckEvaluation(
                    asset_key=key,
                    check_name=check,
                    passed=True,
                    partition=partition,
                    severity=dg.AssetCheckSeverity.WARN,
                    metadata=check_metadata(table, period),
                    target_materialization_data=_latest_materialization(instance, key, partition),
                )
            )
    return events


def _declared_in_dagster(instance: dg.DagsterInstance, check: dg.AssetCheckKey) -> set[str]:
    """The partitions ``check`` already has a runless evaluation for (what this module
    records: no run executes the check)."""
    history = instance.event_log_storage.get_asset_check_execution_history(
        check, limit=_DECLARED_LOOKBACK
    )
    return {r.partition for r in history if not r.run_id and r.partition is not None}


_DECLARED_LOOKBACK = 1000
"""Evaluations read per check: newly complete days are the newest, so the latest thousand
(almost three years of days, six weeks of hours) hold any earlier declaration of them."""


def _latest_materialization(
    instance: dg.DagsterInstance, key: dg.AssetKey, partition: str | None
) -> AssetCheckEvaluationTargetMaterializationData | None:
    """The partition's latest load (None: no record of it loaded, e.g. an empty day);
    ``partition`` None: the unpartitioned table's."""
    partitions = [partition] if partition is not None else None
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=partitions), limit=1
    ).records
    if not records:
        return None
    latest = records[0]
    return AssetCheckEvaluationTargetMaterializationData(
        storage_id=latest.storage_id, run_id=latest.run_id, timestamp=latest.timestamp
    )
