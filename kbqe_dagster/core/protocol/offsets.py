"""Offsets of the staging protocol: which Kafka offsets are committed, where a
topic-partition resumes, and which offset ranges the next stage run covers (DESIGN.md §3).

The next offset of a topic-partition is derived from done files only (no Kafka commits).

**Ranges.** A stage run covers explicit :class:`OffsetRange` s, ``start`` inclusive,
``end_exclusive`` exclusive. Every file of one range carries the range bounds in its name:
avro ``...$schemaId.$start.avro``, done ``...$schemaId.$start.$last.done`` with
``last = end_exclusive - 1`` — the *planned* end, not the last message seen. Kafka has offset
gaps (compaction, transaction markers), so the last message of a range is often below its
planned end; using the planned end makes the done files of successive ranges tile the offset
space, which is what lets recovery tell a gap in Kafka from a hole in our commits.

**Committed ranges.** Done files with the same topic, partition, first and last offset form
one :class:`CommittedRange` (one range commits several files: tables × schema ids). Done
files of the original Scala project (one window per file) may overlap; they are merged as
intervals.

**Recovery.** The resume point of a partition is the end of the *contiguous* chain of
committed ranges starting at the lowest committed first offset. A failed middle range (a
hole: later ranges committed, this one not) is redone, never skipped: resuming after the
highest done file would lose the hole's messages for good. Committed ranges after the hole
are kept and never re-staged: a hole range ends where the next committed range begins.

**Bootstrap anchor.** A bootstrap marker (``_kbqe.bootstrap``, first = last = N-1, see
``core/protocol/commit.py``) pins a partition's start at N. When several exist, the chain starts at
the highest one, and committed ranges that end before it are *superseded*: ignored by
recovery (an operator bootstrapping forward past old done files must not have the gap
between them redone). The planner uses the same marker to pin the start when the policy is
``latest`` or when Kafka expired data past the resume point.

**Planning.** Per partition: holes first, then the tail from the end of the last committed
range to the high watermark; offsets below the Kafka low watermark are reported as lost;
at most ``max_messages_per_run`` offsets per partition per run; each span is split into
ranges of at most ``max_messages_per_range`` offsets so Spark can stage a hot partition in
parallel tasks.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.protocol.naming import DoneFileName, ParsedListing, parse_name

TopicPartition = tuple[str, int]
Span = tuple[int, int]  # [start, end_exclusive)

# Marker names are shared with core/protocol/commit.py (which builds the marker files); they live here
# because recovery must recognise a bootstrap anchor and commit.py imports this module.
MARKER_DATASET = "_kbqe"
BOOTSTRAP_MARKER_TABLE = "bootstrap"


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Offsets ``start`` ≤ o < ``end_exclusive`` of one topic-partition: one Spark stage task."""

    topic: str
    partition: int
    start: int
    end_exclusive: int

    def __post_init__(self) -> None:
        if self.start < 0 or self.end_exclusive <= self.start:
            raise ValueError(
                f"invalid offset range {self.topic}[{self.partition}] "
                f"[{self.start}, {self.end_exclusive}): needs 0 <= start < end"
            )

    @property
    def last(self) -> int:
        """The inclusive last offset, as written in the range's done file names."""
        return self.end_exclusive - 1

    @property
    def size(self) -> int:
        return self.end_exclusive - self.start

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)

    def __str__(self) -> str:
        return f"{self.topic}[{self.partition}] {self.start}..{self.last}"


@dataclass(frozen=True)
class CommittedRange:
    """Offsets ``first..last`` (inclusive) of one topic-partition, committed by ``done``."""

    topic: str
    partition: int
    first: int
    last: int
    done: tuple[DoneFileName, ...]

    @property
    def next_offset(self) -> int:
        return self.last + 1

    @property
    def is_bootstrap(self) -> bool:
        return any(_is_bootstrap(d) for d in self.done)


