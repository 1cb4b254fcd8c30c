"""What a load-coordinator run reports to Dagster: one ``AssetMaterialization`` per (table,
DAY, HOUR, MONTH or YEAR partition, as the table is partitioned; one per table of an
unpartitioned table) a finished job wrote — rows, bytes, job
id, file count, offset ranges — and the check evaluations computed during the load itself
(rows loaded, quarantine, staging freshness). Job statistics are free; nothing here queries a table.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

import dagster as dg

from kbqe_dagster.core.load.checks import (
    no_quarantined_files,
    pending_files_fresh,
    rows_loaded,
)
from kbqe_dagster.core.record.partitioning import Partitioning
from kbqe_dagster.defs.keys import STAGING_KEY, Destinations, tables_partitions_name
from kbqe_dagster.defs.verdicts import verdict_evaluation
from kbqe_dagster.loading.report import CompletedLoad, CycleReport, PartitionLoad


def load_events(
    report: CycleReport,
    destinations: Destinations,
    instance: dg.DagsterInstance,
    *,
    freshness_limit_s: float | None = None,
    log=None,
) -> Iterator[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    """Every event of one run, materializations first. ``freshness_limit_s``: evaluate the
    staging freshness check too (load cycles only: a poll does not list the staging area)."""
    _register_tables(report, destinations, instance)
    for completed in report.completed:
        for part in completed.partitions(destinations.partitioning(*completed.table_id)):
            event = materialization(completed, part, destinations)
            if event is not None:
                yield event
            elif log is not None:
                log.warning(
                    "%s.%s is not declared in the pipeline file: load %s not reported on an asset",
                    part.dataset,
                    part.table,
                    part.job_id,
                )
    yield from rows_loaded_evaluations(report, destinations)
    yield from quarantine_evaluations(report, destinations)
    if freshness_limit_s is not None and report.oldest_unloaded_age_s is not None:
        yield verdict_evaluation(
            STAGING_KEY,
            pending_files_fresh(
                report.oldest_unloaded_age_s, report.unloaded_files, freshness_limit_s
            ),
        )


def _register_tables(
    report: CycleReport, destinations: Destinations, instance: dg.DagsterInstance
) -> None:
    """Add first-seen tables of wildcard datasets to their dynamic partitions."""
    new: dict[str, set[str]] = defaultdict(set)
    for completed in report.completed:
        dataset, table = completed.table_id
        if destinations.is_wildcard(dataset, table):
            new[dataset].add(table)
    for dataset, tables in new.items():
        name = tables_partitions_name(dataset)
        known = set(instance.get_dynamic_partitions(name))
        if tables - known:
            instance.add_dynamic_partitions(name, sorted(tables - known))


def materialization(
    completed: CompletedLoad, part: PartitionLoad, destinations: Destinations
) -> dg.AssetMaterialization | None:
    key = destinations.asset_key(part.dataset, part.table)
    if key is None:
        return None
    metadata: dict = {
        "job_id": part.job_id,
        "table": f"{part.dataset}.{part.table}",
        "schema_id": completed.job.schema_id,
        "files": part.files,
        "offset_ranges": dg.MetadataValue.json(
            [
                {"topic": t, "partition": p, "first": f, "last": last}
                for t, p, f, last in part.offset_ranges
            ]
        ),
        "attempts": len(completed.job.attempt_ids),
        "rows_source": completed.stats.rows_source if part.day is None else "done-file manifests",
    }
    unpartitioned = destinations.partitioning(part.dataset, part.table) is Partitioning.NONE
    if part.rows is not None:
        metadata["dagster/row_count"] = part.rows
    if part.job_bytes is not None:
        metadata["job_input_bytes"] = part.job_bytes
    if completed.stats.output_bytes is not None:
        metadata["job_output_bytes"] = completed.stats.output_bytes
    if completed.stats.seconds is not None:
        metadata["job_seconds"] = round(completed.stats.seconds, 3)
    if part.day is None and not unpartitioned:
        metadata["partition_note"] = (
            "event days (hours) not recorded in the done files: reported for the table as a whole"
        )
    return dg.AssetMaterialization(
        asset_key=key,
        partition=destinations.partition_key(part.dataset, part.table, part.day),
        description=f"load job {part.job_id}",
        metadata=metadata,
    )


def rows_loaded_evaluations(
    report: CycleReport, destinations: Destinations
) -> Iterator[dg.AssetCheckEvaluation]:
    """Per asset: every job finished in this run loaded exactly its staged records."""
    by_key: dict[dg.AssetKey, list[CompletedLoad]] = defaultdict(list)
    for completed in report.completed:
        key = destinations.asset_key(*completed.table_id)
        if key is not None:
            by_key[key].append(completed)
    for key, loads in by_key.items():
        yield verdict_evaluation(key, rows_loaded([c.rows_check for c in loads]))


def quarantine_evaluations(
    report: CycleReport, destinations: Destinations
) -> Iterator[dg.AssetCheckEvaluation]:
    """Fails for an asset with quarantined files; passes again for one that loaded in this
    run and has none. Assets not concerned by this run are not re-evaluated (no noise)."""
    touched = {c.table_id for c in report.completed} | {q.job.table_id for q in report.quarantined}
    quarantined = report.quarantined_tables
    by_key: dict[dg.AssetKey, set[tuple[str, str]]] = defaultdict(set)
    for table_id in touched | quarantined:
        key = destinations.asset_key(*table_id)
        if key is not None:
            by_key[key].add(table_id)
    errors = {f"{d}.{t}": q.error for q in report.quarantined for d, t in [q.job.table_id]}
    for key, tables in by_key.items():
        bad = [f"{d}.{t}" for d, t in tables if (d, t) in quarantined]
        yield verdict_evaluation(
            key, no_quarantined_files(bad, {t: errors[t] for t in bad if t in errors})
        )


def notice_events(notices, destinations: Destinations) -> Iterator[dg.AssetObservation]:
    """A table created, columns added or relaxed (core/load/notices.py), on the table's asset."""
    for notice in notices:
        dataset, table = notice.table.split(".", 1)
        key = destinations.asset_key(dataset, table)
        if key is None:
            continue
        document = notice.to_json()
        yield dg.AssetObservation(
            asset_key=key,
            description=notice.text,
            metadata={
                "schema_notice": str(notice.kind),
                "table": notice.table,
                "columns": dg.MetadataValue.json(document["columns"]),
                "before": dg.MetadataValue.json(document["before"]),
                "after": dg.MetadataValue.json(document["after"]),
                "job_id": notice.job_id or "",
            },
        )
