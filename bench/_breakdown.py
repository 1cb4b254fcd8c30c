"""Where a stage task's time per message goes (bench/bench_stage.py --breakdown).

Reads the first messages of one partition into memory with the stage job's reader, then
times each per-message step of a stage task alone over those same messages, in this
process, without Spark: the reader, the frame, the probe (validation plus the routing and
event-time fields), routing, the event date, the enrichment prefix, the container append
with snappy, and ``RangeStager.add`` as a whole. Rates are process CPU time (the reader's
includes librdkafka's threads), best of ``repeat``, so they hold on a loaded machine.

With the native kernel built, :func:`kernel_phases` splits the kernel path as a stage task
runs it (issue 42, part 1): the native reader alone, then read + kernel + container files and
the commit (done file, files moved into the staging area) timed apart, each with
``file_codec: null`` and ``snappy``; the differences are the kernel with its container
appends, and snappy's own cost. What a Spark task adds on top is bench_stage.py's: a stage
run's CPU per message against ``whole range`` here.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from kbqe_dagster.core.config.sections import FileCodec
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.enrichment import EnrichmentEncoder, extended_schema
from kbqe_dagster.core.record.event_time import epoch_day, event_date
from kbqe_dagster.core.record.routing import RoutingInput
from kbqe_dagster.core.record.wire import parse_frame
from kbqe_dagster.resources.kafka.native_reader import native_range_reader
from kbqe_dagster.resources.kafka.range_reader import read_range
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.staging.avro_container import AvroContainerWriter
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging, kernel_status
from kbqe_dagster.staging.probe.record_probe import RecordProbe
from kbqe_dagster.staging.stager import RangeStager
from kbqe_dagster.staging.task import stage_range


def _best(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        started = time.process_time()
        fn()
        best = min(best, time.process_time() - started)
    return best


def breakdown(ctx: StageContext, schema: dict, count: int, repeat: int = 3) -> dict:
    """CPU µs per message of each step over the first ``count`` messages of partition 0."""
    topic = ctx.topic
    started = time.process_time()
    msgs = list(read_range(ctx.kafka, topic.name, 0, 0, count))
    read_cpu = time.process_time() - started
    n = len(msgs)
    values = [m.value() for m in msgs]
    probe = RecordProbe(schema, topic.required_fields).probe
    bodies = [v[5:] for v in values]
    fields = [probe(b) for b in bodies]
    router = ctx.pipeline.router(topic.name)
    rules = topic.event_time
    days = [epoch_day(event_date(rules, f, None)) for f in fields]
    encoder = EnrichmentEncoder(ctx.pipeline.enrichment, topic.name, 0)
    prefixes = [encoder.encode(d, m.offset(), m.timestamp()[1]) for d, m in zip(days, msgs)]
    extended = extended_schema(schema, ctx.pipeline.enrichment)

    def accessors() -> None:
        for m in msgs:
            m.value(), m.key(), m.offset(), m.timestamp()

    def route() -> None:
        r = router.route
        for m, f in zip(msgs, fields):
            r(RoutingInput(topic.name, 0, m.offset(), "x", f, m.key()))

    def append() -> None:
        with tempfile.TemporaryFile() as sink:
            writer = AvroContainerWriter(sink, extended, "snappy")
            add = writer.append
            for p, b in zip(prefixes, bodies):
                add(p, b)
            writer.close()

    def stage() -> float:
        """CPU of ``add`` alone: the stager's set-up (registry client, probe compilation)
        and its first message are per range, not per message."""
        with tempfile.TemporaryDirectory() as tmp:
            stager = RangeStager(ctx, OffsetRange(topic.name, 0, 0, count), Path(tmp))
            stager.add(msgs[0])
            add = stager.add
            started = time.process_time()
            for m in msgs[1:]:
                add(m)
            seconds = time.process_time() - started
            stager.discard()  # the files are not committed
            return seconds * n / (n - 1)

    steps: dict[str, Callable[[], object]] = {
        "message accessors (value, key, offset, timestamp)": accessors,
        "parse_frame": lambda: [parse_frame(v) for v in values],
        "probe: validate + read 3 fields": lambda: [probe(b) for b in bodies],
        "route (RoutingInput + Router.route)": route,
        "event date (event_date + epoch_day)": lambda: [epoch_day(event_date(rules, f, None)) for f in fields],
        "enrichment prefix (encode)": lambda: [encoder.encode(d, i, 1_726_238_205_123) for i, d in enumerate(days)],
        "container append + snappy": append,
    }  # fmt: skip
    out = {"messages": n, "read_range (Kafka to messages)": round(read_cpu / n * 1e6, 2)}
    for name, fn in steps.items():
        out[name] = round(_best(fn, repeat) / n * 1e6, 2)
    out["RangeStager.add, all of it"] = round(min(stage() for _ in range(repeat)) / n * 1e6, 2)
    if kernel_status().available:
        out["native kernel, all of it (staging/native_kernel.py)"] = round(
            min(native(ctx, msgs) for _ in range(repeat)) / n * 1e6, 2
        )
        del msgs, values, bodies, fields, prefixes
        out["kernel phases"] = kernel_phases(ctx, n, repeat)
        for reader, native_consumer in (("confluent-kafka", False), ("native", True)):
            one = replace(ctx, native_consumer=native_consumer)
            out[f"whole range, kernel + {reader} reader (read, stage, commit)"] = round(
                min(whole_range(one, n) for _ in range(repeat)) / n * 1e6, 2
            )
    return out


def kernel_phases(ctx: StageContext, count: int, repeat: int) -> dict[str, float]:
    """CPU µs per message of the kernel path's phases over the first ``count`` messages of
    partition 0, native reader and native kernel as a stage task runs them (best of
    ``repeat`` each; see the module docstring)."""
    us = 1e6 / count
    out = {"consume: native reader alone": round(min(consume_native(ctx, count)
                                                      for _ in range(repeat)) * us, 2)}  # fmt: skip
    for codec in (FileCodec.NULL, FileCodec.SNAPPY):
        one = with_codec(ctx, codec)
        stage_cpu, commit_cpu = min(phased_range(one, count) for _ in range(repeat))
        out[f"read + kernel + container, file_codec {codec}"] = round(stage_cpu * us, 2)
        out[f"commit (done file, files moved), file_codec {codec}"] = round(commit_cpu * us, 2)
    consume = out["consume: native reader alone"]
    plain = out["read + kernel + container, file_codec null"]
    out["= kernel + container appends (null − consume)"] = round(plain - consume, 2)
    out["= snappy compression (snappy − null)"] = round(
        out["read + kernel + container, file_codec snappy"] - plain, 2
    )
    return out


def consume_native(ctx: StageContext, count: int) -> float:
    """CPU of reading the range with the native reader alone: librdkafka's fetches and the
    extension's batches, nothing staged (each batch's position noted, as the stage loop does)."""
    reader = native_range_reader(ctx.kafka, ctx.topic.name, 0, 0, count)
    if reader is None:
        raise RuntimeError("the native reader is not available (KBQE_NATIVE_CONSUMER, librdkafka)")
    started = time.process_time()
    for batch in reader.batches():
        if len(batch):
            reader.staged_through(batch[len(batch) - 1].offset())
    return time.process_time() - started


def phased_range(ctx: StageContext, count: int) -> tuple[float, float]:
    """CPU of a kernel-staged range (native reader), read + stage apart from the commit, into
    a temporary staging area: staging/task.py ``stage_range``'s steps, timed one by one."""
    with tempfile.TemporaryDirectory() as tmp:
        one = replace(ctx, staging=StagingLocation(str(Path(tmp) / "staging")))
        rng = OffsetRange(ctx.topic.name, 0, 0, count)
        workdir = Path(tmp) / "work"
        workdir.mkdir()
        stager = RangeStager(one, rng, workdir)
        driver = NativeStaging.for_stager(stager)
        reader = native_range_reader(one.kafka, rng.topic, 0, 0, count)
        if driver is None or reader is None:
            raise RuntimeError("the kernel path is not available for this range")
        started = time.process_time()
        driver.stage(reader)
        staged = time.process_time()
        stager.commit(one.staging.open(), reader.covered, reader.kafka_ts_max)
        return staged - started, time.process_time() - staged