@dataclass(frozen=True)
class PartitionChain:
    """What the done files of one topic-partition say about its offsets.

    ``chain``: the contiguous committed ranges from the anchor (or the lowest first offset);
    ``resume_offset``: the offset after the chain, where staging must continue;
    ``after_hole``: committed ranges past the first hole (kept, never re-staged);
    ``holes``: uncommitted spans ``[start, end)`` between committed ranges;
    ``committed_end``: the offset after the highest committed range (start of the tail);
    ``superseded``: ranges that end before the bootstrap anchor (ignored by recovery);
    ``overlapping``: ranges that share offsets with another range of different bounds —
    kbqe's own ranges tile, so this means a bootstrap inside committed offsets, two
    writers, or legacy Scala-era files; reported for an operator.
    """

    topic: str
    partition: int
    chain: tuple[CommittedRange, ...]
    after_hole: tuple[CommittedRange, ...]
    holes: tuple[Span, ...]
    superseded: tuple[CommittedRange, ...]
    overlapping: tuple[CommittedRange, ...]

    @property
    def anchor(self) -> CommittedRange | None:
        bootstraps = [r for r in self.chain if r.is_bootstrap]
        return max(bootstraps, key=lambda r: r.first) if bootstraps else None

    @property
    def chain_start(self) -> int:
        return self.chain[0].first

    @property
    def chain_last(self) -> int:
        return max(r.last for r in self.chain)

    @property
    def resume_offset(self) -> int:
        return self.chain_last + 1

    @property
    def committed_end(self) -> int:
        return max(r.last for r in self.chain + self.after_hole) + 1


def _is_bootstrap(done: DoneFileName) -> bool:
    return done.key.dataset == MARKER_DATASET and done.key.table == BOOTSTRAP_MARKER_TABLE


Names = Iterable[str | DoneFileName] | ParsedListing


def done_files(names: Names) -> list[DoneFileName]:
    """The done files among ``names``; avro files and names that are not ours are ignored.
    A :class:`ParsedListing` is used as is (parse a large listing once, pass it around)."""
    if isinstance(names, ParsedListing):
        return list(names.done)
    result: list[DoneFileName] = []
    for name in names:
        parsed = name if isinstance(name, DoneFileName) else parse_name(name)
        if isinstance(parsed, DoneFileName):
            result.append(parsed)
    return result


def committed_ranges(names: Names) -> dict[TopicPartition, tuple[CommittedRange, ...]]:
    """Done files grouped into committed ranges per topic-partition, sorted by offsets."""
    grouped: dict[TopicPartition, dict[tuple[int, int], list[DoneFileName]]] = {}
    for done in done_files(names):
        by_bounds = grouped.setdefault(done.key.topic_partition, {})
        by_bounds.setdefault((done.first_offset, done.last_offset), []).append(done)
    return {
        tp: tuple(
            CommittedRange(tp[0], tp[1], first, last, tuple(sorted(files)))
            for (first, last), files in sorted(by_bounds.items())
        )
        for tp, by_bounds in sorted(grouped.items())
    }


def chain_of(ranges: tuple[CommittedRange, ...]) -> PartitionChain:
    """The recovery view of one partition's committed ranges (non-empty, one partition)."""
    if not ranges:
        raise ValueError("chain_of needs at least one committed range")
    bootstraps = [r for r in ranges if r.is_bootstrap]
    if bootstraps:
        anchor_first = max(r.first for r in bootstraps)
        superseded = tuple(r for r in ranges if r.last < anchor_first)
        considered = [r for r in ranges if r.last >= anchor_first]
    else:
        superseded, considered = (), list(ranges)
    considered.sort(key=lambda r: (r.first, r.last))

    chain: list[CommittedRange] = [considered[0]]
    after: list[CommittedRange] = []
    holes: list[tuple[int, int]] = []
    overlapping: list[CommittedRange] = []
    end = considered[0].last
    for rng in considered[1:]:
        if rng.first <= end:  # bounds differ (grouped by bounds) yet offsets are shared
            overlapping.append(rng)
        if rng.first > end + 1:
            holes.append((end + 1, rng.first))
        (chain if not holes else after).append(rng)
        end = max(end, rng.last)
    first = ranges[0]
    return PartitionChain(
        topic=first.topic,
        partition=first.partition,
        chain=tuple(chain),
        after_hole=tuple(after),
        holes=tuple(holes),
        superseded=superseded,
        overlapping=tuple(overlapping),
    )


