"""Done-file retention after loading: a done file goes once its avro file is loaded and a
later range exists; the newest range of every partition stays, whatever its age, and files
waiting for a load (or quarantined) hold their partition back."""

from __future__ import annotations

from datetime import date

from kbqe_dagster.core.protocol.naming import DoneFileName, parse_name
from kbqe_dagster.loading.retention_deletes import apply_retention
from kbqe_dagster_tests.loading.conftest import ORDERS_V1, PAGE_VIEWS, TOPIC
from kbqe_dagster_tests.loading.staged import stage_range

DAY = date(2024, 9, 13)


def done_ranges(store) -> set[tuple[int, int, int]]:
    out = set()
    for f in store.list():
        done = parse_name(f.name)
        if isinstance(done, DoneFileName):
            out.add((done.key.partition, done.first_offset, done.last_offset))
    return out


def stage_three_ranges_and_one_in_partition_1(store) -> None:
    for first in (0, 10, 20):
        stage_range(store, TOPIC, 0, first, first + 9, [(ORDERS_V1, 5, DAY), (PAGE_VIEWS, 5, DAY)])
    stage_range(store, TOPIC, 1, 0, 4, [(ORDERS_V1, 5, DAY)])


def test_nothing_is_deleted_while_avro_files_wait_for_their_load(store) -> None:
    stage_three_ranges_and_one_in_partition_1(store)

    result = apply_retention(store)

    assert result.deleted == ()
    # The newest range of partition 0 (two tables) and partition 1's only range wait for
    # their avro files; the two earlier ranges of partition 0 are behind them.
    assert result.kept_by_reason == {"avro_present": 4, "behind_kept": 3}


def test_after_loading_only_the_newest_range_of_each_partition_keeps_its_done_files(
    store, make_coordinator
) -> None:
    stage_three_ranges_and_one_in_partition_1(store)
    make_coordinator().run_cycle()

    result = apply_retention(store)

    assert done_ranges(store) == {(0, 20, 29), (1, 0, 4)}
    assert len(result.deleted) == 4 and result.failed is None
    # Partition 0's newest range has a done file per table: both are its resume point.
    assert result.kept_by_reason == {"newest": 3}
    assert apply_retention(store).deleted == (), "a second run finds nothing more"


def test_a_file_still_waiting_holds_back_the_ranges_after_it(store, bq, make_coordinator) -> None:
    stage_three_ranges_and_one_in_partition_1(store)
    bq.fail_tables[("acme_web", "page_views")] = 99  # page views get quarantined
    make_coordinator().run_cycle()

    apply_retention(store)

    assert done_ranges(store) >= {(0, 0, 9), (0, 10, 19), (0, 20, 29)}, (
        "the quarantined page-view files keep partition 0's chain"
    )
    assert (1, 0, 4) in done_ranges(store)
