"""Reading a staging area back, for assertions: which (partition, offset) is in which file."""

from __future__ import annotations

import io
from collections import Counter, defaultdict
from dataclasses import dataclass, field

from fastavro import reader

from kbqe_dagster.core.protocol.commit import is_marker
from kbqe_dagster.core.protocol.naming import parse_listing


@dataclass
class StagedContent:
    good: Counter = field(default_factory=Counter)  # (partition, offset) → occurrences
    table_of: dict = field(default_factory=dict)  # (partition, offset) → (dataset, table)
    event_date_of: dict = field(default_factory=dict)
    dead: Counter = field(default_factory=Counter)
    reason_of: dict = field(default_factory=dict)
    done_ranges: dict = field(
        default_factory=lambda: defaultdict(set)
    )  # partition → {(first, last)}
    avro_without_done: list = field(default_factory=list)


def read_staging(
    store, topic: str, dead_letter=("kbqe_dead_letters", "dead_letters")
) -> StagedContent:
    listing = parse_listing(f.name for f in store.list())
    out = StagedContent()
    done_keys = {d.key for d in listing.done}
    for done in listing.done:
        if done.key.topic == topic:
            out.done_ranges[done.key.partition].add((done.first_offset, done.last_offset))
    for avro in listing.avro:
        if avro.key.topic != topic:
            continue
        if avro.key not in done_keys:
            out.avro_without_done.append(avro.name)
            continue
        for record in reader(io.BytesIO(store.read_bytes(avro.name))):
            if avro.key.table_id == dead_letter:
                where = (record["partition"], record["offset"])
                out.dead[where] += 1
                out.reason_of[where] = record["reason"]
            else:
                where = (record["_kafka_partition"], record["_kafka_offset"])
                out.good[where] += 1
                out.table_of[where] = avro.key.table_id
                out.event_date_of[where] = record["_event_date"].isoformat()
    return out


def tiles(ranges: set[tuple[int, int]], end_exclusive: int) -> bool:
    """True when the (first, last) ranges, markers included, cover 0..end-1 without overlap."""
    expected = 0
    for first, last in sorted(ranges):
        if first != expected:
            return False
        expected = last + 1
    return expected == end_exclusive


__all__ = ["StagedContent", "read_staging", "tiles", "is_marker"]
