"""The batched Kafka reads of a sensor tick, against the local broker: the watermarks of every
partition of many topics in one call (``watermarks_of``), and the timestamp of the next message
of many partitions from one consumer (``first_timestamps_ms``): the right message per
partition, None where nothing waits, the log start where the position was deleted."""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from kbqe_dagster.resources.kafka.clients import (
    CLIENT_LOG,
    KafkaSettings,
)
from kbqe_dagster.resources.kafka.cluster import (
    first_timestamps_ms,
    watermarks_of,
)

pytestmark = pytest.mark.integration

T0 = 1_726_000_000_000


@pytest.fixture
def fleet(local_stack, local_endpoints):
    prefix = f"fleetreads.{uuid.uuid4().hex[:8]}"
    topics = [f"{prefix}.t{i}" for i in range(4)]
    admin = AdminClient(
        {"bootstrap.servers": local_endpoints.kafka_bootstrap, "logger": CLIENT_LOG}
    )
    for future in admin.create_topics(
        [NewTopic(t, num_partitions=3, replication_factor=1) for t in topics]
    ).values():
        future.result(30)
    producer = Producer(
        {"bootstrap.servers": local_endpoints.kafka_bootstrap, "logger": CLIENT_LOG}
    )
    # t0: partition p holds 2 + p messages stamped T0 + 10 * offset + p; the others stay empty.
    for p in range(3):
        for offset in range(2 + p):
            producer.produce(topics[0], b"x", partition=p, timestamp=T0 + 10 * offset + p)
    assert producer.flush(30) == 0
    yield KafkaSettings(local_endpoints.kafka_bootstrap), topics
    for future in admin.delete_topics(topics).values():
        future.result(30)


def test_watermarks_of_every_partition_of_many_topics_in_one_call(fleet) -> None:
    settings, topics = fleet
    marks = watermarks_of(settings, topics + ["fleetreads.never.created"])
    assert {tp for tp in marks} == {(t, p) for t in topics for p in range(3)}
    assert [marks[(topics[0], p)].high for p in range(3)] == [2, 3, 4]
    assert all(marks[(t, p)].high == 0 for t in topics[1:] for p in range(3))


def test_the_next_message_time_of_many_partitions_from_one_consumer(fleet) -> None:
    settings, topics = fleet
    positions = {
        (topics[0], 0): 1,
        (topics[0], 1): 0,
        (topics[0], 2): 3,
        (topics[1], 0): 0,
        (topics[2], 2): 0,
    }
    stamps = first_timestamps_ms(settings, positions, timeout=10)
    assert stamps == {
        (topics[0], 0): T0 + 10,
        (topics[0], 1): T0 + 1,
        (topics[0], 2): T0 + 32,
        (topics[1], 0): None,
        (topics[2], 2): None,
    }


def test_a_position_below_the_log_start_reads_the_oldest_message_still_there(
    fleet, local_endpoints
) -> None:
    settings, topics = fleet
    admin = AdminClient(
        {"bootstrap.servers": local_endpoints.kafka_bootstrap, "logger": CLIENT_LOG}
    )
    for future in admin.delete_records([TopicPartition(topics[0], 2, 2)]).values():
        future.result(30)  # offsets 0 and 1 of t0[2] are gone
    assert first_timestamps_ms(settings, {(topics[0], 2): 0}, timeout=10) == {
        (topics[0], 2): T0 + 22
    }
