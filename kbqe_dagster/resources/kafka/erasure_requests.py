"""The erasure requests topic: its messages past a recorded position (the erasure batch's
state, not a consumer group: no commit to Kafka, like every reader of this project)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.kafka.cluster import watermarks_of
from kbqe_dagster.resources.kafka.range_reader import read_range


def new_request_messages(
    settings: KafkaSettings, topic: str, next_offsets: Mapping[int, int]
) -> tuple[list[tuple[bytes | None, bytes | None, int, int]], dict[int, int]]:
    """``(key, value, partition, offset)`` of every message of ``topic`` from
    ``next_offsets`` (a partition not in it: from its low watermark) to its high watermark
    now, and the positions after them. A topic Kafka does not hold has no message."""
    messages: list[tuple[Any, Any, int, int]] = []
    positions = dict(next_offsets)
    for (_, partition), marks in sorted(watermarks_of(settings, [topic]).items()):
        start = max(positions.get(partition, marks.low), marks.low)
        if start >= marks.high:
            positions[partition] = max(start, positions.get(partition, 0))
            continue
        covered: list[int] = []
        for msg in read_range(settings, topic, partition, start, marks.high, position_out=covered):
            messages.append((msg.key(), msg.value(), partition, int(msg.offset() or 0)))
        positions[partition] = covered[0] if covered else start
    return messages, positions


def request_topic_backlog(
    settings: KafkaSettings, topic: str, next_offsets: Mapping[int, int]
) -> int:
    """Messages of ``topic`` past ``next_offsets``: what a sensor tick looks at (one
    watermarks request, no message read)."""
    total = 0
    for (_, partition), marks in watermarks_of(settings, [topic]).items():
        total += max(0, marks.high - max(next_offsets.get(partition, marks.low), marks.low))
    return total
