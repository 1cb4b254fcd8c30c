"""Atomic range commits (manifest in every done file), roll forward, markers and orphans."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.core.protocol.commit import (
    Manifest,
    avro_file_name,
    bootstrap_marker,
    is_bootstrap_marker,
    is_marker,
    is_pinned,
    manifests_needed,
    parse_manifest,
    plan_bootstrap,
    plan_cleanup,
    plan_range_commit,
    range_marker,
    records_by_avro,
)
from kbqe_dagster.core.protocol.offsets import OffsetRange, recover

NOW = datetime(2024, 9, 13, 12, 0, tzinfo=UTC)
RNG = OffsetRange("com.acme.events", 2, 100, 200)


def commit_of(*tables_and_schemas: tuple[str, int], records: int = 10):
    staged = [(avro_file_name(RNG, "sales", t, s), records) for t, s in tables_and_schemas]
    return plan_range_commit(RNG, staged, dead_letters=1, skipped=2, created_at=NOW)


def test_every_file_of_a_range_carries_the_range_bounds() -> None:
    commit = commit_of(("orders", 5))
    assert commit.manifest.files[0].avro == "com.acme.events.2.sales.orders.5.100.avro"
    # The planned end, not the last message seen: done files tile the offset space.
    assert [d.name for d in commit.done_files] == ["com.acme.events.2.sales.orders.5.100.199.done"]


def test_all_done_files_of_a_range_share_one_manifest_of_the_whole_range() -> None:
    commit = commit_of(("orders", 5), ("orders", 6), ("refunds", 5))
    assert len(commit.done_files) == 3
    manifest = parse_manifest(commit.content, commit.done_files[1].name)
    assert manifest == commit.manifest
    assert [f.done for f in manifest.files] == [d.name for d in commit.done_files]
    doc = json.loads(commit.content)
    assert (doc["kbqe_manifest"], doc["first"], doc["last"]) == (1, 100, 199)
    assert (doc["dead_letters"], doc["skipped"], doc["created_at"]) == (
        1,
        2,
        "2024-09-13T12:00:00+00:00",
    )
    assert records_by_avro([manifest]) == {f.avro: 10 for f in manifest.files}


def test_a_range_without_staged_files_commits_through_a_range_marker() -> None:
    commit = plan_range_commit(RNG, [], skipped=100, created_at=NOW)
    (marker,) = commit.done_files
    assert marker == range_marker(RNG)
    assert marker.name == "com.acme.events.2._kbqe.range.0.100.199.done"
    assert is_marker(marker) and not is_bootstrap_marker(marker)
    assert parse_manifest(commit.content, marker.name).skipped == 100


def test_a_bootstrap_marker_commits_exactly_the_offset_before_the_start() -> None:
    commit = plan_bootstrap("orders", 0, 1000, created_at=NOW)
    (marker,) = commit.done_files
    assert marker.name == "orders.0._kbqe.bootstrap.0.999.999.done"
    assert is_bootstrap_marker(marker.name) and is_marker(marker.name)
    assert parse_manifest(commit.content, marker.name).files == ()


def test_bootstrapping_at_offset_zero_is_refused() -> None:
    with pytest.raises(ValueError, match=r"orders\[0\]"):
        bootstrap_marker("orders", 0, 0)


@pytest.mark.parametrize(
    "name", ["orders.0.sales.orders.1.0.9.done", "orders.0.sales.orders.1.0.avro", "README"]
)
def test_data_files_and_foreign_names_are_not_markers(name: str) -> None:
    assert not is_marker(name)


@pytest.mark.parametrize(
    "staged, message",
    [
        (
            [(avro_file_name(OffsetRange("com.acme.events", 2, 0, 100), "sales", "o", 1), 1)],
            "is not a file of range",
        ),
        ([(avro_file_name(RNG, "_kbqe", "o", 1), 1)], "reserved for markers"),
        ([(avro_file_name(RNG, "sales", "o", 1), 1)] * 2, "listed twice"),
    ],
)
def test_a_commit_refuses_files_that_are_not_its_own(staged, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan_range_commit(RNG, staged, created_at=NOW)


def test_an_empty_done_file_from_the_scala_project_has_no_manifest() -> None:
    assert parse_manifest(b"", "orders.0.sales.orders.1.0.9.done") is None


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x00\xff not json", "no readable manifest"),
        (b'{"something": "else"}', "no readable manifest"),
        (b'{"kbqe_manifest": 2}', "newer release"),
        (
            json.dumps({**json.loads(commit_of(("orders", 5)).content), "first": 0}).encode(),
            "not this file's range",
        ),
        (
            json.dumps(
                {**json.loads(commit_of(("orders", 5)).content), "files": [{"avro": 1}]}
            ).encode(),
            "no readable manifest",
        ),
    ],
)
def test_a_damaged_manifest_is_an_error_naming_the_done_file(content: bytes, message: str) -> None:
    name = commit_of(("orders", 5)).done_files[0].name
    with pytest.raises(StagingError, match=message) as caught:
        parse_manifest(content, name)
    assert name in str(caught.value)


def test_a_manifest_must_list_the_done_file_that_holds_it() -> None:
    content = commit_of(("orders", 5)).content
    with pytest.raises(StagingError, match="does not list this done file"):
        parse_manifest(content, "com.acme.events.2.sales.refunds.5.100.199.done")


def crash_after_first_done(commit) -> tuple[list[str], dict[str, bytes]]:
    """Listing of a range whose stage task died right after its first done file."""
    names = [f.avro for f in commit.manifest.files] + [commit.done_files[0].name]
    return names, {commit.done_files[0].name: commit.content}


def test_a_crash_between_done_files_rolls_forward_the_missing_ones() -> None:
    commit = commit_of(("orders", 5), ("orders", 6), ("refunds", 5))
    names, contents = crash_after_first_done(commit)
    assert manifests_needed(names) == (commit.done_files[0].name,)
    cleanup = plan_cleanup(names, contents)
    assert cleanup.delete_avro == ()
    assert cleanup.create_done == tuple((d.name, commit.content) for d in commit.done_files[1:])


def test_roll_forward_skips_files_already_loaded_and_deleted() -> None:
    commit = commit_of(("orders", 5), ("refunds", 5))
    names, contents = crash_after_first_done(commit)
    names.remove(commit.manifest.files[1].avro)
    assert plan_cleanup(names, contents).create_done == ()


def test_avro_files_of_a_range_that_never_committed_are_orphans() -> None:
    commit = commit_of(("orders", 5), ("orders", 6))
    names = [f.avro for f in commit.manifest.files] + ["orders.0.sales.orders.1.0.9.done"]
    assert manifests_needed(names) == ()
    cleanup = plan_cleanup(names, {})
    assert cleanup.delete_avro == tuple(f.avro for f in commit.manifest.files)
    assert cleanup.orphan_count == 2 and cleanup.create_done == ()


def test_two_schema_ids_in_one_committed_range_delete_nothing() -> None:
    commit = commit_of(("orders", 5), ("orders", 6))
    names = [f.avro for f in commit.manifest.files] + [d.name for d in commit.done_files]
    cleanup = plan_cleanup(names, {})
    assert cleanup.delete_avro == () and cleanup.create_done == ()


def test_an_avro_file_the_manifest_does_not_list_is_an_orphan() -> None:
    commit = commit_of(("orders", 5))
    stray = avro_file_name(RNG, "sales", "orders", 9).name  # from an attempt that crashed
    names = [commit.manifest.files[0].avro, stray, commit.done_files[0].name]
    cleanup = plan_cleanup(names, {commit.done_files[0].name: commit.content})
    assert cleanup.delete_avro == (stray,)


def test_an_empty_legacy_done_file_commits_only_its_own_avro_file() -> None:
    names = [
        "orders.0.sales.orders.1.0.avro",
        "orders.0.sales.orders.1.0.99.done",
        "orders.0.sales.orders.2.0.avro",
    ]
    cleanup = plan_cleanup(names, {"orders.0.sales.orders.1.0.99.done": b""})
    assert cleanup.delete_avro == ("orders.0.sales.orders.2.0.avro",)


def test_cleanup_needs_the_manifests_it_asked_for() -> None:
    commit = commit_of(("orders", 5), ("orders", 6))
    names, _ = crash_after_first_done(commit)
    with pytest.raises(StagingError, match=commit.done_files[0].name):
        plan_cleanup(names, {})


def test_a_rolled_forward_range_recovers_like_a_fully_committed_one() -> None:
    commit = commit_of(("orders", 5), ("refunds", 5))
    names, contents = crash_after_first_done(commit)
    cleanup = plan_cleanup(names, contents)
    after = names + [name for name, _ in cleanup.create_done]
    chain = recover(after)[("com.acme.events", 2)]
    assert chain.resume_offset == 200
    assert [d.name for d in chain.chain[0].done] == sorted(d.name for d in commit.done_files)


def test_a_damaged_manifest_stops_cleanup_naming_the_undecidable_avro_file() -> None:
    commit = commit_of(("orders", 5), ("orders", 6))
    names, _ = crash_after_first_done(commit)
    with pytest.raises(StagingError, match="only this manifest says") as caught:
        plan_cleanup(names, {commit.done_files[0].name: b"{truncated"})
    assert commit.manifest.files[1].avro in str(caught.value)


def test_manifest_encoding_is_deterministic() -> None:
    first, second = commit_of(("orders", 5)), commit_of(("orders", 5))
    assert first.content == second.content
    assert isinstance(first.manifest, Manifest) and first.manifest.records == 10


def test_the_manifest_carries_records_per_event_date_and_reads_them_back() -> None:
    avro = avro_file_name(RNG, "sales", "orders", 5)
    commit = plan_range_commit(
        RNG,
        [(avro, 12)],
        created_at=NOW,
        days={avro.name: {"2024-09-14": 5, "2024-09-13": 7}},
    )
    doc = json.loads(commit.content)
    assert doc["files"][0]["days"] == {"2024-09-13": 7, "2024-09-14": 5}
    parsed = parse_manifest(commit.content, commit.done_files[0].name)
    assert parsed is not None and parsed.files[0].days == (("2024-09-13", 7), ("2024-09-14", 5))


def test_a_manifest_without_days_stays_as_it_was() -> None:
    commit = commit_of(("orders", 5))
    assert "days" not in json.loads(commit.content)["files"][0]
    assert parse_manifest(commit.content, commit.done_files[0].name).files[0].days == ()


def test_the_manifest_pins_the_version_of_each_uploaded_avro_object() -> None:
    orders, refunds = (avro_file_name(RNG, "sales", t, 5) for t in ("orders", "refunds"))
    commit = plan_range_commit(
        RNG,
        [(orders, 3), (refunds, 4)],
        created_at=NOW,
        versions={orders.name: "1700000000000001", refunds.name: "1700000000000002"},
    )
    doc = json.loads(commit.content)
    assert [f["version"] for f in doc["files"]] == ["1700000000000001", "1700000000000002"]
    parsed = parse_manifest(commit.content, commit.done_files[1].name)
    assert parsed is not None
    assert {f.avro: f.version for f in parsed.files} == {
        orders.name: "1700000000000001",
        refunds.name: "1700000000000002",
    }


def test_a_manifest_written_before_versions_pins_nothing() -> None:
    commit = commit_of(("orders", 5))
    assert "version" not in json.loads(commit.content)["files"][0]
    assert parse_manifest(commit.content, commit.done_files[0].name).files[0].version is None


def test_a_version_that_is_not_a_string_is_a_damaged_manifest() -> None:
    commit = commit_of(("orders", 5))
    doc = json.loads(commit.content)
    doc["files"][0]["version"] = 17
    with pytest.raises(StagingError, match="no readable manifest"):
        parse_manifest(json.dumps(doc).encode(), commit.done_files[0].name)


@pytest.mark.parametrize(
    ("pinned", "current", "loads"),
    [
        ("gen-1", "gen-1", True),  # the object the commit pinned
        ("gen-1", "gen-2", False),  # re-created under the name after the load: a leftover
        ("gen-1", None, False),  # a store that cannot say is never trusted with a pin
        (None, "gen-2", True),  # Scala-era and pre-pin commits load by name, as before
        (None, None, True),
    ],
)
def test_only_the_pinned_version_of_a_committed_name_loads(pinned, current, loads) -> None:
    assert is_pinned(pinned, current) is loads


def test_the_manifest_records_the_kafka_time_its_range_reached() -> None:
    commit = plan_range_commit(RNG, [], created_at=NOW, kafka_ts_max=1_726_238_205_123)
    assert json.loads(commit.content)["kafka_ts_max"] == 1_726_238_205_123
    parsed = parse_manifest(commit.content, commit.done_files[0].name)
    assert parsed is not None and parsed.kafka_ts_max == 1_726_238_205_123


def test_a_manifest_without_the_kafka_time_stays_as_it_was_and_still_parses() -> None:
    commit = commit_of(("orders", 5))
    assert "kafka_ts_max" not in json.loads(commit.content)
    assert parse_manifest(commit.content, commit.done_files[0].name).kafka_ts_max is None
