"""The after-load step of ``kbqe run --until-idle``: the merge job, forced (a catch-up merges
whatever is new, whatever ``merge_every`` says), recorded in the Dagster instance like every
run of the runner. Registered in after_load_steps.py."""

from __future__ import annotations

from kbqe_dagster.keyed.merge import MERGE_JOB, MERGE_OP, keyed_destinations
from kbqe_dagster.runner.after_load import AfterLoadContext, AfterLoadResult, TableMerge


def merge_keyed_tables(context: AfterLoadContext) -> AfterLoadResult:
    destinations = {d.name for d in keyed_destinations(context.config)}
    if not destinations:
        return AfterLoadResult()
    run = context.run_job(MERGE_JOB, {"ops": {MERGE_OP: {"config": {"force": True}}}})
    if not run.ok:
        return AfterLoadResult(run_ids=(run.run_id,), error=f"merge run {run.run_id}: {run.error}")
    tables = {}
    for key, metadata in run.materializations:
        name = ".".join(key[1:])
        if name in destinations:
            tables[name] = TableMerge(
                int(metadata.get("keys_merged") or 0), metadata.get("merge_bytes_processed")
            )
    if run.failed_checks:
        return AfterLoadResult(
            tables=tables,
            run_ids=(run.run_id,),
            error=f"merge run {run.run_id}: failed check(s) {', '.join(run.failed_checks)}",
        )
    return AfterLoadResult(tables=tables, run_ids=(run.run_id,))
