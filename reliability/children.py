"""What runs in the child processes the suite kills, pauses or races.

Every function here is the body of one child process, started from a ``forkserver`` whose
preloaded modules include this one, so a child starts in milliseconds instead of importing
kbqe_dagster, fastavro and the Google clients again. Children report through a queue; a
child killed with SIGKILL reports nothing, which is the point.
"""

from __future__ import annotations

import logging
import multiprocessing
import os
import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.context import BaseContext
from pathlib import Path
from typing import Any

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.faults import CRASH_ENV
from kbqe_dagster.loading.coordinator import LoadCoordinator
from kbqe_dagster.localstack.endpoints import LocalEndpoints
from kbqe_dagster.resources.kafka.range_reader import read_range
from kbqe_dagster.resources.staging_store import GcsStagingStore, StagingLocation
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.stager import RangeStager
from kbqe_dagster.staging.task import stage_range
from reliability.world import local_loads, plan_run

EVENT_TIMEOUT = 180.0  # a child never waits for the parent longer than this


def context() -> BaseContext:
    """The process context of the suite: a forkserver that has imported this module."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def _crash_at(spec: str | None) -> None:
    """Every child starts here: its crash point, and quiet warnings (a zombie's refused
    commit, a stage run's retries are the faults working; the parent reports outcomes)."""
    logging.getLogger("kbqe_dagster").setLevel(logging.ERROR)
    if spec:
        os.environ[CRASH_ENV] = spec
    else:
        os.environ.pop(CRASH_ENV, None)


def _plan(ctx: StageContext) -> list[OffsetRange]:
    return list(plan_run(ctx).plan.ranges)


def _failure(rng: OffsetRange, error: BaseException) -> str:
    return f"{rng}: {type(error).__name__}: {error}"


# --- stage runs ---------------------------------------------------------------------------
def stage_run(ctx: StageContext, crash_at: str | None, threads: int = 2) -> None:
    """A whole stage run: recovery and planning, then the ranges ``threads`` at a time (like
    Spark's ``local[2]``), until ``crash_at`` kills it."""
    _crash_at(crash_at)
    ranges = _plan(ctx)
    with ThreadPoolExecutor(max_workers=threads) as pool:
        list(pool.map(lambda rng: stage_range(ctx, rng), ranges))


def stage_run_first_range_last(ctx: StageContext, crash_at: str) -> None:
    """A stage run whose ranges run one at a time, partition 0's first range after all the
    others (Spark runs tasks in any order), until ``crash_at`` kills it."""
    _crash_at(crash_at)
    ranges = _plan(ctx)
    first0 = min(r.start for r in ranges if r.partition == 0)
    for rng in sorted(ranges, key=lambda r: (r.partition, r.start) == (0, first0)):
        stage_range(ctx, rng)


def stage_run_paused(ctx: StageContext, staged_first: Any, resume: Any, outcome: Any) -> None:
    """A stage run that commits its first range, sets ``staged_first`` and waits for
    ``resume`` before staging the others (the parent breaks a service meanwhile). Puts
    ``{"committed": [...], "failures": [...]}`` on ``outcome``."""
    _crash_at(None)
    committed: list[str] = []
    failures: list[str] = []
    for index, rng in enumerate(_plan(ctx)):
        if index == 1:
            staged_first.set()
            resume.wait(EVENT_TIMEOUT)
        try:
            result = stage_range(ctx, rng)
            if result.committed_last is not None:
                committed.append(f"{rng.partition}:{rng.start}..{result.committed_last}")
        except Exception as error:  # noqa: BLE001 - reported to the parent
            failures.append(_failure(rng, error))
    staged_first.set()  # fewer than two ranges: the parent must not wait forever
    outcome.put({"committed": committed, "failures": failures})


def stage_run_upload_outage(ctx: StageContext, uploaded: Any, resume: Any, outcome: Any) -> None:
    """A stage run on GCS that, right after its first avro upload, sets ``uploaded`` and
    waits for ``resume`` (the parent stops fake-gcs-server meanwhile): the outage falls
    between two uploads of one range."""
    _crash_at(None)
    real_put = GcsStagingStore.create_only_file
    puts = {"n": 0}

    def create_only_file(store: GcsStagingStore, local_path: Path, name: str) -> str:
        version = real_put(store, local_path, name)
        puts["n"] += 1
        if puts["n"] == 1:
            uploaded.set()
            resume.wait(EVENT_TIMEOUT)
        return version

    GcsStagingStore.create_only_file = create_only_file  # type: ignore[method-assign] - this child only
    attempted: list[tuple[int, int]] = []
    committed: list[str] = []
    failures: list[str] = []
    try:
        ranges = _plan(ctx)
    except Exception as error:  # noqa: BLE001
        uploaded.set()
        outcome.put({"attempted": [], "committed": [], "failures": [f"planning: {error}"]})
        return
    for rng in ranges:
        attempted.append((rng.partition, rng.start))
        try:
            result = stage_range(ctx, rng)
            if result.committed_last is not None:
                committed.append(f"{rng.partition}:{rng.start}..{result.committed_last}")
        except Exception as error:  # noqa: BLE001 - reported to the parent
            failures.append(_failure(rng, error))
    uploaded.set()
    outcome.put({"attempted": attempted, "committed": committed, "failures": failures})


def stage_run_paused_at_append(ctx: StageContext, appended: Any, resume: Any, outcome: Any) -> None:
    """A stage run whose ranges run one at a time and that, right after its first Storage
    Write append was answered, sets ``appended`` and waits for ``resume`` (the parent starts
    a zombie or restarts the BigQuery emulator meanwhile): paused between two appends of a
    range, its intent open. Puts ``{"committed": [...], "conflicts": [...], "failures":
    [...], "paused_in": "partition:start"}`` on ``outcome``."""
    from kbqe_dagster.resources.bigquery.storage_write import GoogleStorageWriter

    _crash_at(None)
    real_append = GoogleStorageWriter.append
    state: dict[str, Any] = {"appends": 0, "range": None}

    def append(writer: GoogleStorageWriter, stream: str, rows: Any, offset: int | None) -> Any:
        answer = real_append(writer, stream, rows, offset)
        state["appends"] += 1
        if state["appends"] == 1:
            state["paused_in"] = state["range"]
            appended.set()
            resume.wait(EVENT_TIMEOUT)
        return answer

    GoogleStorageWriter.append = append  # type: ignore[method-assign] - this child only
    committed: list[str] = []
    conflicts: list[str] = []
    failures: list[str] = []
    for rng in _plan(ctx):
        state["range"] = f"{rng.partition}:{rng.start}"
        try:
            result = stage_range(ctx, rng)
            if result.committed_last is not None:
                committed.append(f"{rng.partition}:{rng.start}..{result.committed_last}")
            elif result.conflict:
                conflicts.append(f"{rng.partition}:{rng.start}")
        except Exception as error:  # noqa: BLE001 - reported to the parent
            failures.append(_failure(rng, error))
    appended.set()  # never appended: the parent must not wait forever
    outcome.put(
        {
            "committed": committed,
            "conflicts": conflicts,
            "failures": failures,
            "paused_in": state.get("paused_in"),
        }
    )


def zombie_writer(
    ctx: StageContext,
    ranges: list[OffsetRange],
    name: str,
    read_done: Any,
    commit_now: Any,
    outcome: Any,
) -> None:
    """One of two writers of the same planned ranges: read them all, set ``read_done``,
    wait for ``commit_now`` (a barrier for a race, or an event for a late zombie), then
    commit each. Puts ``(name, partition, start, committed_last, conflict)`` per range."""
    _crash_at(None)
    workdir = Path(tempfile.mkdtemp(prefix=f"kbqe-zombie-{name}-"))
    try:
        staged = []
        for rng in ranges:
            stager = RangeStager(ctx, rng, workdir / f"{rng.partition}-{rng.start}")
            stager.workdir.mkdir()
            position: list[int] = []
            for msg in read_range(
                ctx.kafka,
                rng.topic,
                rng.partition,
                rng.start,
                rng.end_exclusive,
                position_out=position,
            ):
                stager.add(msg)
            staged.append((rng, stager, position[0] if position else rng.start))
        read_done.set()
        commit_now.wait(EVENT_TIMEOUT)  # a Barrier (a race) or an Event (a late zombie)
        store = ctx.staging.open()
        for rng, stager, position in staged:
            result = stager.commit(store, position)
            outcome.put((name, rng.partition, rng.start, result.committed_last, result.conflict))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


# --- load runs ----------------------------------------------------------------------------
def load_cycle(
    staging: StagingLocation,
    config: PipelineConfig,
    endpoints: LocalEndpoints,
    crash_at: str | None,
) -> None:
    """One load cycle with the local stack's BigQuery resource, until ``crash_at`` kills it."""
    _crash_at(crash_at)
    LoadCoordinator(staging.open(), local_loads(endpoints), config).run_cycle()
