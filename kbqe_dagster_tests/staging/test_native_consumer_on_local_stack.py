"""The native stage kernel's own Kafka reader (resources/kafka/native_reader.py) reads exactly what
confluent-kafka's reader reads, on the real local Kafka.

A range is staged three ways — the Python path, the kernel fed by confluent-kafka, the kernel
with its native consumer — and must commit the same records, dead letters and done files, up to
the same offset. The topic has what makes reading hard: committed and aborted transactions (so
the offsets have control-marker and aborted-record gaps, and the log ends on a marker), null
keys and values, headers with null values, and every kind of bad input of the demo samples.
"""

from __future__ import annotations

import dataclasses
import random
import uuid

import pytest

from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.demo.samples import register_schemas, sample_messages
from kbqe_dagster.resources.kafka.native_reader import NativeRangeReader, native_range_reader
from kbqe_dagster.resources.kafka.range_reader import RangeReader
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.staging.native_kernel import kernel_built
from kbqe_dagster.staging.task import stage_range
from kbqe_dagster_tests.staging.conftest import DemoTopic
from kbqe_dagster_tests.staging.kernel_equality import committed_records

pytestmark = pytest.mark.skipif(
    not kernel_built(), reason="the native stage kernel is not built (no cargo)"
)

WAYS = {
    "native_consumer": (True, True),
    "kernel_confluent": (True, False),
    "python": (False, False),
}


