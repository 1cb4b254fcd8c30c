"""``kbqe load plan``: the next load cycle as a dry run — nothing is recorded or submitted.

The jobs are exactly those ``core/selection.plan_load_jobs`` gives the load coordinator for
the current listing and load state: one job per (table, schema id), lowest schema id first,
at most ``load.max_files_per_job`` files each, files in (topic, partition, first offset)
order — the order they would be submitted and listed as source URIs. Jobs already in the
load state and not finished are listed separately: the poll follows them (resubmitting a
recorded id, retrying, quarantining), and their files are never planned into a new job.
Files whose object is not the version their commit pinned are listed as leftovers: the cycle
deletes them instead of loading them (``core/selection.without_leftovers``, as the
coordinator does).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.load.selection import (
    PlannedLoadJob,
    loadable_files,
    plan_load_jobs,
    without_leftovers,
)
from kbqe_dagster.core.load.state import LoadJobRecord, LoadState
from kbqe_dagster.loading.manifests import read_file_facts
from kbqe_dagster.operations.snapshot import read_load_state, take_snapshot
from kbqe_dagster.resources.staging_store import StagingStore


@dataclass(frozen=True)
class LoadPlanReport:
    staging: str
    jobs: tuple[PlannedLoadJob, ...]
    """New jobs of the next cycle, in submission order."""
    pending_jobs: tuple[LoadJobRecord, ...]
    """Jobs already recorded in the load state and not finished."""
    deferred_files: int
    """Loadable files left for a later cycle by ``max_files_per_job``."""
    quarantined_files: tuple[str, ...]
    max_files_per_job: int
    leftovers: tuple[str, ...] = ()
    """Objects under committed names that are not the pinned version: the cycle deletes them."""

    def to_json(self) -> dict[str, Any]:
        return {
            "staging": self.staging,
            "jobs": [
                {
                    "dataset": j.dataset,
                    "table": j.table,
                    "schema_id": j.schema_id,
                    "files": list(j.files),
                    "done_files": list(j.done_files),
                }
                for j in self.jobs
            ],
            "pending_jobs": [
                {
                    "job_id": j.job_id,
                    "dataset": j.dataset,
                    "table": j.table,
                    "schema_id": j.schema_id,
                    "status": j.status.value,
                    "retry_count": j.retry_count,
                    "files": list(j.files),
                }
                for j in self.pending_jobs
            ],
            "deferred_files": self.deferred_files,
            "quarantined_files": list(self.quarantined_files),
            "max_files_per_job": self.max_files_per_job,
            "leftovers": list(self.leftovers),
        }


def load_plan(
    store: StagingStore, config: PipelineConfig, state: LoadState | None = None
) -> LoadPlanReport:
    """Plan the next load cycle of the staging area behind ``store`` without submitting."""
    snapshot = take_snapshot(store)
    listing = snapshot.listing
    if state is None:
        state = read_load_state(store)
    pending, quarantined = state.pending_files(), state.quarantined_files()
    per_job = config.load.max_files_per_job
    jobs = plan_load_jobs(
        listing, pending=pending, quarantined=quarantined, max_files_per_job=per_job
    )
    loadable = loadable_files(listing, pending=pending, quarantined=quarantined)
    deferred = len(loadable) - sum(len(j.files) for j in jobs)
    facts = read_file_facts(store, [d for job in jobs for d in job.done_files])
    jobs, leftovers = without_leftovers(
        jobs,
        {name: f.version for name, f in facts.items()},
        {f.name: f.version for f in snapshot.files.values()},
    )
    return LoadPlanReport(
        staging=store.location.url,
        jobs=tuple(jobs),
        pending_jobs=state.pending_jobs(),
        deferred_files=deferred,
        quarantined_files=tuple(sorted(quarantined)),
        max_files_per_job=per_job,
        leftovers=leftovers,
    )
