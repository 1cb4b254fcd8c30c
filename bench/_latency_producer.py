"""The producer of bench/bench_latency.py: Confluent-framed Avro of a flat schema at a steady
rate, in a child process, each message's Kafka timestamp (CreateTime: its produce time, the
table's ``_kafka_timestamp``) collected from the delivery reports.

The Avro body is written by hand (:func:`encode_body`, checked against fastavro by
kbqe_dagster_tests/bench/test_bench_latency_inputs.py): fastavro's writer would cost a
noticeable share of a core at 20,000 messages a second, taken from the path measured.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
from array import array
from queue import Empty

from _latency import Produced

SCHEMA = {
    "type": "record", "name": "LatencyProbe", "namespace": "kbqe.bench",
    "fields": [
        {"name": "seq", "type": "long"},
        {"name": "eventTime", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "source", "type": "string"},
        {"name": "amount", "type": "double"},
        {"name": "payload", "type": "string"},
    ],
}  # fmt: skip
PAYLOAD = b"x" * 120  # ~160-byte values


def _zigzag(n: int) -> bytes:
    n = (n << 1) ^ (n >> 63)
    out = bytearray()
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def encode_body(seq: int, event_ms: int, source: bytes, amount: bytes) -> bytes:
    """The Avro binary of :data:`SCHEMA` (``amount``: its 8 little-endian bytes)."""
    return (
        _zigzag(seq)
        + _zigzag(event_ms)
        + _zigzag(len(source))
        + source
        + amount
        + _zigzag(len(PAYLOAD))
        + PAYLOAD
    )


def _produce_steady(
    bootstrap: str,
    topic: str,
    rate: int,
    seconds: float,
    partitions: int,
    schema_id: int,
    queue: multiprocessing.Queue,
) -> None:
    """Produce ``rate * seconds`` messages on a schedule of ``rate`` a second (checked every
    5 ms: the messages due by now are sent), round-robin over the partitions, and put each
    partition's (first offset, Kafka timestamps in offset order) on ``queue``."""
    import struct

    from confluent_kafka import Producer

    from kbqe_dagster.core.record.wire import encode_frame

    total = int(rate * seconds)
    stamps: dict[int, list[tuple[int, int]]] = {p: [] for p in range(partitions)}
    errors: list[str] = []

    def delivered(err, msg) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            stamps[msg.partition()].append((msg.offset(), msg.timestamp()[1]))

    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 5,
        "batch.num.messages": 10_000, "queue.buffering.max.messages": 1_000_000,
    })  # fmt: skip
    # The Kafka timestamp (CreateTime) is set by librdkafka when produce() is called: the
    # produce time of the latency, as the table's _kafka_timestamp has it.
    source, amount = topic.encode(), struct.pack("<d", 12.5)
    sent, behind, started_cpu = 0, 0.0, time.process_time()
    started = time.time()
    while sent < total:
        now = time.time()
        due = min(total, int((now - started) * rate) + 1)
        # How far the schedule is ahead of what was sent (~ one tick when keeping up).
        behind = max(behind, (now - started) - sent / rate)
        while sent < due:
            ms = int(time.time() * 1000)
            value = encode_frame(schema_id, encode_body(sent, ms, source, amount))
            try:
                producer.produce(topic, value, None, sent % partitions, on_delivery=delivered)
            except BufferError:
                producer.poll(0.01)
                continue
            sent += 1
        producer.poll(0)
        if sent < total:  # the next message's time, in ticks of at least 2 ms
            time.sleep(max(0.002, started + sent / rate - time.time()))
    ended = time.time()
    left = producer.flush(120)
    out = {}
    for p, pairs in stamps.items():
        pairs.sort()
        offsets = [o for o, _ in pairs]
        if offsets and offsets != list(range(offsets[0], offsets[0] + len(offsets))):
            errors.append(f"partition {p}: offsets not contiguous")
        out[p] = (offsets[0] if offsets else 0, array("q", (t for _, t in pairs)))
    queue.put(
        {
            "messages": total,
            "started": started,
            "ended": ended,
            "undelivered": left,
            "errors": errors[:5],
            "error_count": len(errors),
            "max_behind_s": round(behind, 3),
            "cpu_seconds": round(time.process_time() - started_cpu, 2),
            "partitions": out,
        }
    )


class SteadyProducer:
    """The producer child process, and its result when it ends (a thread waits for it)."""

    def __init__(
        self, bootstrap: str, topic: str, rate: int, seconds: float, partitions: int, schema_id: int
    ) -> None:
        ctx = multiprocessing.get_context("spawn")  # no inherited Kafka or Spark threads
        self.queue = ctx.Queue()
        self.process = ctx.Process(
            target=_produce_steady,
            name=f"produce-{topic}",
            args=(bootstrap, topic, rate, seconds, partitions, schema_id, self.queue),
        )
        self.result: dict | None = None
        self.failed: str | None = None
        self.done = threading.Event()
        self._waiter = threading.Thread(target=self._wait, name="producer-wait", daemon=True)

    def start(self) -> None:
        self.process.start()
        self._waiter.start()

    def _wait(self) -> None:
        try:
            while self.result is None:
                try:
                    self.result = self.queue.get(timeout=1.0)
                except Empty:
                    if self.process.exitcode not in (None, 0):
                        self.failed = f"producer exited with {self.process.exitcode}"
                        return
            self.process.join()
            if self.result["undelivered"] or self.result["error_count"]:
                self.failed = (
                    f"produce failed: {self.result['undelivered']} undelivered, "
                    f"errors {self.result['errors']}"
                )
        finally:
            self.done.set()

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(10)

    def produced(self) -> dict[int, Produced]:
        assert self.result is not None
        return {
            p: Produced(first, [t / 1000 for t in stamps])
            for p, (first, stamps) in self.result["partitions"].items()
        }