@pytest.fixture(scope="module")
def transactional_topic(local_stack, local_endpoints) -> tuple[DemoTopic, int, int]:
    """One partition: committed, aborted, committed transactions; returns the topic, its
    high watermark (which sits past the last commit marker) and how many messages were sent."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    topic = f"com.acme.txn.t{uuid.uuid4().hex[:8]}"
    bootstrap = local_endpoints.kafka_bootstrap
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    samples = sample_messages(600, register_schemas(local_endpoints.registry_url), seed=11)
    random.Random(11).shuffle(samples)  # the bad ones (listed last) spread over every transaction
    producer = Producer(
        {"bootstrap.servers": bootstrap, "transactional.id": f"kbqe-test-{topic}", "linger.ms": 5}
    )
    producer.init_transactions(30)
    for round_, chunk in enumerate((samples[:250], samples[250:400], samples[400:])):
        producer.begin_transaction()
        for i, sample in enumerate(chunk):
            headers = [("trace", b"t%d" % i), ("empty", None)] if i % 3 else None
            producer.produce(
                topic,
                value=sample.value,
                key=sample.key if i % 5 else None,
                partition=0,
                headers=headers,
            )
        if round_ == 1:
            producer.flush(30)  # into the log, then aborted: read_committed must skip them
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
    from kbqe_dagster.resources.kafka.clients import KafkaSettings
    from kbqe_dagster.resources.kafka.cluster import watermarks
    from kbqe_dagster.resources.schema_registry import RegistrySettings

    kafka = KafkaSettings(bootstrap)
    [marks] = watermarks(kafka, topic)
    return (
        DemoTopic(topic, {}, kafka, RegistrySettings(local_endpoints.registry_url)),
        marks.high,
        len(samples),
    )


@pytest.mark.parametrize("end", ["high_watermark", "inside_the_aborted_gap", "mid_log"])
def test_the_native_consumer_commits_what_confluent_kafka_reads(transactional_topic, tmp_path, end):
    demo, high, sent = transactional_topic
    # 250 committed records and their marker take offsets 0..250; the aborted ones 251..400
    # and their marker 401.
    end_exclusive = {"high_watermark": high, "inside_the_aborted_gap": 300, "mid_log": 120}[end]
    results, staged = {}, {}
    for way, (kernel, native_consumer) in WAYS.items():
        area = StagingLocation(str(tmp_path / way))
        ctx = dataclasses.replace(
            demo.context(area, on_bad_input="dead_letter"),
            native_kernel=kernel,
            native_consumer=native_consumer,
        )
        results[way] = stage_range(ctx, OffsetRange(demo.topic, 0, 0, end_exclusive))
        staged[way] = committed_records(area)
        # A range whose log ends on a transaction marker holds fewer messages than offsets:
        # its reader must stop at the partition's end, not wait out its 30 s idle timeout.
        assert results[way].seconds < 20, f"{way} waited {results[way].seconds:.1f}s"
    python = results["python"]
    assert python.records > 100 and python.dead_letters, "the topic exercises good and bad input"
    for way in ("native_consumer", "kernel_confluent"):
        result = results[way]
        assert result.stage_path == "native", way
        assert result.reader == ("native" if way == "native_consumer" else "confluent-kafka"), way
        assert (result.committed_last, result.messages, result.records, result.dead_letters) == (
            python.committed_last,
            python.messages,
            python.records,
            python.dead_letters,
        ), way
        assert staged[way] == staged["python"], way
    if end != "mid_log":
        # read_committed skips the aborted records: nothing of the middle transaction.
        assert python.messages == 250 + (sent - 400 if end == "high_watermark" else 0)


def test_the_native_reader_is_chosen_only_when_it_can_read(transactional_topic):
    demo, high, _ = transactional_topic
    reader = native_range_reader(demo.kafka, demo.topic, 0, 0, high)
    assert isinstance(reader, NativeRangeReader)
    callback = dataclasses.replace(demo.kafka, client_config={"oauth_cb": lambda config: ("t", 0)})
    assert native_range_reader(callback, demo.topic, 0, 0, high) is None
    assert not isinstance(RangeReader(demo.kafka, demo.topic, 0, 0, high), NativeRangeReader)


@pytest.mark.parametrize("native", [True, False], ids=["native", "confluent-kafka"])
def test_a_start_past_the_log_fails_naming_topic_partition_and_offset(transactional_topic, native):
    """``auto.offset.reset: error``: a range that starts where the log has no offset is an
    error of the range (both readers), never a silent restart elsewhere."""
    from kbqe_dagster.resources.kafka.clients import KafkaReadError

    demo, high, _ = transactional_topic
    start = high + 1000
    if native:
        reader = native_range_reader(demo.kafka, demo.topic, 0, start, start + 10)
    else:
        reader = RangeReader(demo.kafka, demo.topic, 0, start, start + 10)
    reader.idle_timeout = 10
    with pytest.raises(KafkaReadError, match=rf"{demo.topic}\[0\] near offset {start}"):
        for batch in reader.batches():
            for msg in batch:
                reader.accept(msg)


def test_a_raw_archive_commits_the_same_files_whichever_reader_and_path(
    transactional_topic, tmp_path
):
    """``format: raw`` through the raw kernel (kernel/src/raw.rs): the native consumer's
    librdkafka messages (null values and keys, headers with null values, the samples' bad
    input, which a raw topic archives like any bytes) commit what the Python path commits."""
    demo, high, _ = transactional_topic
    results, staged = {}, {}
    for way, (kernel, native_consumer) in WAYS.items():
        area = StagingLocation(str(tmp_path / way))
        ctx = dataclasses.replace(
            demo.context(
                area,
                format="raw",
                routing={"mode": "static", "dataset": "acme_sales", "table": "raw_archive"},
                event_time={},
            ),
            native_kernel=kernel,
            native_consumer=native_consumer,
        )
        results[way] = stage_range(ctx, OffsetRange(demo.topic, 0, 0, high))
        staged[way] = committed_records(area)
    python = results["python"]
    assert python.records == python.messages > 250 and not python.dead_letters
    for way in ("native_consumer", "kernel_confluent"):
        result = results[way]
        assert result.stage_path == "native", way
        # The reader's own events (the partition's end) only: every message is the kernel's.
        assert set(result.kernel_handbacks) <= {"kafka_event"}, way
        assert (result.committed_last, result.records) == (python.committed_last, python.records)
        assert staged[way] == staged["python"], way
