"""What the merge takes from a changelog delivered through the Storage Write API
(``delivery: storage_write``), where no load job names the new rows: per Kafka partition, the
offsets after the merge's delivered watermark up to the end of the committed chain of done
files, whether or not anything was loaded. Exactly those: not an open intent's rows (not
committed yet), nothing past a hole, nothing twice, nothing lost when retention deleted the
done files in between; ``merge_every`` and crashes as for loads; a table switched between
deliveries merges each range by the path that delivered it."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.keyed.checks import KeyedCheck
from kbqe_dagster.core.keyed.contract import DeleteMode
from kbqe_dagster.core.keyed.delivered import LAST_OFFSET, not_merged_yet, subtract
from kbqe_dagster.core.load.state import JobStatus, LoadJobRecord, LoadState
from kbqe_dagster.keyed.merge import TableMergeResult, check_keyed_tables, merge_keyed_tables
from kbqe_dagster.keyed.merge_state import MERGE_STATE_FILE, MergeState
from kbqe_dagster.resources.staging_store import LocalStagingStore

NOW = datetime(2024, 11, 19, tzinfo=UTC)
TOPIC = "dbserver1.inventory.customers"
CHANGELOG = "customers_changelog"


def name(partition: int, first: int, last: int | None, kind: str, table: str = CHANGELOG) -> str:
    bounds = f"{first}.{last}" if last is not None else f"{first}"
    return f"{TOPIC}.{partition}.inventory.{table}.3.{bounds}.{kind}"


class Staging:
    """The topic's staging names as the delivery sink and the stage job leave them."""

    def __init__(self, tmp_path) -> None:
        self.store = LocalStagingStore(tmp_path)

    def delivered(self, partition: int, first: int, last: int) -> None:
        """A range committed by storage_write: its intent and done file, no avro file."""
        self.store.put_bytes(name(partition, first, last, "intent"), b"{}")
        self.store.put_bytes(name(partition, first, last, "done"), b"")

    def appending(self, partition: int, first: int, last: int) -> None:
        """An open intent: rows appended, the range not committed."""
        self.store.put_bytes(name(partition, first, last, "intent"), b"{}")

    def staged_for_load(self, partition: int, first: int, last: int) -> None:
        self.store.put_bytes(name(partition, first, None, "avro"), b"")
        self.store.put_bytes(name(partition, first, last, "done"), b"")

    def retention_deletes(self, partition: int, first: int, last: int) -> None:
        for kind in ("done", "intent"):
            self.store.delete(name(partition, first, last, kind))


def config(merge_every: int = 1, delivery: str = "storage_write"):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": TOPIC,
                    "format": "debezium",
                    "delivery": delivery,
                    "routing": {"mode": "static", "dataset": "inventory", "table": "customers"},
                    "keyed": {"key": ["id"], "merge_every": merge_every},
                }
            ],
        }
    )


def loaded(
    job_id: str, partition: int, first: int, last: int, status: JobStatus = JobStatus.SUCCEEDED
) -> LoadJobRecord:
    done = name(partition, first, last, "done")
    return LoadJobRecord(
        job_id,
        "inventory",
        CHANGELOG,
        3,
        (done.replace(".done", ".avro"),),
        NOW,
        NOW,
        done_files=(done,),
        status=status,
    )


class FakeMerger:
    def __init__(self, changelog_exists: bool = True) -> None:
        self.merges: list[dict] = []
        self.checked: list[dict] = []
        self.changelog_exists = changelog_exists

    def columns(self, dataset, table):
        return {"id": None} if self.changelog_exists else None

    def merge(self, dest, ranges, jobs, crash=lambda point: None, unmerged=None, dates=None):
        self.unmerged = unmerged  # what the recomputed rows must not see
        self.merges.append({p: list(s) for p, s in ranges.items()})
        return TableMergeResult(dest.name, jobs, 1, None, 1)

    def check(self, dest, unmerged, sample_seed=None):
        self.checked.append({p: list(s) for p, s in unmerged.items()})
        return KeyedCheck(dest.name, 0, 0, 0, 0, 0, DeleteMode.SOFT)


def watermarks(staging: Staging) -> dict[int, int]:
    state = MergeState.decode(staging.store.read_bytes(MERGE_STATE_FILE))
    return state.delivered["inventory.customers"]


