"""When an erasure request is complete: it watches, from its arrival, every feeding partition's
offsets from the loaded position to the high watermark, and completes on the pass that finds
them all loaded; later passes look only at the partitions the watched ranges wrote."""

from __future__ import annotations

from kbqe_dagster.core.erasure.pending import (
    ErasureState,
    PendingRequest,
    Watch,
    decode_state,
    follow_up_restriction,
    loaded_positions,
    merge_restrictions,
    nothing_to_look_at,
    outstanding,
    state_after_pass,
    watches_at_arrival,
    window_done_files,
)
from kbqe_dagster.core.erasure.requests import ErasureRequest
from kbqe_dagster.core.erasure.statements import PartitionRestriction
from kbqe_dagster.core.erasure.targets import Target
from kbqe_dagster.core.protocol.commit import Manifest, StagedFile


def avro(topic: str, p: int, table: str, first: int) -> str:
    return f"{topic}.{p}.shop.{table}.1.{first}.avro"


def done(topic: str, p: int, table: str, first: int, last: int) -> str:
    return f"{topic}.{p}.shop.{table}.1.{first}.{last}.done"


def test_the_loaded_position_is_the_chain_end_lowered_to_the_first_file_not_loaded() -> None:
    names = [
        done("t", 0, "orders", 0, 9),  # loaded: its avro file is gone
        done("t", 0, "orders", 10, 19),
        avro("t", 0, "orders", 10),  # committed, waiting for its load
        done("t", 1, "orders", 0, 4),
        avro("t", 1, "orders", 5),  # a range in flight: no done file yet
        done("t", 2, "orders", 0, 7),
    ]
    assert loaded_positions(names) == {("t", 0): 10, ("t", 1): 5, ("t", 2): 8}


def test_a_request_watches_up_to_the_high_watermark_not_the_staged_end() -> None:
    marks = {("t", 0): (0, 25), ("t", 1): (0, 5), ("t", 2): (30, 30)}
    loaded = {("t", 0): 10, ("t", 1): 5}
    assert watches_at_arrival(marks, loaded) == (Watch("t", 0, 10, 25),)
    # Never staged: from the low watermark.
    assert watches_at_arrival({("u", 0): (3, 9)}, {}) == (Watch("u", 0, 3, 9),)


def test_a_watch_is_outstanding_until_its_end_is_loaded() -> None:
    watch = Watch("t", 0, 10, 25)
    assert outstanding([watch], {("t", 0): 20}) == (watch,)
    assert outstanding([watch], {}) == (watch,)
    assert outstanding([watch], {("t", 0): 25}) == ()


def pending(request_id: str, *watches: Watch, passes: int = 0) -> PendingRequest:
    return PendingRequest(ErasureRequest(request_id, "u-1"), "2026-01-01T00:00:00", watches, passes)


def test_a_pass_completes_the_requests_whose_watches_are_loaded() -> None:
    state = ErasureState(
        (pending("a", Watch("t", 0, 0, 10)), pending("b", Watch("t", 0, 0, 30)), pending("c")),
        {0: 4},
    )
    after, complete = state_after_pass(state, {"a": 3, "b": 1}, {("t", 0): 10})
    assert [(p.request.request_id, p.passes, p.rows_deleted) for p in complete] == [("a", 1, 3)]
    assert [(p.request.request_id, p.passes) for p in after.pending] == [("b", 1), ("c", 0)]
    assert after.requests_read == {0: 4}


def test_the_state_round_trips_with_the_subject_kept_for_later_passes() -> None:
    state = ErasureState((pending("a", Watch("t", 0, 1, 2), passes=2),), {0: 4, 1: 9})
    assert decode_state(state.encode(), "state") == state


MANIFEST_FILES = (
    StagedFile(avro("t", 0, "orders", 10), done("t", 0, "orders", 10, 19), 5,
               days=(("2026-01-02", 3), ("2026-01-04", 2))),
    StagedFile(avro("t", 0, "dead", 10), done("t", 0, "dead", 10, 19), 1, days=(("2026-01-09", 1),)),
)  # fmt: skip


def manifest(files=MANIFEST_FILES) -> Manifest:
    return Manifest("t", 0, 10, 19, files, 1, 0, "2026-01-09T23:59:00+00:00")


def target(table: str, **kw) -> Target:
    options = {"partition_column": "_event_date", **kw}
    return Target("shop", table, ("c",), None, f"shop.{table}", True, **options)


def test_a_later_pass_looks_at_the_days_the_watched_ranges_wrote() -> None:
    names = [done("t", 0, "orders", 0, 9), done("t", 0, "orders", 10, 19), "other"]
    assert window_done_files(names, [Watch("t", 0, 12, 30)]) == (done("t", 0, "orders", 10, 19),)
    found = follow_up_restriction(target("orders"), {"d": manifest()})
    assert found == PartitionRestriction("_event_date", "day", ("2026-01-02", "2026-01-04"))


def test_a_table_no_watched_range_wrote_is_skipped() -> None:
    found = follow_up_restriction(target("refunds"), {"d": manifest()})
    assert found is not None and nothing_to_look_at(found)


def test_the_dead_letters_are_looked_at_by_staging_date_around_the_commits() -> None:
    found = follow_up_restriction(target("dead", dead_letter=True, partition_column="staged_date"),
                                  {"d": manifest()})  # fmt: skip
    assert found == PartitionRestriction("staged_date", "between", ("2026-01-08", "2026-01-09"))


def test_no_restriction_without_every_manifest_or_a_partition_column() -> None:
    assert follow_up_restriction(target("orders"), {"d": manifest(), "legacy": None}) is None
    assert follow_up_restriction(target("orders", partition_column=None), {"d": manifest()}) is None


def test_one_delete_per_table_merges_the_requests_restrictions() -> None:
    a = PartitionRestriction("_event_date", "day", ("2026-01-02",))
    b = PartitionRestriction("_event_date", "day", ("2026-01-04", "2026-01-02"))
    empty = PartitionRestriction("_event_date", "day", ())
    assert merge_restrictions([a, b, empty]).values == ("2026-01-02", "2026-01-04")
    assert merge_restrictions([a, None]) is None  # a first pass reads the whole table
    assert nothing_to_look_at(merge_restrictions([empty, empty]))
