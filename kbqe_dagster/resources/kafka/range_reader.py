"""A consumer that reads exactly one offset range of one partition, in batches or message by
message: the stage task's reader.

No consumer group membership and no offset commits: offsets live in done files (DESIGN.md
§3). The consumer uses ``assign`` with an explicit start offset and ``read_committed`` so
aborted transactional messages are never staged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator, Sequence
from typing import Protocol

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from kbqe_dagster.resources.kafka.clients import KafkaReadError, KafkaSettings, connected_consumer

log = logging.getLogger(__name__)

POLL_SECONDS = 0.25
"""How long one consume() of a range reader waits (see :meth:`RangeReader.batches`)."""


class RangeReader:
    """One offset range ``topic[partition]`` ``[start, end_exclusive)`` read in ``consume()``
    batches, for stage loops that take whole batches (the native stage kernel) as well as
    message by message (:func:`read_range`).

    The loop hands every message it does not stage itself to :meth:`accept`, which applies
    the range's rules (a partition-EOF event ends the read; a Kafka error raises; a message
    past the range ends it) and advances :attr:`position`; messages a loop stages without
    asking (the kernel) are reported with :meth:`staged_through`. Offsets may be missing
    (compaction, transaction markers, aborted records); the read ends when the position
    reaches ``end_exclusive`` or at the end of the readable log (read_committed stops at the
    last stable offset). :attr:`covered` is then the exclusive end the caller commits.
    """

    def __init__(self, settings: KafkaSettings, topic: str, partition: int, start: int,
                 end_exclusive: int, batch_size: int = 10_000, idle_timeout: float = 30.0) -> None:  # fmt: skip
        self.settings = settings
        self.topic = topic
        self.partition = partition
        self.end_exclusive = end_exclusive
        self.batch_size = batch_size
        self.idle_timeout = idle_timeout
        self.position = start
        self.finished = False  # a message at or past the end was seen
        self._eof = False
        self.kafka_ts_max: int | None = None
        """The largest Kafka timestamp (ms) among the last in-range message of each batch:
        how far the range got on Kafka time, for completeness (core/completeness/decision.py). One
        look per batch, whichever stage path takes the batch, so both paths commit the same
        value; exact for LogAppendTime (monotone), a lower bound for CreateTime."""

    @property
    def covered(self) -> int:
        """The exclusive end of what was read: the offset to commit up to."""
        return min(self.position, self.end_exclusive)

    def batches(self) -> Iterator[Sequence[Message]]:
        """The consumed batches, raw (events included), until the range is read."""
        source = self._open()
        try:
            waiting_since = time.monotonic()
            while self.position < self.end_exclusive and not self.finished:
                # consume() returns when it has num_messages or its timeout passes, whatever
                # events it holds: never ask for more than the range still holds, and wait in
                # short polls. A range with gaps (transaction markers, compaction) holds fewer
                # messages than offsets, so its last batch is short of `want` even with the
                # partition-EOF event in it; one long wait would hold every such range for the
                # whole idle timeout.
                want = max(1, min(self.batch_size, self.end_exclusive - self.position))
                msgs = source.consume(want, min(POLL_SECONDS, self.idle_timeout))
                if not len(msgs):
                    if time.monotonic() - waiting_since < self.idle_timeout:
                        continue
                    self.position = source.position(self.position)
                    log.warning(
                        "%s[%d]: no message within %.0fs at offset %d (end %d)",
                        self.topic,
                        self.partition,
                        self.idle_timeout,
                        self.position,
                        self.end_exclusive,
                    )
                    break
                waiting_since = time.monotonic()
                self._eof = False
                self._note_time(msgs)
                yield msgs
                if self._eof and not self.finished and self.position < self.end_exclusive:
                    self.position = source.position(self.position)
                    break
        except KafkaException as e:
            raise KafkaReadError(
                f"reading {self.topic}[{self.partition}] near offset {self.position}: {e}"
            ) from e
        finally:
            source.close()

    def _open(self) -> _BatchSource:
        """The consumer the batches come from, assigned at :attr:`position`."""
        return _ConfluentSource(self.settings, self.topic, self.partition, self.position)

    def accept(self, msg: Message) -> bool:
        """Whether ``msg`` is a message of the range to stage (the position then moves past
        it); False for the partition-EOF event and for a message past the range, which
        ends the read (:attr:`finished`). Raises :class:`KafkaReadError` for a Kafka error."""
        err = msg.error()
        if err is not None:
            if err.code() == KafkaError._PARTITION_EOF:
                self._eof = True
                return False
            raise KafkaReadError(
                f"reading {self.topic}[{self.partition}] near offset {self.position}: {err.str()}"
            )
        offset = msg.offset()
        if offset >= self.end_exclusive:
            self.position = self.end_exclusive
            self.finished = True
            return False
        self.position = offset + 1
        return True

    def _note_time(self, msgs: list[Message]) -> None:
        for msg in reversed(msgs):
            if msg.error() is None and self.position <= msg.offset() < self.end_exclusive:
                ts_type, ts = msg.timestamp()
                known = ts_type != 0 and ts >= 0
                if known and (self.kafka_ts_max is None or ts > self.kafka_ts_max):
                    self.kafka_ts_max = ts
                return

    def staged_through(self, offset: int) -> None:
        """A batch loop staged every message up to ``offset`` itself."""
        self.position = offset + 1


def read_range(
    settings: KafkaSettings,
    topic: str,
    partition: int,
    start: int,
    end_exclusive: int,
    batch_size: int = 10_000,
    idle_timeout: float = 30.0,
    position_out: list[int] | None = None,
) -> Iterator[Message]:
    """Messages of ``topic[partition]`` with offsets in ``[start, end_exclusive)``, one by one
    (:class:`RangeReader`'s rules). The position reached is appended to ``position_out`` so
    the caller commits exactly what was covered."""
    reader = RangeReader(settings, topic, partition, start, end_exclusive, batch_size, idle_timeout)
    batches = reader.batches()
    try:
        for batch in batches:
            for msg in batch:
                if reader.accept(msg):
                    yield msg
                elif reader.finished:
                    break
    finally:
        batches.close()
        if position_out is not None:
            position_out.append(reader.covered)


class _BatchSource(Protocol):
    """What :meth:`RangeReader.batches` reads from: confluent-kafka's consumer here, the
    native stage kernel's consumer in resources/kafka/native_reader.py."""

    def consume(self, count: int, timeout: float) -> Sequence[Message]: ...

    def position(self, fallback: int) -> int: ...

    def close(self) -> None: ...


class _ConfluentSource:
    def __init__(self, settings: KafkaSettings, topic: str, partition: int, start: int) -> None:
        self.topic, self.partition = topic, partition
        self.consumer = connected_consumer(settings)
        self.consumer.assign([TopicPartition(topic, partition, start)])

    def consume(self, count: int, timeout: float) -> list[Message]:
        return self.consumer.consume(num_messages=count, timeout=timeout)

    def position(self, fallback: int) -> int:
        """Where the consumer stands: past transaction markers and compacted gaps."""
        pos = self.consumer.position([TopicPartition(self.topic, self.partition)])[0].offset
        return pos if pos is not None and pos >= 0 else fallback

    def close(self) -> None:
        self.consumer.close()
