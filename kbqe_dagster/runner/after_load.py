"""The contract of the steps ``kbqe run --until-idle`` runs after each round's loads (the steps
themselves are registered in ``after_load_steps.py``). A step relies on this:

- it is called once per round, after that round's load jobs have all finished (nothing
  pending in the load state), **also when the round loaded nothing**: a merge interrupted by
  a crash in an earlier process is caught up by the next run;
- ``context.loaded`` holds what this round's load runs finished per ``"dataset.table"``
  (rows, job ids, exact Kafka offset ranges); a step must not rely on it alone: rows of a
  table delivered through the Storage Write API arrive with no load (the keyed merge reads
  its own bookkeeping of load jobs and delivered ranges);
- ``context.run_job(job_name, run_config, tags)`` executes a job of the definitions in this
  process against the same Dagster instance (recorded, visible in the UI) and returns a
  :class:`JobRun`; a step that queries BigQuery directly may instead use its own resources;
- its :class:`AfterLoadResult` adds ``keys_merged`` and ``merge_bytes_processed`` per table
  to the report; ``pending=True`` asks for another round (more to merge), and ``error``
  ends the run with exit code 1 and that one-line reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from kbqe_dagster.runner.report import TableLoad

if TYPE_CHECKING:  # annotations only: `kbqe --help` must not import the config model
    from kbqe_dagster.core.config.pipeline import PipelineConfig


@dataclass(frozen=True)
class JobRun:
    """A job run executed in-process, in the terms a step reads: its materializations as
    ``(asset key path, metadata)`` with plain metadata values."""

    job_name: str
    run_id: str
    ok: bool
    error: str | None = None
    materializations: tuple[tuple[tuple[str, ...], Mapping[str, Any]], ...] = ()
    failed_checks: tuple[str, ...] = ()
    """``asset/path:check_name`` of each check the run evaluated as failed (severity ERROR)."""


class JobRunner(Protocol):
    def __call__(
        self,
        job_name: str,
        run_config: Mapping[str, Any] | None = None,
        tags: Mapping[str, str] | None = None,
    ) -> JobRun: ...


@dataclass(frozen=True)
class AfterLoadContext:
    round: int
    config: PipelineConfig
    loaded: Mapping[str, TableLoad]
    """What this round's load runs finished, per ``"dataset.table"`` (empty: nothing new)."""
    run_job: JobRunner


@dataclass(frozen=True)
class TableMerge:
    keys_merged: int
    bytes_processed: int | None = None
    """What BigQuery billed for the MERGE, where it reports it."""


@dataclass(frozen=True)
class AfterLoadResult:
    tables: Mapping[str, TableMerge] = field(default_factory=dict)
    run_ids: tuple[str, ...] = ()
    pending: bool = False
    """Work is left that another round will do: the runner is not idle yet."""
    error: str | None = None
    """Set: the run fails with this one-line reason (naming the table)."""


AfterLoadStep = Callable[[AfterLoadContext], AfterLoadResult]
