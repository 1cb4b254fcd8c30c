"""A stage task's commit pins the exact avro objects it uploaded (DESIGN.md §3), and a task
that finds one of its range's names already taken by another writer commits nothing.

Driven through ``RangeStager`` with the bad-input corpus's fake messages and fake registry,
on a local staging directory."""

from __future__ import annotations

from kbqe_dagster.core.protocol.commit import parse_manifest
from kbqe_dagster.core.protocol.naming import DoneFileName, parse_name
from kbqe_dagster_tests.support.corpus_stream import STREAM, run_stager


def test_every_done_file_pins_the_version_the_store_gave_each_avro_object(tmp_path) -> None:
    result, store = run_stager(tmp_path, "dead_letter", STREAM)

    listed = {f.name: f.version for f in store.list()}
    done = [n for n in listed if isinstance(parse_name(n), DoneFileName)]
    assert result.conflict is False and len(done) == len(result.files) >= 2
    for name in done:
        manifest = parse_manifest(store.read_bytes(name), name)
        assert manifest is not None
        assert {f.avro: f.version for f in manifest.files} == {
            avro: listed[avro] for avro, _ in result.files
        }


def test_a_writer_that_finds_an_avro_name_taken_stops_before_its_commit_point(tmp_path) -> None:
    for attempt in ("first", "second"):
        (tmp_path / attempt).mkdir()
    first, _ = run_stager(tmp_path / "first", "dead_letter", STREAM)
    taken = first.files[-1][0]
    staging = tmp_path / "second" / "staging"
    staging.mkdir()
    (staging / taken).write_bytes(b"another writer's upload")

    result, store = run_stager(tmp_path / "second", "dead_letter", STREAM)

    assert (result.conflict, result.committed_last) == (True, None)
    names = [f.name for f in store.list()]
    assert not [n for n in names if isinstance(parse_name(n), DoneFileName)]
    assert store.read_bytes(taken) == b"another writer's upload"
