"""Done-file retention: delete only what recovery does not need, keep the rest with a reason."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.protocol.commit import bootstrap_marker, range_marker
from kbqe_dagster.core.protocol.offsets import OffsetRange, recover
from kbqe_dagster.core.protocol.retention_plan import KeepReason, plan_retention


def done(first: int, last: int, *, partition: int = 0, table: str = "orders") -> str:
    return f"orders.{partition}.sales.{table}.1.{first}.{last}.done"


def avro(first: int, *, partition: int = 0, table: str = "orders") -> str:
    return f"orders.{partition}.sales.{table}.1.{first}.avro"


def reasons(plan) -> dict[str, KeepReason]:
    return {k.name: k.reason for k in plan.keep}


def test_the_newest_done_file_is_kept_however_old_and_loaded() -> None:
    plan = plan_retention([done(0, 99)])
    assert plan.delete == ()
    assert reasons(plan) == {done(0, 99): KeepReason.NEWEST}


def test_loaded_done_files_before_the_newest_range_are_deleted_oldest_first() -> None:
    plan = plan_retention([done(200, 299), done(0, 99), done(100, 199)])
    assert plan.delete == (done(0, 99), done(100, 199))
    assert reasons(plan) == {done(200, 299): KeepReason.NEWEST}


def test_a_done_file_whose_avro_file_is_not_loaded_is_kept() -> None:
    plan = plan_retention([done(0, 99), avro(0), done(100, 199)])
    assert plan.delete == ()
    assert reasons(plan)[done(0, 99)] is KeepReason.AVRO_PRESENT


def test_a_pending_file_early_in_the_chain_protects_every_later_done_file() -> None:
    # Deleting 100..199 while 0..99 stays would open a hole there: recovery would redo it.
    names = [done(0, 99), avro(0), done(100, 199), done(200, 299), done(300, 399)]
    plan = plan_retention(names)
    assert plan.delete == ()
    assert reasons(plan) == {
        done(0, 99): KeepReason.AVRO_PRESENT,
        done(100, 199): KeepReason.BEHIND_KEPT,
        done(200, 299): KeepReason.BEHIND_KEPT,
        done(300, 399): KeepReason.NEWEST,  # its lasting reason, behind a kept one or not
    }


def test_every_done_file_of_the_newest_range_is_kept_as_the_resume_point() -> None:
    # One range writes a done file per table: the first one kept must not make the others
    # read as "behind a kept one" (kbqe retention plan would send the operator looking for
    # a stuck file that does not exist).
    names = [done(0, 99), done(100, 199), done(100, 199, table="refunds")]
    plan = plan_retention(names)
    assert plan.delete == (done(0, 99),)
    assert reasons(plan) == {
        done(100, 199): KeepReason.NEWEST,
        done(100, 199, table="refunds"): KeepReason.NEWEST,
    }


def test_a_sibling_avro_file_without_its_done_file_keeps_the_range_manifest() -> None:
    names = [done(0, 99), avro(0, table="refunds"), done(100, 199)]
    plan = plan_retention(names)
    assert reasons(plan)[done(0, 99)] is KeepReason.RANGE_HAS_AVRO


def test_nothing_at_or_after_the_first_hole_is_deleted() -> None:
    names = [done(0, 99), done(100, 199), done(300, 399), done(400, 499)]
    plan = plan_retention(names)
    assert plan.delete == (done(0, 99),)
    assert reasons(plan) == {
        done(100, 199): KeepReason.NEWEST,  # the chain ends here: it is the resume point
        done(300, 399): KeepReason.AFTER_HOLE,
        done(400, 499): KeepReason.AFTER_HOLE,
    }


def test_markers_follow_the_same_rules() -> None:
    gap = range_marker(OffsetRange("orders", 0, 100, 200)).name
    last = range_marker(OffsetRange("orders", 0, 200, 300)).name
    plan = plan_retention([done(0, 99), gap, last])
    assert plan.delete == (done(0, 99), gap)
    assert reasons(plan) == {last: KeepReason.NEWEST}


def test_superseded_done_files_go_first_and_the_anchor_outlives_them() -> None:
    anchor = bootstrap_marker("orders", 0, 5000).name
    names = [done(0, 99), avro(0), done(100, 199), anchor, done(5000, 5099), done(5100, 5199)]
    plan = plan_retention(names)
    assert plan.delete == ()  # 0..99 is not loaded: the anchor must stay, and all after it
    assert reasons(plan)[done(100, 199)] is KeepReason.BEHIND_KEPT
    assert reasons(plan)[anchor] is KeepReason.BEHIND_KEPT
    loaded = plan_retention([n for n in names if n != avro(0)])
    assert loaded.delete == (done(0, 99), done(100, 199), anchor, done(5000, 5099))


def test_overlapping_legacy_done_files_are_deleted_without_uncovering_offsets() -> None:
    # Deleting 0..100 first would leave 5..50 and 60..200: a hole at 51..59, redone.
    names = [
        done(0, 100, table="a"),
        done(5, 50, table="b"),
        done(60, 200, table="c"),
        done(201, 300),
    ]
    plan = plan_retention(names)
    assert plan.delete == (
        done(5, 50, table="b"),
        done(0, 100, table="a"),
        done(60, 200, table="c"),
    )
    assert reasons(plan) == {done(201, 300): KeepReason.NEWEST}


def test_partitions_are_decided_independently() -> None:
    names = [
        done(0, 99),
        done(100, 199),
        done(0, 9, partition=1),
        avro(0, partition=1),
        done(10, 19, partition=1),
    ]
    plan = plan_retention(names)
    assert plan.delete == (done(0, 99),)
    assert reasons(plan)[done(0, 9, partition=1)] is KeepReason.AVRO_PRESENT


SCENARIOS = {
    "plain chain": [done(0, 99), done(100, 199), done(200, 299), done(300, 399)],
    "multi-file ranges": [
        done(0, 99),
        done(0, 99, table="r"),
        done(100, 199),
        done(100, 199, table="r"),
        done(200, 299),
    ],
    "hole": [done(0, 99), done(100, 199), done(300, 399), done(400, 499)],
    "bootstrap": [
        done(0, 99),
        bootstrap_marker("orders", 0, 1000).name,
        done(1000, 1099),
        done(1100, 1199),
    ],
    "straddling bootstrap": [
        done(0, 99),
        done(100, 299),
        bootstrap_marker("orders", 0, 250).name,
        done(300, 399),
    ],
    "overlaps": [done(0, 100, table="a"), done(5, 98, table="b"), done(101, 150), done(151, 160)],
    "bridging overlap": [
        done(0, 100, table="a"),
        done(5, 50, table="b"),
        done(60, 200, table="c"),
        done(201, 300),
    ],
    "pending in the middle": [
        done(0, 99),
        done(100, 199),
        avro(100),
        done(200, 299),
        done(300, 399),
    ],
}


@pytest.mark.parametrize("names", SCENARIOS.values(), ids=SCENARIOS.keys())
def test_every_prefix_of_the_delete_list_leaves_recovery_unchanged(names: list[str]) -> None:
    before = recover(names)[("orders", 0)]
    plan = plan_retention(names)
    assert plan.delete, "each scenario must delete something for this test to mean anything"
    for cut in range(1, len(plan.delete) + 1):
        remaining = [n for n in names if n not in plan.delete[:cut]]
        after = recover(remaining)[("orders", 0)]
        assert after.resume_offset == before.resume_offset
        assert after.after_hole == before.after_hole
    assert len(plan.delete) + len(plan.keep) == len([n for n in names if n.endswith(".done")])
