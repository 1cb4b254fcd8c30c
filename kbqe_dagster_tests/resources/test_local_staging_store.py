"""The local staging store keeps the same promises as GCS: whole files, create-only commits."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from kbqe_dagster.core.errors import CommitConflictError, StagingError
from kbqe_dagster.resources.staging_store import StagingLocation


@pytest.fixture
def store(tmp_path: Path):
    return StagingLocation(str(tmp_path / "staging")).open()


def test_create_only_commits_once_and_refuses_a_different_second_writer(store) -> None:
    store.create_only("t.0.d.x.1.0.9.done", b"manifest-a")
    with pytest.raises(CommitConflictError, match="t.0.d.x.1.0.9.done"):
        store.create_only("t.0.d.x.1.0.9.done", b"manifest-b")
    assert store.read_bytes("t.0.d.x.1.0.9.done") == b"manifest-a"


def test_create_only_of_identical_content_is_an_idempotent_retry(store) -> None:
    store.create_only("t.0.d.x.1.0.9.done", b"same")
    store.create_only("t.0.d.x.1.0.9.done", b"same")
    assert [f.name for f in store.list()] == ["t.0.d.x.1.0.9.done"]


def test_listing_is_by_prefix_and_hides_temp_files(store, tmp_path: Path) -> None:
    for name in ["a.0.d.x.1.0.avro", "a.1.d.x.1.0.avro", "b.0.d.x.1.0.avro"]:
        store.put_bytes(name, b"x" * 3)
    (Path(store.root) / ".tmp-leftover").write_bytes(b"partial")
    assert [f.name for f in store.list("a.")] == ["a.0.d.x.1.0.avro", "a.1.d.x.1.0.avro"]
    assert {f.size for f in store.list()} == {3}


def test_put_file_replaces_whole_files_and_delete_reports_what_it_did(store, tmp_path) -> None:
    src = tmp_path / "local.avro"
    src.write_bytes(b"avro-bytes")
    store.put_file(src, "t.0.d.x.1.0.avro")
    assert store.read_bytes("t.0.d.x.1.0.avro") == b"avro-bytes"
    assert store.delete("t.0.d.x.1.0.avro") is True
    assert store.delete("t.0.d.x.1.0.avro") is False


def test_nested_state_files_are_listed_under_their_own_prefix(store) -> None:
    store.put_bytes("_kbqe/load_state.json", b"{}")
    assert [f.name for f in store.list("_kbqe/")] == ["_kbqe/load_state.json"]
    assert store.list() == []


def test_missing_file_and_escaping_names_are_clear_errors(store) -> None:
    with pytest.raises(StagingError, match="does not exist"):
        store.read_bytes("nope.avro")
    with pytest.raises(StagingError, match="escapes"):
        store.put_bytes("../outside", b"")


def test_gcs_location_parses_bucket_and_prefix_and_pickles_without_a_client() -> None:
    location = StagingLocation("gs://my-bucket/some/prefix/")
    assert location.bucket_and_prefix() == ("my-bucket", "some/prefix/")
    store = location.open()
    assert store.uri("f.avro") == "gs://my-bucket/some/prefix/f.avro"
    assert pickle.loads(pickle.dumps(store)).uri("f.avro") == "gs://my-bucket/some/prefix/f.avro"


def test_read_head_returns_at_most_the_first_bytes(store) -> None:
    store.put_bytes("t.0.d.x.1.0.avro", b"Obj\x01header-and-more")
    assert store.read_head("t.0.d.x.1.0.avro", 4) == b"Obj\x01"
    assert store.read_head("t.0.d.x.1.0.avro", 1000) == b"Obj\x01header-and-more"
    with pytest.raises(StagingError, match="does not exist"):
        store.read_head("missing.avro", 4)


# --- pinned versions (DESIGN.md §3: the commit pins the exact objects it commits) ----------
def test_create_only_file_returns_the_version_the_listing_shows(store, tmp_path) -> None:
    src = tmp_path / "local.avro"
    src.write_bytes(b"avro-bytes")
    version = store.create_only_file(src, "t.0.d.x.1.0.avro")
    assert [(f.name, f.version) for f in store.list()] == [("t.0.d.x.1.0.avro", version)]
    assert store.read_bytes("t.0.d.x.1.0.avro") == b"avro-bytes"


def test_create_only_file_refuses_an_existing_object_with_other_content(store, tmp_path) -> None:
    first, second = tmp_path / "a.avro", tmp_path / "b.avro"
    first.write_bytes(b"writer-a")
    second.write_bytes(b"writer-b")
    version = store.create_only_file(first, "t.0.d.x.1.0.avro")
    with pytest.raises(CommitConflictError, match=r"t\.0\.d\.x\.1\.0\.avro"):
        store.create_only_file(second, "t.0.d.x.1.0.avro")
    assert store.read_bytes("t.0.d.x.1.0.avro") == b"writer-a"
    assert store.create_only_file(first, "t.0.d.x.1.0.avro") == version  # a repeated upload


def loaded_then_uploaded_again(store, tmp_path) -> tuple[str, str]:
    """What a late zombie does to a loaded file: the same bytes under the same name (same
    size, maybe the same inode) after the load deleted it. Returns (old, new) versions."""
    src = tmp_path / "local.avro"
    src.write_bytes(b"avro-bytes")
    loaded = store.create_only_file(src, "t.0.d.x.1.0.avro")
    store.delete("t.0.d.x.1.0.avro")
    return loaded, store.create_only_file(src, "t.0.d.x.1.0.avro")


def test_the_same_bytes_created_again_after_a_delete_are_another_version(store, tmp_path) -> None:
    loaded, again = loaded_then_uploaded_again(store, tmp_path)
    assert again != loaded


def test_delete_version_deletes_only_that_exact_object(store, tmp_path) -> None:
    old, new = loaded_then_uploaded_again(store, tmp_path)
    assert store.delete_version("t.0.d.x.1.0.avro", old) is False
    assert [f.version for f in store.list()] == [new]
    assert store.delete_version("t.0.d.x.1.0.avro", new) is True
    assert store.list() == []
    assert store.delete_version("t.0.d.x.1.0.avro", new) is False


def test_a_file_on_the_same_file_system_is_linked_in_not_copied(store, tmp_path) -> None:
    """A stage task's file is written once: the staged file is the task's own (one inode)."""
    src = tmp_path / "local.avro"
    src.write_bytes(b"avro-bytes")
    store.create_only_file(src, "t.0.d.x.1.0.avro")
    assert (Path(store.root) / "t.0.d.x.1.0.avro").stat().st_ino == src.stat().st_ino


def test_a_file_on_another_file_system_is_copied_in_whole(store, tmp_path, monkeypatch) -> None:
    import errno
    import os

    real_link = os.link

    def link(source, target):
        if Path(source).parent == tmp_path:  # the task's file: "another file system"
            raise OSError(errno.EXDEV, "Invalid cross-device link")
        real_link(source, target)

    monkeypatch.setattr(os, "link", link)
    src = tmp_path / "local.avro"
    src.write_bytes(b"avro-bytes")
    version = store.create_only_file(src, "t.0.d.x.1.0.avro")

    staged = Path(store.root) / "t.0.d.x.1.0.avro"
    assert staged.read_bytes() == b"avro-bytes" and staged.stat().st_ino != src.stat().st_ino
    assert [(f.name, f.version) for f in store.list()] == [("t.0.d.x.1.0.avro", version)]
    assert not list(Path(store.root).glob(".tmp-*"))