def recover(names: Names) -> dict[TopicPartition, PartitionChain]:
    """The recovery view of every topic-partition that has done files among ``names``."""
    return {tp: chain_of(ranges) for tp, ranges in committed_ranges(names).items()}


# --- planning ------------------------------------------------------------------------------
class StartPolicy(StrEnum):
    """Where a partition without any done file starts."""

    EARLIEST = "earliest"  # the Kafka low watermark: everything still retained
    LATEST = "latest"  # the high watermark, pinned with a bootstrap marker


@dataclass(frozen=True)
class Watermarks:
    """Kafka's low watermark (oldest retained offset) and high watermark (next offset)."""

    low: int
    high: int

    def __post_init__(self) -> None:
        if not 0 <= self.low <= self.high:
            raise ValueError(f"invalid watermarks low={self.low} high={self.high}")


@dataclass(frozen=True)
class PartitionPlan:
    """The decision for one topic-partition in one stage run.

    ``resume_offset``: the first offset not yet committed (where this run starts);
    ``ranges``: what this run stages, holes first; ``lost``: spans ``[start, end)`` that were
    never staged and are no longer in Kafka; ``bootstrap_offset``: when set, write the
    bootstrap marker for this offset (create-only) before staging — it pins the start
    (policy ``latest``) or bridges the lost spans so the chain stays contiguous;
    ``backlog_after_run``: offsets left for later runs by ``max_messages_per_run``;
    ``warnings``: conditions an operator must look at.
    """

    topic: str
    partition: int
    resume_offset: int
    ranges: tuple[OffsetRange, ...]
    lost: tuple[Span, ...]
    bootstrap_offset: int | None
    backlog_after_run: int
    warnings: tuple[str, ...] = ()

    @property
    def planned_messages(self) -> int:
        return sum(r.size for r in self.ranges)

    @property
    def lost_messages(self) -> int:
        return sum(end - start for start, end in self.lost)


@dataclass(frozen=True)
class RangePlan:
    """All ranges of one stage run (hole ranges first, then tails) and per-partition detail."""

    ranges: tuple[OffsetRange, ...]
    partitions: tuple[PartitionPlan, ...]

    @property
    def bootstrap_offsets(self) -> dict[TopicPartition, int]:
        return {
            (p.topic, p.partition): p.bootstrap_offset
            for p in self.partitions
            if p.bootstrap_offset is not None
        }


def plan_ranges(
    chains: Mapping[TopicPartition, PartitionChain],
    watermarks: Mapping[TopicPartition, Watermarks],
    *,
    max_messages_per_run: int,
    max_messages_per_range: int,
    start_policy: StartPolicy = StartPolicy.EARLIEST,
) -> RangePlan:
    """Plan the ranges of one stage run for every partition in ``watermarks``.

    ``chains`` comes from :func:`recover` (partitions absent from it have no done file);
    partitions absent from ``watermarks`` are not part of this run and are left alone.
    """
    for name, value in (
        ("max_messages_per_run", max_messages_per_run),
        ("max_messages_per_range", max_messages_per_range),
    ):
        if value < 1:
            raise ConfigError(f"{name} must be at least 1, got {value}")
    hole_ranges: list[OffsetRange] = []
    tail_ranges: list[OffsetRange] = []
    partitions: list[PartitionPlan] = []
    for tp in sorted(watermarks):
        plan, holes, tails = _plan_partition(
            tp,
            chains.get(tp),
            watermarks[tp],
            start_policy,
            max_messages_per_run,
            max_messages_per_range,
        )
        partitions.append(plan)
        hole_ranges.extend(holes)
        tail_ranges.extend(tails)
    # Holes first: until a hole is committed, the chain cannot advance past it.
    return RangePlan(tuple(sorted(hole_ranges) + sorted(tail_ranges)), tuple(partitions))


