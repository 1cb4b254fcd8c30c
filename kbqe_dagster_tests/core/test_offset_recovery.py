"""Offset recovery: where each topic-partition resumes, derived from done files only."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.protocol.commit import bootstrap_marker, range_marker
from kbqe_dagster.core.protocol.offsets import OffsetRange, committed_ranges, recover


def done(
    first: int,
    last: int,
    *,
    topic: str = "orders",
    partition: int = 0,
    table: str = "orders",
    schema: int = 1,
) -> str:
    return f"{topic}.{partition}.sales.{table}.{schema}.{first}.{last}.done"


def avro(
    first: int, *, topic: str = "orders", partition: int = 0, table: str = "orders", schema: int = 1
) -> str:
    return f"{topic}.{partition}.sales.{table}.{schema}.{first}.avro"


def spans(ranges) -> list[tuple[int, int]]:
    return [(r.first, r.last) for r in ranges]


def test_resume_point_is_after_the_highest_range_of_a_contiguous_chain() -> None:
    chains = recover([done(0, 99), done(100, 249), done(250, 250)])
    chain = chains[("orders", 0)]
    assert chain.resume_offset == 251
    assert chain.chain_start == 0
    assert spans(chain.chain) == [(0, 99), (100, 249), (250, 250)]
    assert chain.holes == () and chain.after_hole == ()


@pytest.mark.parametrize(
    "partition_files, expected",
    [
        ({0: [(0, 9)], 1: [(0, 99), (100, 199)], 2: [(500, 599)]}, {0: 10, 1: 200, 2: 600}),
        ({3: [(7, 7)], 11: [(0, 4), (5, 5), (6, 1000)]}, {3: 8, 11: 1001}),
    ],
)
def test_each_partition_resumes_after_its_own_highest_committed_offset(
    partition_files: dict[int, list[tuple[int, int]]], expected: dict[int, int]
) -> None:
    names = [
        done(f, last, partition=p) for p, ranges in partition_files.items() for f, last in ranges
    ]
    chains = recover(names)
    assert {p: chains[("orders", p)].resume_offset for p in expected} == expected


def test_names_that_are_not_done_files_are_ignored() -> None:
    names = [
        done(0, 99),
        avro(100),  # staged, not committed: does not move the resume point
        "_kbqe/load_state.json",
        "orders.0.sales.orders.1.100.199.done.tmp",
        "orders.0.sales.orders.x.100.199.done",
        "README.md",
        "orders.0.sales.orders.1.200.done",  # too few numbers
    ]
    chains = recover(names)
    assert list(chains) == [("orders", 0)]
    assert chains[("orders", 0)].resume_offset == 100


def test_other_partitions_and_topics_are_untouched() -> None:
    base = [done(0, 99, partition=0), done(0, 49, partition=1)]
    extra = [done(100, 199, partition=0), done(0, 999, topic="com.acme.events", partition=1)]
    before, after = recover(base), recover(base + extra)
    assert after[("orders", 1)] == before[("orders", 1)]
    assert after[("orders", 0)].resume_offset == 200
    assert after[("com.acme.events", 1)].resume_offset == 1000


def test_a_hole_in_the_chain_is_redone_not_skipped() -> None:
    # 100..199 failed while 200..299 and 400..499 committed: resume at the hole.
    chain = recover([done(0, 99), done(200, 299), done(400, 499)])[("orders", 0)]
    assert chain.resume_offset == 100
    assert chain.holes == ((100, 200), (300, 400))
    assert spans(chain.after_hole) == [(200, 299), (400, 499)]
    assert chain.committed_end == 500


def test_all_files_of_one_range_form_one_committed_range() -> None:
    names = [
        done(0, 99, table="orders", schema=1),
        done(0, 99, table="orders", schema=2),
        done(0, 99, table="refunds", schema=7),
    ]
    ranges = committed_ranges(names)[("orders", 0)]
    assert spans(ranges) == [(0, 99)]
    assert [d.key.schema_id for d in ranges[0].done] == [1, 2, 7]


def test_a_range_marker_commits_offsets_without_files() -> None:
    marker = range_marker(OffsetRange("orders", 0, 100, 200)).name
    chain = recover([done(0, 99), marker, done(200, 299)])[("orders", 0)]
    assert chain.resume_offset == 300
    assert chain.holes == ()


def test_overlapping_legacy_done_files_merge_and_are_reported() -> None:
    chain = recover([done(0, 100, table="a"), done(5, 98, table="b"), done(101, 150)])[
        ("orders", 0)
    ]
    assert chain.resume_offset == 151
    assert spans(chain.overlapping) == [(5, 98)]


def test_a_bootstrap_marker_starts_a_fresh_partition_at_its_offset() -> None:
    chain = recover([bootstrap_marker("orders", 0, 1000).name])[("orders", 0)]
    assert chain.resume_offset == 1000
    assert chain.anchor is not None and chain.anchor.first == 999


def test_a_forward_bootstrap_supersedes_older_done_files() -> None:
    names = [done(0, 99), bootstrap_marker("orders", 0, 5000).name, done(5000, 5099)]
    chain = recover(names)[("orders", 0)]
    assert chain.resume_offset == 5100
    assert chain.holes == ()
    assert spans(chain.superseded) == [(0, 99)]


def test_a_bootstrap_inside_committed_offsets_changes_nothing() -> None:
    names = [done(0, 99), done(100, 199), bootstrap_marker("orders", 0, 150).name]
    chain = recover(names)[("orders", 0)]
    assert chain.resume_offset == 200
    assert chain.superseded and spans(chain.superseded) == [(0, 99)]


@pytest.mark.parametrize("start, end", [(-1, 5), (5, 5), (6, 5)])
def test_an_offset_range_must_hold_at_least_one_offset(start: int, end: int) -> None:
    with pytest.raises(ValueError, match=r"orders\[0\]"):
        OffsetRange("orders", 0, start, end)


def test_an_offset_range_names_its_inclusive_last_offset() -> None:
    rng = OffsetRange("orders", 3, 100, 200)
    assert (rng.last, rng.size, rng.topic_partition) == (199, 100, ("orders", 3))
