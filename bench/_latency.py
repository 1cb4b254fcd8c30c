"""The arithmetic of bench/bench_latency.py, pure (no Kafka, no BigQuery, no clock): what a
poll of the table says is visible, when each message first became visible, its latency, the
percentiles, and whether the path kept up with the producer.

A message is ``(partition, offset)``; its produce time is its Kafka timestamp (CreateTime: set
by the producer when it called ``produce``), in seconds. A poll asks the table, per Kafka
partition, for ``COUNT(*)`` and ``MIN``/``MAX`` of the offset column, and is stamped with the
moment its answer arrived (an upper bound of when those rows became visible: the latencies are
never flattered). From that answer the poll takes the partition's *visible end*: every offset
below it is in the table.

- ``count == max - min + 1`` with ``min`` the partition's first produced offset: the offsets
  are contiguous, the end is ``max + 1``.
- fewer rows than that: a later range is visible before an earlier one (a load job can take
  one range's file and not an older one still being committed). The end stays where the last
  contiguous poll put it, and the poll is counted as a *gap poll*: the messages past the gap
  get the later, contiguous poll's time (conservative, never earlier than the truth).
- more rows than that: the table holds a message twice — exactly-once broken; that is an
  error of the path measured, raised with the partition and the figures (so are offsets
  below the first produced one).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

PERCENTILES = (50, 90, 99)


class UnexpectedRows(Exception):
    """The table holds more rows of a partition than the offsets they can cover (a message
    twice), or offsets that were never produced."""


@dataclass(frozen=True)
class PartitionRows:
    """One partition's rows in one poll's answer."""

    partition: int
    count: int
    min_offset: int
    max_offset: int


@dataclass(frozen=True)
class Poll:
    """One poll: when its answer arrived (seconds, the clock of the produce times) and the
    visible end of every partition with rows."""

    at: float
    ends: Mapping[int, int]
    gaps: frozenset[int] = frozenset()
    """Partitions whose rows were not contiguous in this poll (their end was kept)."""


def visible_ends(
    rows: Iterable[PartitionRows], first: Mapping[int, int], previous: Mapping[int, int]
) -> tuple[dict[int, int], frozenset[int]]:
    """The visible end of every partition after a poll whose answer is ``rows``; ``first``:
    each partition's first produced offset; ``previous``: the ends after the poll before.
    Also the partitions whose rows had a gap. Raises :class:`UnexpectedRows`."""
    ends = dict(previous)
    gaps = set()
    for r in rows:
        start = first.get(r.partition, r.min_offset)
        span = r.max_offset - start + 1
        if r.min_offset < start:
            raise UnexpectedRows(
                f"partition {r.partition}: offset {r.min_offset} in the table, "
                f"the first produced is {start}"
            )
        if r.count > span:
            raise UnexpectedRows(
                f"partition {r.partition}: {r.count} row(s) for offsets "
                f"{start}..{r.max_offset}: a message is in the table twice"
            )
        if r.count == span:
            ends[r.partition] = max(ends.get(r.partition, start), r.max_offset + 1)
        else:
            gaps.add(r.partition)
    return ends, frozenset(gaps)


@dataclass(frozen=True)
class Produced:
    """One partition's produced messages: the first offset and each message's produce time
    (seconds), in offset order."""

    first: int
    times: Sequence[float]

    @property
    def end(self) -> int:
        return self.first + len(self.times)


@dataclass
class Matched:
    """Every message's latency (seconds, in no particular order) and what was never seen."""

    latencies: list[float] = field(default_factory=list)
    produced_at: list[float] = field(default_factory=list)
    """Each latency's message's produce time, in the same order."""
    unseen: dict[int, int] = field(default_factory=dict)
    """Per partition, messages no poll showed (the run ended first)."""
    gap_polls: int = 0


