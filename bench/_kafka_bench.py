"""Kafka side of bench/bench_stage.py: the topic, the schema, producing the backlog, and the
baseline readers — each run in its own process so the driver's memory figures only show the
stage job, and so two readers really use two cores.

Baseline readers, over the partitions given to one process:

* ``raw``: a plain confluent-kafka consumer, ``assign`` at offset 0, ``consume(10_000)`` to the
  high watermarks, touching each message's value and key (what any Python consumer does);
* ``raw_tuned``: the same with ``fetch.queue.backoff.ms=0``. librdkafka (>= 2.4) waits that
  long (default 1 s) before refetching a partition whose local queue passed
  ``queued.min.messages``; a reader faster than the broker round trip drains the queue and
  stalls ~0.85 s per partition. The stage job, 10× slower than its reader, never drains it;
* ``raw_stage_tuned``: the same with the stage consumer's own tuning
  (``resources.kafka.CONSUMER_TUNING``: a 20 ms backoff, which keeps librdkafka's broker
  thread from spinning at 0, and 4 MiB fetches), so the reference of the ratio is the
  fastest plain consumer whatever tuning the stage job found;
* ``read_range``: the stage job's own reader (``resources.kafka.read_range``, one consumer
  per partition, one after another), to separate the reader's cost from the stage's.

Both use the stage consumer's settings (read_committed, partition EOF events) so the only
difference to the stage job is the work done per message.
"""

from __future__ import annotations

import json
import multiprocessing
import time
from collections.abc import Sequence
from queue import Empty

from _stage_support import self_peak_rss_mb

VALUE_KEY_BYTES = 16  # keys like b"user-00000012345"


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(30)


def delete_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.delete_topics([topic])[topic].result(60)


