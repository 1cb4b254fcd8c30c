"""Executor side of a stage run: :func:`stage_range` stages exactly one offset range and
commits it (runs inside a Spark task).

It reads the range (the native consumer or confluent-kafka's), makes the topic's stager
(chosen on the driver, shipped in the stage context), gives every message to the native
kernel host or to the stager one by one, and commits through the stager's sink. What a
message becomes is the stager's (staging/stager.py); how a range commits, its sink's
(staging/range_sink.py).
"""

from __future__ import annotations

import logging
import shutil
import time
from dataclasses import replace

from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.resources.kafka.native_reader import native_range_reader
from kbqe_dagster.resources.kafka.range_reader import RangeReader
from kbqe_dagster.staging.context import RangeResult, StageContext
from kbqe_dagster.staging.native_kernel import NATIVE, PYTHON, NativeStaging
from kbqe_dagster.staging.stager import RangeStager, chosen_stager
from kbqe_dagster.staging.workdirs import new_workdir, remove_abandoned_workdirs

log = logging.getLogger(__name__)


def stage_messages(stager: RangeStager, reader: RangeReader, native: NativeStaging | None) -> None:
    """Every message of the range through the native kernel, or one by one through the
    Python path (the reference; also what the kernel hands back)."""
    if native is not None:
        native.stage(reader)
        return
    for batch in reader.batches():
        for msg in batch:
            if reader.accept(msg):
                stager.add(msg)
            elif reader.finished:
                break


def _range_reader(ctx: StageContext, rng: OffsetRange, native: bool) -> RangeReader:
    """The kernel's native consumer when it can read the range, else confluent-kafka's."""
    if native and ctx.native_consumer:
        reader = native_range_reader(
            ctx.kafka, rng.topic, rng.partition, rng.start, rng.end_exclusive
        )
        if reader is not None:
            return reader
    return RangeReader(ctx.kafka, rng.topic, rng.partition, rng.start, rng.end_exclusive)


def stage_range(ctx: StageContext, rng: OffsetRange) -> RangeResult:
    """Stage and commit ``rng`` (runs inside a Spark task)."""
    started = time.monotonic()
    remove_abandoned_workdirs()
    workdir = new_workdir(rng.partition, rng.start)
    try:
        stager = chosen_stager(ctx)(ctx, rng, workdir)
        native = NativeStaging.for_stager(stager)
        reader = _range_reader(ctx, rng, native is not None)
        stage_messages(stager, reader, native)
        result = stager.commit(ctx.staging.open(), reader.covered, reader.kafka_ts_max)
        reader_name = NATIVE if getattr(reader, "native", False) else "confluent-kafka"
        log.info(
            "%s: %d message(s), %d record(s), %d file(s) in %.1fs (%s stage path, %s reader)",
            rng,
            result.messages,
            result.records,
            len(result.files),
            time.monotonic() - started,
            NATIVE if native else PYTHON,
            reader_name,
        )
        return replace(
            result,
            seconds=time.monotonic() - started,
            stage_path=NATIVE if native else PYTHON,
            kernel_handbacks=dict(native.handbacks) if native else {},
            reader=reader_name,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