def test_the_committed_ranges_are_merged_once_without_any_load(tmp_path) -> None:
    staging, merger = Staging(tmp_path), FakeMerger()
    staging.delivered(0, 0, 9)
    staging.delivered(0, 10, 19)
    staging.delivered(1, 0, 4)
    [result] = merge_keyed_tables(config(), merger, staging.store, LoadState())
    assert merger.merges == [{0: [(0, 19)], 1: [(0, 4)]}]
    assert (result.jobs, dict(result.delivered)) == (0, {0: [(0, 19)], 1: [(0, 4)]})
    assert watermarks(staging) == {0: 19, 1: 4}
    assert merge_keyed_tables(config(), merger, staging.store, LoadState()) == []
    staging.delivered(0, 20, 29)
    merge_keyed_tables(config(), merger, staging.store, LoadState())
    assert merger.merges[1:] == [{0: [(20, 29)]}]


def test_an_open_intent_and_the_ranges_after_a_hole_wait_for_their_commit(tmp_path) -> None:
    staging, merger = Staging(tmp_path), FakeMerger()
    staging.delivered(0, 0, 9)
    staging.appending(0, 10, 19)  # its rows may be in the table: not all of them yet
    staging.delivered(0, 20, 29)  # committed, but after the hole 10..19
    merge_keyed_tables(config(), merger, staging.store, LoadState())
    assert merger.merges == [{0: [(0, 9)]}]
    staging.delivered(0, 10, 19)
    merge_keyed_tables(config(), merger, staging.store, LoadState())
    assert merger.merges[1:] == [{0: [(10, 29)]}]


def test_done_files_deleted_by_retention_between_merges_lose_nothing(tmp_path) -> None:
    staging, merger = Staging(tmp_path), FakeMerger()
    staging.delivered(0, 0, 9)
    merge_keyed_tables(config(), merger, staging.store, LoadState())
    for first in (10, 20, 30):
        staging.delivered(0, first, first + 9)
    for first in (0, 10, 20):  # retention keeps only the newest done file of the partition
        staging.retention_deletes(0, first, first + 9)
    merge_keyed_tables(config(), merger, staging.store, LoadState())
    assert merger.merges == [{0: [(0, 9)]}, {0: [(10, 39)]}]


def test_ranges_committed_before_the_changelog_has_a_row_are_passed_over(tmp_path) -> None:
    staging, merger = Staging(tmp_path), FakeMerger(changelog_exists=False)
    staging.delivered(0, 0, 9)  # tombstones and dead letters only: no changelog row, no table
    assert merge_keyed_tables(config(), merger, staging.store, LoadState()) == []
    assert merger.merges == [] and watermarks(staging) == {0: 9}
    merger.changelog_exists = True
    staging.delivered(0, 10, 19)
    merge_keyed_tables(config(), merger, staging.store, LoadState())
    assert merger.merges == [{0: [(10, 19)]}]


def test_merge_every_counts_cycles_with_newly_delivered_ranges(tmp_path) -> None:
    staging, merger = Staging(tmp_path), FakeMerger()
    staging.delivered(0, 0, 9)
    assert merge_keyed_tables(config(3), merger, staging.store, LoadState()) == []
    assert merge_keyed_tables(config(3), merger, staging.store, LoadState()) == []
    staging.delivered(0, 10, 19)
    assert [
        r.delivered for r in merge_keyed_tables(config(3), merger, staging.store, LoadState())
    ] == [{0: [(0, 19)]}]
    staging.delivered(0, 20, 29)
    merge_keyed_tables(config(3), merger, staging.store, LoadState(), force=True)
    assert merger.merges == [{0: [(0, 19)]}, {0: [(20, 29)]}]


def test_a_crash_before_the_state_is_written_merges_the_same_rows_again(tmp_path) -> None:
    staging = Staging(tmp_path)
    staging.delivered(0, 0, 9)

    def crash(point: str) -> None:
        if point == "merge_before_state":
            raise KeyboardInterrupt  # stands for SIGKILL here

    with pytest.raises(KeyboardInterrupt):
        merge_keyed_tables(config(), FakeMerger(), staging.store, LoadState(), crash=crash)
    staging.delivered(0, 10, 19)
    merger = FakeMerger()
    merge_keyed_tables(config(), merger, staging.store, LoadState())
    assert merger.merges == [{0: [(0, 19)]}]


