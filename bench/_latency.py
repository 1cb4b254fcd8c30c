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


# --- warm-up, recovery and steady state (bench_latency.py --daemon, --kill-at, --reload-at) ---
FRESH_S = 5.0
"""A table is fresh when its messages are visible this soon after they were produced."""


def by_window(matched: Matched, start: float, width: float = 10.0) -> list[dict]:
    """p50/p99 of the messages produced in each ``width``-second window from ``start``
    (``from``/``to``: seconds after ``start``)."""
    buckets: dict[int, list[float]] = {}
    for lat, t in zip(matched.latencies, matched.produced_at):
        buckets.setdefault(max(int((t - start) // width), 0), []).append(lat)
    out = []
    for i in range(max(buckets, default=-1) + 1):
        summary = latency_summary(buckets.get(i, []), (50, 99))
        out.append({"from": i * width, "to": (i + 1) * width, **summary})
    return out


def fresh_again_after(
    matched: Matched, since: float, until: float, fresh_s: float = FRESH_S
) -> float | None:
    """Seconds from ``since`` to the produce time from which every message produced before
    ``until`` was visible within ``fresh_s``: 0.0 when none was late; None when the last one
    produced in the span was late (never fresh again before ``until``) or none was seen."""
    span = [(lat, t) for lat, t in zip(matched.latencies, matched.produced_at)
            if since <= t < until]  # fmt: skip
    late = [t for lat, t in span if lat > fresh_s]
    if not span:
        return None
    if not late:
        return 0.0
    last_late = max(late)
    after = [t for t in matched.produced_at if last_late < t < until]
    return round(min(after) - since, 2) if after else None


def disruption_figures(
    matched: Matched, start: float, end: float, disruptions: Sequence[tuple[str, float]],
    warmup_s: float, recovery_s: float, fresh_s: float = FRESH_S,
) -> dict:  # fmt: skip
    """The warm-up (the messages of the first ``warmup_s`` from ``start``, the first produce),
    each disruption (``(what, at)``: its next ``recovery_s``), and the steady state (every
    message outside those spans), apart: each span's latencies, and how long after its start
    the table was fresh again (``fresh_again_s``: every later message visible within
    ``fresh_s`` up to the next disruption)."""
    marks = sorted(at for _, at in disruptions)

    def next_mark(after: float) -> float:
        return min((m for m in marks if m > after), default=end + 1.0)

    spans = [("warm-up", start, start + warmup_s)] + [
        (what, at, at + recovery_s) for what, at in sorted(disruptions, key=lambda d: d[1])
    ]
    out: dict = {"fresh_s": fresh_s, "spans": []}
    for what, a, b in spans:
        lats = [lat for lat, t in zip(matched.latencies, matched.produced_at) if a <= t < b]
        out["spans"].append({
            "what": what, "at_s": round(a - start, 2), "seconds": round(b - a, 2),
            "latency_s": latency_summary(lats),
            "fresh_again_s": fresh_again_after(matched, a, next_mark(a), fresh_s),
        })  # fmt: skip
    steady = [
        lat for lat, t in zip(matched.latencies, matched.produced_at)
        if not any(a <= t < b for _, a, b in spans)
    ]  # fmt: skip
    out["steady_latency_s"] = latency_summary(steady)
    return out
