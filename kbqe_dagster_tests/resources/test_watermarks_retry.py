"""A partition whose leadership is moving (a broker restart, a rolling upgrade) answers "not
leader" for a few seconds: watermarks are asked again until the call's timeout instead of
failing the stage run or sensor tick that asked."""

from __future__ import annotations

import pytest
from confluent_kafka import KafkaError, KafkaException

from kbqe_dagster.resources.kafka import cluster as kafka
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.kafka.cluster import watermarks


class MovingLeader:
    """A consumer whose partition answers ``errors`` first, then its watermarks."""

    def __init__(self, errors: list[int]) -> None:
        self.errors = list(errors)
        self.asked = 0

    def get_watermark_offsets(self, tp, timeout):
        self.asked += 1
        if self.errors:
            raise KafkaException(KafkaError(self.errors.pop(0)))
        return 3, 42

    def close(self) -> None:
        pass


@pytest.fixture
def one_partition(monkeypatch):
    monkeypatch.setattr(kafka, "topic_partitions", lambda settings, topic, timeout: [0])
    monkeypatch.setattr(kafka.time, "sleep", lambda s: None)


def test_not_leader_answers_are_asked_again_until_the_leader_answers(monkeypatch, one_partition):
    consumer = MovingLeader([KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError.LEADER_NOT_AVAILABLE])
    monkeypatch.setattr(kafka, "connected_consumer", lambda settings: consumer)
    [marks] = watermarks(KafkaSettings("127.0.0.1:9"), "orders")
    assert (marks.low, marks.high, consumer.asked) == (3, 42, 3)


def test_other_errors_fail_at_once(monkeypatch, one_partition):
    consumer = MovingLeader([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    monkeypatch.setattr(kafka, "connected_consumer", lambda settings: consumer)
    with pytest.raises(KafkaException):
        watermarks(KafkaSettings("127.0.0.1:9"), "orders")
    assert consumer.asked == 1


def test_a_leader_that_never_comes_back_fails_by_the_timeout(monkeypatch, one_partition):
    consumer = MovingLeader([KafkaError.NOT_LEADER_FOR_PARTITION] * 1000)
    monkeypatch.setattr(kafka, "connected_consumer", lambda settings: consumer)
    clock = iter(range(0, 10_000))
    monkeypatch.setattr(kafka.time, "monotonic", lambda: next(clock) * 0.25)
    with pytest.raises(KafkaException):
        watermarks(KafkaSettings("127.0.0.1:9"), "orders", timeout=5.0)
    assert 1 < consumer.asked < 20