def test_a_switch_between_deliveries_merges_each_range_by_the_path_that_delivered_it(
    tmp_path,
) -> None:
    staging, merger = Staging(tmp_path), FakeMerger()
    # Loaded before the switch (job a), then appended, then a load range waiting for its job.
    staging.delivered(0, 10, 19)
    staging.staged_for_load(0, 20, 29)
    staging.delivered(0, 30, 39)
    state = LoadState((loaded("a", 0, 0, 9),))
    staging.store.put_bytes(name(0, 0, 9, "done"), b"")
    merge_keyed_tables(config(), merger, staging.store, state)
    assert merger.merges == [
        {0: [(0, 19), (30, 39)]}
    ]  # 0..9 by its job, 10..19 and 30..39 delivered
    assert watermarks(staging) == {0: 39}
    # The waiting range is loaded later: its job brings it, the delivered path never.
    state = LoadState((*state.jobs, loaded("b", 0, 20, 29)))
    staging.store.delete(name(0, 20, None, "avro"))
    merge_keyed_tables(config(), merger, staging.store, state)
    assert merger.merges[1:] == [{0: [(20, 29)]}]
    # Switched back to load: the watermark still guards the delivered rows; loads by jobs.
    staging.staged_for_load(0, 40, 49)
    state = LoadState((*state.jobs, loaded("c", 0, 40, 49)))
    staging.store.delete(name(0, 40, None, "avro"))
    merge_keyed_tables(config(delivery="load"), merger, staging.store, state)
    assert merger.merges[2:] == [{0: [(40, 49)]}]


def test_the_check_leaves_out_the_delivered_rows_not_merged_yet(tmp_path) -> None:
    staging, merger = Staging(tmp_path), FakeMerger()
    staging.delivered(0, 0, 9)
    staging.delivered(1, 0, 4)
    merge_keyed_tables(config(), merger, staging.store, LoadState())
    staging.delivered(0, 10, 19)
    staging.delivered(2, 0, 9)  # a partition the merge has not seen yet
    check_keyed_tables(config(), merger, staging.store, LoadState(), seed="2024-11-19")
    assert merger.checked == [
        {0: [(10, LAST_OFFSET)], 1: [(5, LAST_OFFSET)], 2: [(0, LAST_OFFSET)]}
    ]


def test_a_load_only_changelog_is_merged_by_its_jobs_without_listing_the_topic(tmp_path) -> None:
    staging, merger = Staging(tmp_path), FakeMerger()
    listed: list[str] = []
    store_list = staging.store.list
    staging.store.list = lambda prefix="": listed.append(prefix) or store_list(prefix)
    staging.staged_for_load(0, 0, 9)
    staging.store.delete(name(0, 0, None, "avro"))
    state = LoadState((loaded("a", 0, 0, 9),))
    merge_keyed_tables(config(delivery="load"), merger, staging.store, state)
    assert merger.merges == [{0: [(0, 9)]}]
    assert [p for p in listed if p.startswith(TOPIC)] == []
    assert MergeState.decode(staging.store.read_bytes(MERGE_STATE_FILE)).delivered == {}


@pytest.mark.parametrize(
    "spans, minus, expected",
    [
        ([(0, 9)], [], [(0, 9)]),
        ([(0, 9)], [(0, 9)], []),
        ([(0, 29)], [(10, 19)], [(0, 9), (20, 29)]),
        ([(5, 25)], [(0, 9), (20, 40)], [(10, 19)]),
        ([(0, 9), (20, 29)], [(8, 21)], [(0, 7), (22, 29)]),
        ([(10, 19)], [(0, 4), (30, 39)], [(10, 19)]),
    ],
)
def test_subtract_leaves_the_offsets_no_span_covers(spans, minus, expected) -> None:
    assert subtract(spans, minus) == expected


def test_not_merged_yet_is_everything_after_the_watermark_but_the_load_path_s() -> None:
    assert not_merged_yet({0: 9}, [0, 1], {0: [(20, 29)]}) == {
        0: [(10, 19), (30, LAST_OFFSET)],
        1: [(0, LAST_OFFSET)],
    }
