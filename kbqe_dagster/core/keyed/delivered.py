"""Which rows of a changelog delivered through the Storage Write API the next MERGE takes.

A changelog delivered by load jobs names its new rows by the load jobs: their done files are
the exact offset ranges (keyed/merge_state.py). A changelog delivered by ``storage_write`` has no
load job. Its rows are queryable as soon as they are appended (a COMMITTED stream), and a
range's rows are all appended before its first done file is created (core/protocol/
delivery.py), so **every offset up to the end of a partition's contiguous chain of committed
ranges has its rows in the changelog**. The merge state keeps, per Kafka partition, the last
offset the MERGE has taken (the *delivered watermark*); the rows to merge are those after it,
up to the chain's end at the moment the merge lists the staging area. The chain's end is known
whatever retention deleted: the newest done file of a partition is never deleted.

Offsets are the Kafka offsets of the changelog's ``_kafka_partition``/``_kafka_offset``
columns, so the window is a filter on the clustered columns, exactly as a load job's ranges.
Ranges the load path owns are left out of the window: the changelog's load jobs (merged or not)
and committed ranges whose files still wait for one. They only exist for a table switched
between deliveries, and the load path merges them when their job succeeds: nothing is merged
twice, nothing skipped. Rows of an open intent (appended, range not committed) lie after the
chain's end: the next merge takes them, once the range is committed.

Pure arithmetic on ``{partition: [(first, last), ...]}`` (inclusive), like ``merge_sql.Ranges``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

Spans = Mapping[int, Sequence[tuple[int, int]]]

LAST_OFFSET = 2**63 - 1
"""The greatest Kafka offset (INT64): "everything after the watermark" in a check's filter."""


def coalesce(spans: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted spans, overlapping and adjacent ones joined."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if out and first <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], last))
        else:
            out.append((first, last))
    return out


def union(*many: Spans) -> dict[int, list[tuple[int, int]]]:
    partitions = {p for spans in many for p in spans}
    return {p: coalesce(s for spans in many for s in spans.get(p, ())) for p in sorted(partitions)}


def subtract(
    spans: Iterable[tuple[int, int]], minus: Iterable[tuple[int, int]]
) -> list[tuple[int, int]]:
    """The offsets of ``spans`` that no span of ``minus`` covers."""
    out = []
    holes = coalesce(minus)
    for first, last in coalesce(spans):
        for low, high in holes:
            if high < first or low > last:
                continue
            if low > first:
                out.append((first, low - 1))
            first = high + 1
            if first > last:
                break
        if first <= last:
            out.append((first, last))
    return out


def delivered_window(
    watermarks: Mapping[int, int], committed: Mapping[int, int], owned: Spans
) -> dict[int, list[tuple[int, int]]]:
    """Per partition, the offsets after its watermark (from 0 without one) up to its
    committed chain's last offset, minus the spans the load path owns; partitions with
    nothing new are left out."""
    out = {}
    for partition, last in sorted(committed.items()):
        first = watermarks.get(partition, -1) + 1
        if last < first:
            continue
        spans = subtract([(first, last)], owned.get(partition, ()))
        if spans:
            out[partition] = spans
    return out


def advanced(watermarks: Mapping[int, int], committed: Mapping[int, int]) -> dict[int, int]:
    """The watermarks after a merge of :func:`delivered_window`: each partition's committed
    chain end (a watermark never moves back)."""
    out = dict(watermarks)
    for partition, last in committed.items():
        out[partition] = max(last, out.get(partition, -1))
    return out


def not_merged_yet(
    watermarks: Mapping[int, int], partitions: Iterable[int], owned: Spans
) -> dict[int, list[tuple[int, int]]]:
    """What a check must leave out for the delivered rows: every offset after each
    partition's watermark (all of a partition without one), minus the load path's spans (their
    own bookkeeping says whether they are merged)."""
    out = {}
    for partition in sorted(set(partitions) | set(watermarks)):
        spans = subtract(
            [(watermarks.get(partition, -1) + 1, LAST_OFFSET)], owned.get(partition, ())
        )
        if spans:
            out[partition] = spans
    return out
