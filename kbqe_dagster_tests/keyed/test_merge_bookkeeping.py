"""What the merge reads from the load state and remembers in its own: exactly the offset
ranges of the succeeded, not yet merged load jobs of each changelog; ``merge_every``; a crash
before the merge state is written merges the same jobs again; an unreadable state says how to
recover."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, datetime

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.load.state import JobStatus, LoadJobRecord, LoadState
from kbqe_dagster.keyed.merge import TableMergeResult, merge_keyed_tables
from kbqe_dagster.keyed.merge_state import (
    MERGE_STATE_FILE,
    MergeError,
    MergeState,
    not_merged_ranges,
    unmerged_ranges,
)
from kbqe_dagster.resources.staging_store import LocalStagingStore

NOW = datetime(2024, 11, 19, tzinfo=UTC)
TOPIC = "dbserver1.inventory.customers"


def done(partition: int, first: int, last: int, table: str = "customers_changelog") -> str:
    return f"{TOPIC}.{partition}.inventory.{table}.3.{first}.{last}.done"


def job(
    job_id: str, *done_files: str, status=JobStatus.SUCCEEDED, table: str = "customers_changelog"
) -> LoadJobRecord:
    return LoadJobRecord(
        job_id,
        "inventory",
        table,
        3,
        tuple(d.replace(".done", ".avro") for d in done_files),
        NOW,
        NOW,
        done_files=done_files,
        status=status,
    )


def config(merge_every: int = 1):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": TOPIC,
                    "format": "debezium",
                    "routing": {"mode": "static", "dataset": "inventory", "table": "customers"},
                    "keyed": {"key": ["id"], "merge_every": merge_every},
                }
            ],
        }
    )


def test_the_ranges_to_merge_are_the_exact_done_files_of_new_succeeded_jobs() -> None:
    state = LoadState(
        (
            job("a", done(0, 0, 9), done(0, 10, 19), done(1, 0, 4)),
            job("b", done(0, 30, 39)),
            job("c", done(0, 20, 29), status=JobStatus.SUBMITTED),  # pending: not loaded yet
            job("d", done(2, 0, 9)),
            job("x", done(0, 0, 99, table="orders_changelog"), table="orders_changelog"),
        )
    )
    jobs, ranges = unmerged_ranges(state, {"d"}, "inventory", "customers_changelog")
    assert jobs == ["a", "b"]
    assert ranges == {0: [(0, 19), (30, 39)], 1: [(0, 4)]}  # adjacent joined, the gap kept
    # What a check must leave out: everything not merged, pending included.
    assert not_merged_ranges(state, {"d"}, "inventory", "customers_changelog") == {
        0: [(0, 39)],
        1: [(0, 4)],
    }


class FakeMerger:
    def __init__(self, crash_at: str | None = None) -> None:
        self.merges: list[dict] = []
        self.crash_at = crash_at

    def columns(self, dataset, table):
        return {"id": None}

    def merge(self, dest, ranges, jobs, crash=lambda point: None, unmerged=None, dates=None):
        self.unmerged = unmerged  # what the recomputed rows must not see
        self.merges.append(ranges)
        return TableMergeResult(dest.name, jobs, 1, None, 1)


def test_merges_record_their_jobs_and_never_merge_them_again(tmp_path) -> None:
    store = LocalStagingStore(tmp_path)
    merger = FakeMerger()
    state = LoadState((job("a", done(0, 0, 9)),))
    assert [r.jobs for r in merge_keyed_tables(config(), merger, store, state)] == [1]
    assert merge_keyed_tables(config(), merger, store, state) == []
    state = LoadState((*state.jobs, job("b", done(0, 10, 19))))
    merge_keyed_tables(config(), merger, store, state)
    assert merger.merges == [{0: [(0, 9)]}, {0: [(10, 19)]}]
    assert MergeState.decode(store.read_bytes(MERGE_STATE_FILE)).merged_jobs == {
        "inventory.customers": {"a", "b"}
    }


def test_a_crash_before_the_state_is_written_merges_the_same_jobs_again(tmp_path) -> None:
    store = LocalStagingStore(tmp_path)
    state = LoadState((job("a", done(0, 0, 9)),))

    def crash(point: str) -> None:
        if point == "merge_before_state":
            raise KeyboardInterrupt  # stands for SIGKILL here

    with pytest.raises(KeyboardInterrupt):
        merge_keyed_tables(config(), FakeMerger(), store, state, crash=crash)
    merger = FakeMerger()
    merge_keyed_tables(config(), merger, store, state)
    assert merger.merges == [{0: [(0, 9)]}]


def test_merge_every_waits_for_that_many_cycles_with_new_jobs_unless_forced(tmp_path) -> None:
    store = LocalStagingStore(tmp_path)
    merger = FakeMerger()
    state = LoadState((job("a", done(0, 0, 9)),))
    assert merge_keyed_tables(config(3), merger, store, state) == []
    state = LoadState((*state.jobs, job("b", done(0, 10, 19))))
    assert merge_keyed_tables(config(3), merger, store, state) == []
    state = LoadState((*state.jobs, job("c", done(0, 20, 29))))
    assert [r.jobs for r in merge_keyed_tables(config(3), merger, store, state)] == [3]
    state = LoadState((*state.jobs, job("d", done(0, 30, 39))))
    assert [r.jobs for r in merge_keyed_tables(config(3), merger, store, state, force=True)] == [1]
    assert merger.merges == [{0: [(0, 29)]}, {0: [(30, 39)]}]


def test_an_unreadable_merge_state_names_the_safe_recovery(tmp_path) -> None:
    store = LocalStagingStore(tmp_path)
    store.put_bytes(MERGE_STATE_FILE, b"{not json")
    with pytest.raises(MergeError, match="deleting it is safe"):
        merge_keyed_tables(config(), FakeMerger(), store, LoadState())


def test_the_merge_is_told_which_rows_stay_unmerged_as_the_check_will_be(tmp_path) -> None:
    """The MERGE recomputes a key's row from its merged changelog rows: a pending load job's
    rows, which may land any moment, are not among them (merge_sql.merge_sql)."""
    store = LocalStagingStore(tmp_path)
    merger = FakeMerger()
    state = LoadState(
        (job("a", done(0, 0, 9)), job("c", done(0, 20, 29), status=JobStatus.SUBMITTED))
    )
    merge_keyed_tables(config(), merger, store, state)
    assert merger.merges == [{0: [(0, 9)]}]
    assert merger.unmerged == {0: [(20, 29)]}


class DatedMerger(FakeMerger):
    def merge(self, dest, ranges, jobs, crash=lambda point: None, unmerged=None, dates=None):
        self.dates = dates
        return super().merge(dest, ranges, jobs, crash, unmerged)


def _avro(done_name: str) -> str:
    return done_name.rsplit(".", 2)[0] + ".avro"


def _dated_job(*done_files: str) -> LoadJobRecord:
    return replace(job("a", *done_files), files=tuple(_avro(d) for d in done_files))


def _commit(store, done_name: str, days: dict[str, int] | None) -> None:
    """The done file of a one-file range, its manifest recording ``days`` (None: not)."""
    first, last = (int(n) for n in done_name.split(".")[-3:-1])
    entry = {"avro": _avro(done_name), "done": done_name, "records": 3}
    if days is not None:
        entry["days"] = days
    manifest = {
        "kbqe_manifest": 1, "topic": TOPIC, "partition": int(done_name.split(".")[3]),
        "first": first, "last": last, "files": [entry], "dead_letters": 0,
        "skipped": 0, "created_at": NOW.isoformat(),
    }  # fmt: skip
    store.put_bytes(done_name, json.dumps(manifest).encode())


def test_a_merge_is_told_the_event_dates_of_its_rows_from_their_done_files(tmp_path) -> None:
    """So that its reads of the new changelog rows prune to those partitions (rows_sql)."""
    store = LocalStagingStore(tmp_path)
    _commit(store, done(0, 0, 9), {"2024-11-18": 2, "2024-11-19": 1})
    _commit(store, done(1, 0, 4), {"2024-11-19": 3})
    merger = DatedMerger()
    merge_keyed_tables(
        config(), merger, store, LoadState((_dated_job(done(0, 0, 9), done(1, 0, 4)),))
    )
    assert merger.dates == ("2024-11-18", "2024-11-19")


def test_a_merge_of_a_file_whose_dates_are_not_recorded_reads_every_partition(tmp_path) -> None:
    store = LocalStagingStore(tmp_path)
    _commit(store, done(0, 0, 9), None)  # an older manifest: counts, no days
    merger = DatedMerger()
    merge_keyed_tables(config(), merger, store, LoadState((_dated_job(done(0, 0, 9)),)))
    assert merger.dates is None