def register_schema(
    registry_url: str, subject: str, schema: dict | str, schema_type: str = "AVRO"
) -> int:
    """Register ``schema`` (a dict as JSON; a string, e.g. ``.proto`` text, as it is)."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    text = schema if isinstance(schema, str) else json.dumps(schema)
    return SchemaRegistryClient({"url": registry_url}).register_schema(
        subject, Schema(text, schema_type)
    )


def high_watermarks(bootstrap: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "kbqe-bench"})
    try:
        return {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
                for p in range(partitions)}  # fmt: skip
    finally:
        consumer.close()


def _produce(
    bootstrap: str,
    topic: str,
    count: int,
    partitions: int,
    schema_id: int,
    unique: int,
    seed: int,
    compression: str,
    debezium: bool | str,
    json_values: bool,
    json_schema_values: bool,
    protobuf_values: bool,
    queue: multiprocessing.Queue,
) -> None:
    from _debezium_bench import build_envelopes
    from bench_hot_path import build_bodies
    from confluent_kafka import Producer

    from kbqe_dagster.core.record.wire import encode_frame

    if json_values:  # schemaless: no Confluent frame
        from _json_bench import build_json_values

        values = build_json_values(unique, unique, seed)
    elif json_schema_values:  # JSON text framed with the registry JSON Schema's id
        from _json_bench import build_json_schema_values

        values = [
            encode_frame(schema_id, text) for text in build_json_schema_values(unique, unique, seed)
        ]
    elif protobuf_values:  # message indexes + Protobuf binary framed with the .proto's id
        from _protobuf_bench import build_protobuf_values

        values = [
            encode_frame(schema_id, body) for body in build_protobuf_values(unique, unique, seed)
        ]
    else:
        # `debezium`: True (the bench's order row) or the envelope variant's name.
        variant = debezium if isinstance(debezium, str) else "orders"
        bodies = (
            build_envelopes(unique, unique, seed, variant)
            if debezium
            else build_bodies(unique, unique, seed)
        )
        values = [encode_frame(schema_id, body) for body in bodies]
    keys = [b"user-%011d" % i for i in range(unique)]
    errors: list[str] = []
    producer = Producer({
        "bootstrap.servers": bootstrap, "enable.idempotence": True, "linger.ms": 50,
        "batch.size": 1_000_000, "batch.num.messages": 10_000, "compression.type": compression,
        "queue.buffering.max.messages": 500_000, "delivery.report.only.error": True,
    })  # fmt: skip
    on_error = lambda err, msg: errors.append(str(err))  # noqa: E731 - only errors are reported
    produce, poll = producer.produce, producer.poll
    value_bytes = key_bytes = 0
    started, cpu = time.perf_counter(), time.process_time()
    for i in range(count):
        j = i % unique
        value, key = values[j], keys[j]
        while True:
            try:
                produce(topic, value, key, i % partitions, on_delivery=on_error)
                break
            except BufferError:
                poll(0.05)
        value_bytes += len(value)
        key_bytes += len(key)
        if not i % 10_000:
            poll(0)
            if not i % 1_000_000 and i:
                print(f"    produced {i:,} of {count:,}", flush=True)
    left = producer.flush(300)
    seconds = time.perf_counter() - started
    queue.put({"messages": count, "value_bytes": value_bytes, "key_bytes": key_bytes,
               "seconds": round(seconds, 3), "cpu_seconds": round(time.process_time() - cpu, 2),
               "undelivered": left, "errors": errors[:5], "error_count": len(errors),
               "peak_rss_mb": self_peak_rss_mb()})  # fmt: skip


def produce(
    bootstrap: str,
    topic: str,
    count: int,
    partitions: int,
    schema_id: int,
    *,
    unique: int = 50_000,
    seed: int = 1,
    compression: str = "none",
    debezium: bool | str = False,
    json_values: bool = False,
    json_schema_values: bool = False,
    protobuf_values: bool = False,
) -> dict:
    """Produce ``count`` Confluent-framed messages round-robin (idempotent producer) in a
    child process; cycles over ``unique`` distinct bodies (encoding millions with fastavro
    would take longer than the benchmark)."""
    [result] = _in_processes(
        _produce,
        [
            (
                bootstrap,
                topic,
                count,
                partitions,
                schema_id,
                unique,
                seed,
                compression,
                debezium,
                json_values,
                json_schema_values,
                protobuf_values,
            )
        ],
    )
    result["messages_per_s"] = round(count / result["seconds"])
    result["mb_per_s"] = round(
        (result["value_bytes"] + result["key_bytes"]) / result["seconds"] / 1e6, 1
    )
    if result["undelivered"] or result["error_count"]:
        raise RuntimeError(f"produce to {topic} failed: {result}")
    return result


def _read(
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    kind: str,
    start_at: float,
    queue: multiprocessing.Queue,
) -> None:
    from confluent_kafka import Consumer, KafkaError, TopicPartition

    from kbqe_dagster.resources.kafka.clients import KafkaSettings
    from kbqe_dagster.resources.kafka.range_reader import read_range

    while time.time() < start_at:  # every process starts together (imports are not timed)
        time.sleep(0.005)
    started, cpu = time.time(), time.process_time()
    messages = nbytes = 0
    if kind == "read_range":
        settings = KafkaSettings(bootstrap)
        for partition, end in ends.items():
            for msg in read_range(settings, topic, partition, 0, end):
                messages += 1
                nbytes += len(msg.value()) + len(msg.key() or b"")
    else:
        from kbqe_dagster.resources.kafka.clients import CONSUMER_TUNING

        tuning = (
            {"fetch.queue.backoff.ms": 0}
            if kind == "raw_tuned"
            else dict(CONSUMER_TUNING)
            if kind == "raw_stage_tuned"
            else {}
        )
        consumer = Consumer({
            "bootstrap.servers": bootstrap, "group.id": "kbqe-bench", "enable.auto.commit": False,
            "isolation.level": "read_committed", "enable.partition.eof": True,
            "auto.offset.reset": "error", **tuning,
        })  # fmt: skip
        consumer.assign([TopicPartition(topic, p, 0) for p in ends])
        position = dict.fromkeys(ends, 0)
        while any(position[p] < end for p, end in ends.items()):
            # Never ask for more than is left: consume() would wait out its whole timeout.
            left = sum(end - position[p] for p, end in ends.items())
            for msg in consumer.consume(num_messages=min(10_000, left), timeout=5.0):
                err = msg.error()
                if err is not None:
                    if err.code() != KafkaError._PARTITION_EOF:
                        raise RuntimeError(err.str())
                    continue
                messages += 1
                nbytes += len(msg.value()) + len(msg.key() or b"")
                position[msg.partition()] = msg.offset() + 1
        consumer.close()
    queue.put(
        {
            "messages": messages,
            "bytes": nbytes,
            "started": started,
            "ended": time.time(),
            "cpu_seconds": round(time.process_time() - cpu, 2),
            "peak_rss_mb": self_peak_rss_mb(),
        }
    )


def consume(
    bootstrap: str, topic: str, ends: dict[int, int], processes: int, kind: str = "raw"
) -> dict:
    """Read every partition to ``ends`` with ``processes`` processes (partitions dealt
    round-robin); the rate is over the wall time from the common start to the last end."""
    parts = [dict(list(ends.items())[i::processes]) for i in range(processes)]
    start_at = time.time() + 3.0  # after every child has imported confluent_kafka
    results = _in_processes(_read, [(bootstrap, topic, p, kind, start_at) for p in parts])
    seconds = max(r["ended"] for r in results) - min(r["started"] for r in results)
    messages = sum(r["messages"] for r in results)
    nbytes = sum(r["bytes"] for r in results)
    return {"reader": kind, "processes": processes, "messages": messages, "bytes": nbytes,
            "seconds": round(seconds, 3), "messages_per_s": round(messages / seconds),
            "mb_per_s": round(nbytes / seconds / 1e6, 1),
            "cpu_seconds": round(sum(r["cpu_seconds"] for r in results), 2),
            "peak_rss_mb_per_process": [r["peak_rss_mb"] for r in results]}  # fmt: skip


def _in_processes(target, arg_lists: Sequence[tuple]) -> list[dict]:
    ctx = multiprocessing.get_context("spawn")  # no inherited Kafka client threads
    queue = ctx.Queue()
    procs = [ctx.Process(target=target, args=(*args, queue)) for args in arg_lists]
    for p in procs:
        p.start()
    results: list[dict] = []
    while len(results) < len(procs):
        try:
            results.append(queue.get(timeout=1.0))
        except Empty:
            dead = [p.exitcode for p in procs if p.exitcode not in (None, 0)]
            if dead:
                raise RuntimeError(f"{target.__name__} process exited with {dead[0]}") from None
    for p in procs:
        p.join()
        if p.exitcode:
            raise RuntimeError(f"{target.__name__} process exited with {p.exitcode}")
    return results
