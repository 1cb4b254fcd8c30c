"""``kbqe bootstrap``: make partitions of a topic start at given offsets — the original
project's "bootstrap operation" without hand-made files.

For each partition a bootstrap marker (``core/commit.plan_bootstrap``: a done file
``$topic.$p._kbqe.bootstrap.0.$N-1.$N-1.done`` with a manifest) is created create-only.
Recovery then resumes the partition at N, and committed ranges that end before the marker are
superseded (loaded as usual, never re-staged, deleted by retention once loaded).

A marker can only move a partition *forward*: below the current next offset it would change
nothing (the committed chain past it still decides), so that is refused, before anything is
written, rather than reported as done. Skipping forward over offsets a partition has not
staged yet is the point of the command; the report says how many offsets are skipped.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kbqe_dagster.core.errors import OperatorCommandError
from kbqe_dagster.core.protocol.commit import plan_bootstrap
from kbqe_dagster.core.protocol.naming import TOPIC_RE
from kbqe_dagster.core.protocol.offsets import recover
from kbqe_dagster.operations.snapshot import topic_snapshot
from kbqe_dagster.resources.staging_store import StagingStore

_PAIR_RE = re.compile(r"^\s*([0-9]+)\s*=\s*([0-9]+)\s*$")


def parse_partition_offsets(text: str) -> dict[int, int]:
    """``"0=2787665,1=2828379"`` → ``{0: 2787665, 1: 2828379}``."""
    offsets: dict[int, int] = {}
    for item in text.split(","):
        match = _PAIR_RE.fullmatch(item)
        if match is None:
            raise OperatorCommandError(
                f"--offsets: {item.strip()!r} is not PARTITION=OFFSET "
                "(expected e.g. --offsets 0=2787665,1=2828379)"
            )
        partition, offset = int(match.group(1)), int(match.group(2))
        if partition in offsets:
            raise OperatorCommandError(f"--offsets: partition {partition} is given twice")
        offsets[partition] = offset
    return offsets


@dataclass(frozen=True)
class PartitionBootstrap:
    partition: int
    next_offset: int
    previous_next_offset: int | None
    """Where the partition would have resumed; ``None`` when it had no done file (it would
    have started at the Kafka low watermark, or the high one with ``start_offset: latest``)."""
    marker: str
    written: bool
    """False when the partition already resumes at ``next_offset`` (the command is
    idempotent: running it twice writes once)."""

    @property
    def skipped_offsets(self) -> int | None:
        if self.previous_next_offset is None:
            return None
        return self.next_offset - self.previous_next_offset


@dataclass(frozen=True)
class BootstrapReport:
    staging: str
    topic: str
    partitions: tuple[PartitionBootstrap, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "staging": self.staging,
            "topic": self.topic,
            "partitions": [
                {
                    "partition": p.partition,
                    "next_offset": p.next_offset,
                    "previous_next_offset": p.previous_next_offset,
                    "skipped_offsets": p.skipped_offsets,
                    "marker": p.marker,
                    "written": p.written,
                }
                for p in self.partitions
            ],
        }


def bootstrap(
    store: StagingStore, topic: str, offsets: Mapping[int, int], now: datetime
) -> BootstrapReport:
    """Write bootstrap markers so each ``topic[partition]`` resumes at ``offsets[partition]``.

    Every partition is checked before any marker is written: one refused partition writes
    nothing.
    """
    if not TOPIC_RE.fullmatch(topic):
        raise OperatorCommandError(f"--topic: {topic!r} is not a legal Kafka topic name")
    if not offsets:
        raise OperatorCommandError("--offsets: give at least one PARTITION=OFFSET")
    snapshot = topic_snapshot(store, topic)
    chains = recover(snapshot.listing)
    planned = []
    for partition, offset in sorted(offsets.items()):
        if offset < 1:
            raise OperatorCommandError(
                f"{topic}[{partition}]: offset {offset} cannot be bootstrapped; a partition "
                "without done files already starts at its low watermark"
            )
        chain = chains.get((topic, partition))
        previous = chain.resume_offset if chain is not None else None
        if previous is not None and offset < previous:
            raise OperatorCommandError(
                f"{topic}[{partition}]: offsets up to {previous - 1} are already committed, so "
                f"a bootstrap at {offset} would change nothing (a marker only moves a partition "
                "forward); nothing was written"
            )
        planned.append((partition, offset, previous))

    results = []
    for partition, offset, previous in planned:
        commit = plan_bootstrap(topic, partition, offset, created_at=now)
        marker = commit.done_files[0].name
        # An existing marker for this offset implies previous == offset (a higher anchor
        # would have made previous larger and been refused above).
        write = previous != offset
        if write:
            store.create_only(marker, commit.content)
        results.append(PartitionBootstrap(partition, offset, previous, marker, write))
    return BootstrapReport(store.location.url, topic, tuple(results))