def match(produced: Mapping[int, Produced], polls: Sequence[Poll]) -> Matched:
    """Each message's first poll showing it, and its latency ``poll.at - produce time``.

    Polls are taken in time order. A message visible before it was produced (a clock that
    went backwards) would get a negative latency; it is kept as is, so the percentiles show it.
    """
    out = Matched()
    reached = {p: m.first for p, m in produced.items()}
    for poll in sorted(polls, key=lambda q: q.at):
        out.gap_polls += bool(poll.gaps & produced.keys())
        for p, end in poll.ends.items():
            if p not in produced:
                continue
            m = produced[p]
            end = min(end, m.end)
            if end > reached[p]:
                times = m.times[reached[p] - m.first : end - m.first]
                out.latencies.extend(poll.at - t for t in times)
                out.produced_at.extend(times)
                reached[p] = end
    out.unseen = {p: m.end - reached[p] for p, m in produced.items() if m.end > reached[p]}
    return out


def produced_after(matched: Matched, since: float) -> list[float]:
    """The latencies of the messages produced at or after ``since`` (past a warm-up: a new
    table's first rows also wait for its creation and its first stream)."""
    return [lat for lat, t in zip(matched.latencies, matched.produced_at) if t >= since]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of values sorted ascending: the smallest value with at least
    ``q`` % of the values at or below it (p100 is the max). No interpolation: every figure
    reported is one message's real latency."""
    if not sorted_values:
        raise ValueError("no values")
    if not 0 < q <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {q}")
    rank = math.ceil(q / 100 * len(sorted_values))
    return sorted_values[rank - 1]


def latency_summary(latencies: Iterable[float], qs: Sequence[float] = PERCENTILES) -> dict:
    """``p50``, ``p90``, ``p99``, ``max``, ``mean`` (seconds, 3 decimals) and ``messages``."""
    values = sorted(latencies)
    if not values:
        return {"messages": 0}
    out = {f"p{q:g}": round(percentile(values, q), 3) for q in qs}
    out["max"] = round(values[-1], 3)
    out["mean"] = round(sum(values) / len(values), 3)
    out["messages"] = len(values)
    return out


def backlog_series(
    produced: Mapping[int, Produced], polls: Sequence[Poll]
) -> list[tuple[float, int, int]]:
    """At each poll: (time, messages produced by then, messages visible then). Produce times
    of a partition are not assumed sorted (a retried batch can carry an older timestamp)."""
    sorted_times = {p: sorted(m.times) for p, m in produced.items()}
    out = []
    for poll in sorted(polls, key=lambda q: q.at):
        made = sum(bisect.bisect_right(t, poll.at) for t in sorted_times.values())
        seen = sum(min(poll.ends.get(p, m.first), m.end) - m.first for p, m in produced.items())
        out.append((poll.at, made, seen))
    return out


def growth_per_s(points: Sequence[tuple[float, float]]) -> float | None:
    """Least-squares slope of ``(time, value)`` points (value per second); None for fewer than
    two distinct times."""
    if len({t for t, _ in points}) < 2:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    num = sum((t - mt) * (v - mv) for t, v in points)
    den = sum((t - mt) ** 2 for t, _ in points)
    return num / den


def keeping_up(
    series: Sequence[tuple[float, int, int]],
    produce_from: float,
    produce_until: float,
    rate: float,
    tolerance: float = 0.05,
) -> dict:
    """Whether the path kept up with the producer: the backlog (produced − visible) over the
    second half of the produce window must not grow by more than ``tolerance`` × ``rate``
    per second. A path that cannot sustain the rate shows a backlog growing at (rate − its
    throughput), and latencies that grow with the run's length."""
    half = produce_from + (produce_until - produce_from) / 2
    window = [(t, made - seen) for t, made, seen in series if half <= t <= produce_until]
    growth = growth_per_s(window)
    at_end = next((made - seen for t, made, seen in reversed(series) if t <= produce_until), None)
    return {
        "backlog_growth_msg_per_s": None if growth is None else round(growth, 1),
        "backlog_at_produce_end": at_end,
        "backlog_max": max((made - seen for _, made, seen in series), default=None),
        "kept_up": None if growth is None else growth <= tolerance * rate,
    }