def _plan_partition(
    tp: TopicPartition,
    chain: PartitionChain | None,
    marks: Watermarks,
    policy: StartPolicy,
    per_run: int,
    per_range: int,
) -> tuple[PartitionPlan, list[OffsetRange], list[OffsetRange]]:
    topic, partition = tp
    low, high = marks.low, marks.high
    lost: list[Span] = []
    if chain is None:
        if policy is StartPolicy.EARLIEST:
            start, pin = low, None
        else:
            # Without a marker, the next run's "latest" would be a new high watermark and the
            # messages in between would be skipped. A marker cannot say "before offset 0", so
            # a partition that never held a message simply starts at 0.
            start, pin = high, (high if high >= 1 else None)
        holes: list[Span] = []
        tail = [(start, high)] if start < high else []
        resume = start
    else:
        if chain.committed_end > high:
            warning = (
                f"{topic}[{partition}]: done files commit offsets up to "
                f"{chain.committed_end - 1}, beyond the high watermark {high} (topic "
                "recreated or offsets reset?); nothing is staged until an operator resolves it"
            )
            plan = PartitionPlan(topic, partition, chain.resume_offset, (), (), None, 0, (warning,))
            return plan, [], []
        tail = [(chain.committed_end, high)] if chain.committed_end < high else []
        holes, lost_holes = _clip(list(chain.holes), low)
        tail, lost_tail = _clip(tail, low)
        lost = lost_holes + lost_tail
        # Expired offsets below the low watermark can never be staged; a bootstrap marker at
        # the low watermark re-anchors the chain so recovery does not chase them forever.
        pin = low if chain.resume_offset < low else None
        spans = holes + tail
        resume = spans[0][0] if spans else max(chain.committed_end, low)

    # A partition's first commit anchors its chain: recovery starts the chain at the lowest
    # committed range. If a partition without any done file were split into parallel ranges
    # and its first range failed while a later one committed, the chain would start at the
    # later range and the failed one would never be staged (found by the fault suite). So
    # until a partition has a commit or a pin, a run stages one range of it; later runs
    # split freely, a failed range then being a hole after the anchor.
    unanchored = chain is None and pin is None
    run_budget = min(per_run, per_range) if unanchored else per_run
    budget = run_budget
    planned: list[list[OffsetRange]] = [[], []]
    for kind, spans_of_kind in enumerate((holes, tail)):
        for start, end in spans_of_kind:
            take = min(budget, end - start)
            if take <= 0:
                break
            planned[kind].extend(_split(topic, partition, start, start + take, per_range))
            budget -= take
    total = sum(end - start for start, end in holes + tail)
    backlog = total - (run_budget - budget)
    plan = PartitionPlan(
        topic, partition, resume, tuple(planned[0] + planned[1]), tuple(lost), pin, backlog
    )
    return plan, planned[0], planned[1]


def _clip(spans: list[Span], low: int) -> tuple[list[Span], list[Span]]:
    """Spans cut at the low watermark: (what is still in Kafka, what expired unstaged)."""
    kept: list[Span] = []
    lost: list[Span] = []
    for start, end in spans:
        if end <= low:
            lost.append((start, end))
        elif start < low:
            lost.append((start, low))
            kept.append((low, end))
        else:
            kept.append((start, end))
    return kept, lost


def _split(topic: str, partition: int, start: int, end: int, per_range: int) -> list[OffsetRange]:
    return [
        OffsetRange(topic, partition, s, min(s + per_range, end))
        for s in range(start, end, per_range)
    ]