def with_codec(ctx: StageContext, codec: FileCodec) -> StageContext:
    """``ctx`` with its topic's staged files in ``codec``."""
    topics = tuple(
        replace(t, staging=replace(t.staging, file_codec=codec)) if t.name == ctx.topic_name else t
        for t in ctx.pipeline.topics
    )
    return replace(ctx, pipeline=replace(ctx.pipeline, topics=topics))


def whole_range(ctx: StageContext, count: int) -> float:
    """CPU of ``stage_range`` over the first ``count`` messages of partition 0, in this process
    (librdkafka's threads included): read, stage and commit to a temporary staging area."""
    with tempfile.TemporaryDirectory() as tmp:
        one = replace(ctx, staging=StagingLocation(str(Path(tmp) / "staging")))
        started = time.process_time()
        stage_range(one, OffsetRange(ctx.topic.name, 0, 0, count))
        return time.process_time() - started


class _Batches:
    """The reader contract of the native loop over messages already in memory."""

    def __init__(self, msgs: list, size: int = 10_000) -> None:
        self.msgs, self.size = msgs, size
        self.end_exclusive = msgs[-1].offset() + 1
        self.position, self.finished = msgs[0].offset(), False

    def batches(self):
        for at in range(0, len(self.msgs), self.size):
            yield self.msgs[at : at + self.size]

    def accept(self, msg) -> bool:
        self.position = msg.offset() + 1
        return True

    def staged_through(self, offset: int) -> None:
        self.position = offset + 1


def native(ctx: StageContext, msgs: list) -> float:
    """CPU of the native loop over the messages (batches of 10,000, as consumed), the first
    message's hand-back and the kernel's schema set-up included, files appended included."""
    with tempfile.TemporaryDirectory() as tmp:
        topic = ctx.topic
        stager = RangeStager(ctx, OffsetRange(topic.name, 0, 0, len(msgs)), Path(tmp))
        driver = NativeStaging.for_stager(stager)
        started = time.process_time()
        driver.stage(_Batches(msgs))
        seconds = time.process_time() - started
        stager.discard()  # the files are not committed
        return seconds


def run_in_child(ctx: StageContext, schema: dict, count: int) -> dict:
    """:func:`breakdown` in its own process, so the messages it holds never count in the
    driver's memory figures."""
    from _kafka_bench import _in_processes

    [result] = _in_processes(_child, [(ctx, schema, count)])
    return result


def _child(ctx: StageContext, schema: dict, count: int, queue) -> None:
    queue.put(breakdown(ctx, schema, count))
