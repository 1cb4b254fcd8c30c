"""What bench/bench_latency.py reports, from what it observes: a poll's per-partition rows
become a visible end (contiguous offsets only; a gap keeps the end, a duplicate is an error),
each message's latency is the first poll showing it minus its produce time, percentiles are
nearest-rank (every figure is one message's real latency), and a path that cannot sustain the
rate shows a growing backlog."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _latency import (  # noqa: E402
    PartitionRows,
    Poll,
    Produced,
    UnexpectedRows,
    backlog_series,
    growth_per_s,
    keeping_up,
    latency_summary,
    match,
    percentile,
    produced_after,
    visible_ends,
)


# --- a poll's answer -> visible ends ----------------------------------------------------------
def test_contiguous_rows_make_every_offset_up_to_the_max_visible() -> None:
    ends, gaps = visible_ends(
        [PartitionRows(0, 10, 0, 9), PartitionRows(1, 3, 5, 7)], first={0: 0, 1: 5}, previous={}
    )
    assert ends == {0: 10, 1: 8}
    assert gaps == frozenset()


def test_a_gap_keeps_the_previous_end_and_is_counted() -> None:
    # Offsets 0-4 and 8-9 visible (8 rows would be 0..9 contiguous: 10): 5-7 not yet.
    ends, gaps = visible_ends([PartitionRows(0, 7, 0, 9)], first={0: 0}, previous={0: 5})
    assert ends == {0: 5}
    assert gaps == frozenset({0})


def test_a_partition_not_in_the_answer_keeps_its_end() -> None:
    ends, _ = visible_ends([PartitionRows(1, 2, 0, 1)], first={0: 0, 1: 0}, previous={0: 4})
    assert ends == {0: 4, 1: 2}


def test_an_end_never_moves_back() -> None:
    ends, _ = visible_ends([PartitionRows(0, 3, 0, 2)], first={0: 0}, previous={0: 5})
    assert ends == {0: 5}


@pytest.mark.parametrize(
    "rows, needle",
    [
        (PartitionRows(2, 11, 0, 9), "partition 2: 11 row(s) for offsets 0..9"),
        (PartitionRows(2, 3, 1, 3), "partition 2: offset 1 in the table, the first produced is 4"),
    ],
)
def test_rows_a_correct_path_cannot_produce_are_an_error_naming_the_partition(rows, needle) -> None:
    first = {2: 0} if rows.min_offset == 0 else {2: 4}
    with pytest.raises(UnexpectedRows, match=re.escape(needle)):
        visible_ends([rows], first=first, previous={})


# --- messages -> latencies --------------------------------------------------------------------
def test_each_message_gets_the_first_poll_that_shows_it() -> None:
    produced = {0: Produced(0, [10.0, 10.5, 11.0, 11.5]), 1: Produced(0, [10.2, 10.7])}
    polls = [Poll(12.0, {0: 2}), Poll(13.0, {0: 4, 1: 1}), Poll(14.0, {0: 4, 1: 2})]
    matched = match(produced, polls)
    assert sorted(matched.latencies) == pytest.approx(sorted([2.0, 1.5, 2.0, 1.5, 2.8, 3.3]))
    assert matched.unseen == {}


def test_polls_are_taken_in_time_order_whatever_order_they_come_in() -> None:
    produced = {0: Produced(0, [0.0, 0.0])}
    matched = match(produced, [Poll(5.0, {0: 2}), Poll(1.0, {0: 1})])
    assert sorted(matched.latencies) == [1.0, 5.0]


def test_messages_no_poll_showed_are_unseen_not_dropped_silently() -> None:
    produced = {0: Produced(3, [1.0, 2.0, 3.0]), 1: Produced(0, [1.0])}
    matched = match(produced, [Poll(4.0, {0: 4})])
    assert matched.latencies == [3.0]
    assert matched.unseen == {0: 2, 1: 1}


def test_rows_beyond_what_was_produced_and_other_partitions_are_ignored() -> None:
    produced = {0: Produced(0, [1.0])}
    matched = match(produced, [Poll(2.0, {0: 5, 7: 3})])
    assert matched.latencies == [1.0]


def test_latencies_after_a_warm_up_keep_only_the_messages_produced_since() -> None:
    produced = {0: Produced(0, [0.0, 1.0, 2.0]), 1: Produced(0, [0.5, 2.5])}
    matched = match(produced, [Poll(3.0, {0: 3}), Poll(4.0, {1: 2})])
    assert sorted(produced_after(matched, 1.0)) == pytest.approx([1.0, 1.5, 2.0])
    assert len(produced_after(matched, 0.0)) == 5


def test_gap_polls_are_counted() -> None:
    produced = {0: Produced(0, [1.0, 1.0])}
    polls = [Poll(2.0, {0: 1}, frozenset({0})), Poll(3.0, {0: 2})]
    assert match(produced, polls).gap_polls == 1


# --- percentiles --------------------------------------------------------------------------------
@pytest.mark.parametrize("q, expected", [(50, 5), (90, 9), (99, 10), (100, 10), (10, 1), (1, 1)])
def test_nearest_rank_percentile_of_one_to_ten(q, expected) -> None:
    assert percentile(list(range(1, 11)), q) == expected


def test_p99_of_a_thousand_values_is_the_990th() -> None:
    values = [i / 1000 for i in range(1, 1001)]
    assert percentile(values, 99) == 0.99
    assert percentile(values, 50) == 0.5


@pytest.mark.parametrize("q", [0, -1, 101])
def test_a_percentile_outside_0_to_100_is_refused(q) -> None:
    with pytest.raises(ValueError):
        percentile([1.0], q)


def test_summary_sorts_and_rounds() -> None:
    summary = latency_summary([3.0, 1.0, 2.0, 4.0])
    assert summary == {"p50": 2.0, "p90": 4.0, "p99": 4.0, "max": 4.0, "mean": 2.5, "messages": 4}
    assert latency_summary([]) == {"messages": 0}


# --- keeping up -------------------------------------------------------------------------------
def _steady(rate: float, seconds: int, visible_rate: float, delay: float) -> tuple[dict, list]:
    """One partition produced at ``rate`` for ``seconds``; polls every 0.5 s that see
    everything produced more than ``delay`` s ago, at most ``visible_rate`` a second."""
    times = [i / rate for i in range(int(rate * seconds))]
    polls = []
    for k in range(1, 2 * seconds + 1):
        at = k / 2
        end = min(int(max(0.0, at - delay) * rate), int(at * visible_rate), len(times))
        polls.append(Poll(at, {0: end}))
    return {0: Produced(0, times)}, polls


def test_a_path_that_keeps_up_has_a_flat_backlog() -> None:
    produced, polls = _steady(rate=100, seconds=20, visible_rate=1e9, delay=1.0)
    verdict = keeping_up(backlog_series(produced, polls), 0.0, 20.0, rate=100)
    assert verdict["kept_up"] is True
    assert abs(verdict["backlog_growth_msg_per_s"]) < 5
    assert 95 <= verdict["backlog_at_produce_end"] <= 105  # one second of messages


def test_a_path_at_half_the_rate_shows_the_backlog_growing_at_the_difference() -> None:
    produced, polls = _steady(rate=100, seconds=20, visible_rate=50, delay=1.0)
    verdict = keeping_up(backlog_series(produced, polls), 0.0, 20.0, rate=100)
    assert verdict["kept_up"] is False
    assert 45 <= verdict["backlog_growth_msg_per_s"] <= 55
    assert verdict["backlog_max"] >= 950
    # ... and its latencies grow with the run: the last message waits ~10 s, the first ~1 s.
    matched = match(produced, polls)
    assert max(matched.latencies) > 9.0


def test_backlog_series_counts_produced_and_visible_at_each_poll() -> None:
    produced = {0: Produced(0, [1.0, 2.0, 3.0]), 1: Produced(10, [1.5])}
    series = backlog_series(produced, [Poll(2.0, {0: 1}), Poll(4.0, {0: 3, 1: 11})])
    assert series == [(2.0, 3, 1), (4.0, 4, 4)]


def test_growth_needs_two_distinct_times() -> None:
    assert growth_per_s([(1.0, 5.0)]) is None
    assert growth_per_s([(0.0, 0.0), (1.0, 2.0), (2.0, 4.0)]) == pytest.approx(2.0)
