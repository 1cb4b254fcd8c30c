"""A partition whose leadership is moving (a broker restart, a rolling upgrade, a topic created
a moment ago) answers "not leader" for a few seconds: watermarks, one topic's or a fleet's, are
asked again until the call's timeout instead of failing the stage run or sensor tick that
asked."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import OffsetSpec

from kbqe_dagster.resources.kafka import cluster as kafka
from kbqe_dagster.resources.kafka.clients import KafkaReadError, KafkaSettings
from kbqe_dagster.resources.kafka.cluster import watermarks, watermarks_of


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


class _Listed:
    def __init__(self, offset: int) -> None:
        self.offset = offset


class _Future:
    def __init__(self, offset: int | None, error: int | None) -> None:
        self.offset, self.error = offset, error

    def result(self):
        if self.error is not None:
            raise KafkaException(KafkaError(self.error))
        return _Listed(self.offset)


class MovingLeaderAdmin:
    """The fleet's admin client (``watermarks_of``): one topic of two partitions, whose
    ListOffsets answers ``errors`` first (one per request), then low 3 and high 42."""

    def __init__(self, errors: list[int]) -> None:
        self.errors = list(errors)
        self.asked = 0

    def list_topics(self, timeout):
        topic = SimpleNamespace(error=None, partitions={0: None, 1: None})
        return SimpleNamespace(topics={"orders": topic})

    def list_offsets(self, wanted, isolation_level, request_timeout):
        self.asked += 1
        error = self.errors.pop(0) if self.errors else None
        earliest = isinstance(next(iter(wanted.values())), type(OffsetSpec.earliest()))
        offset = 3 if earliest else 42
        return {tp: _Future(offset, error if tp.partition == 1 else None) for tp in wanted}


def test_a_fleet_s_offsets_are_asked_again_while_a_leadership_moves(monkeypatch) -> None:
    admin = MovingLeaderAdmin([KafkaError.NOT_LEADER_FOR_PARTITION, KafkaError._TRANSPORT])
    monkeypatch.setattr(kafka, "connected_admin", lambda settings: admin)
    monkeypatch.setattr(kafka.time, "sleep", lambda s: None)
    marks = watermarks_of(KafkaSettings("127.0.0.1:9"), ["orders"])
    assert [(m.partition, m.low, m.high) for m in marks.values()] == [(0, 3, 42), (1, 3, 42)]
    assert admin.asked == 4  # low twice refused, then low, then high


def test_a_fleet_s_other_errors_fail_at_once_naming_the_topics(monkeypatch) -> None:
    admin = MovingLeaderAdmin([KafkaError.TOPIC_AUTHORIZATION_FAILED])
    monkeypatch.setattr(kafka, "connected_admin", lambda settings: admin)
    with pytest.raises(KafkaReadError, match="listing low offsets of orders"):
        watermarks_of(KafkaSettings("127.0.0.1:9"), ["orders"])
    assert admin.asked == 1
