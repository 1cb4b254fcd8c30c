"""Where a stage task's time per message goes (bench/bench_stage.py --breakdown).

Reads the first messages of one partition into memory with the stage job's reader, then
times each per-message step of a stage task alone over those same messages, in this
process, without Spark: the reader, the frame, the probe (validation plus the routing and
event-time fields), routing, the event date, the enrichment prefix, the container append
with snappy, and ``RangeStager.add`` as a whole. Rates are process CPU time (the reader's
includes librdkafka's threads), best of ``repeat``, so they hold on a loaded machine.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.enrichment import EnrichmentEncoder, extended_schema
from kbqe_dagster.core.record.event_time import epoch_day, event_date
from kbqe_dagster.core.record.routing import RoutingInput
from kbqe_dagster.core.record.wire import parse_frame
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
        for reader, native_consumer in (("confluent-kafka", False), ("native", True)):
            one = replace(ctx, native_consumer=native_consumer)
            out[f"whole range, kernel + {reader} reader (read, stage, commit)"] = round(
                min(whole_range(one, n) for _ in range(repeat)) / n * 1e6, 2
            )
    return out


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
