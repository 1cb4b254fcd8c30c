"""The staging area: a flat namespace of files under one location, on GCS or a local
directory, with the few operations the staging protocol needs (DESIGN.md §3).

Every store offers the same guarantees, so the stage and load code never branches on where
the files live:
- ``put_file`` makes a whole file visible at once (GCS object upload; local ``os.replace``);
- ``create_only`` is the commit primitive: it creates a file only if no file of that name
  exists (GCS ``if_generation_match=0``; locally ``os.link`` of a fully written temp file,
  which is atomic and exclusive). A second writer gets :class:`CommitConflictError`;
- ``create_only_file`` uploads a data file the same way and returns its **version**: the
  exact identity of the object just created (GCS generation; locally inode, size and
  nanosecond mtime). Listings carry each file's current version, so the load step can load
  only the objects a commit pinned (DESIGN.md §3) and ``delete_version`` removes exactly
  one object, never a newer one under the same name;
- listing is by name prefix, never a walk of everything when a prefix is known.

Stores are plain, picklable objects built from a :class:`StagingLocation`, so Spark tasks
rebuild their own client on the executor instead of shipping one.
"""

from __future__ import annotations

import datetime as dt
import errno
import filecmp
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Protocol

from kbqe_dagster.core.errors import CommitConflictError, StagingError

log = logging.getLogger(__name__)

# Resumable uploads in chunks keep memory bounded for large avro files on GCS (a chunk is read
# into memory whole). 16 MiB sends a stage task's typical file (10-16 MB per table and range
# at the default range size) in one request instead of two: a range's commit to fake GCS took
# 0.35 s instead of 0.5 s (bench/bench_stage.py), for at most 8 MiB more per upload.
GCS_CHUNK_SIZE = 16 * 1024 * 1024


@dataclass(frozen=True)
class StoredFile:
    name: str
    size: int
    updated: dt.datetime
    version: str | None = None  # the object's exact identity (see module docstring)


@dataclass(frozen=True)
class StagingLocation:
    """Where the staging files live: ``gs://bucket/prefix`` or a local directory path.

    ``gcs_endpoint``/``gcs_project`` point the GCS client at an emulator (local stack);
    in production the endpoint is ``None`` and the client is dagster-gcp's ``GCSResource``'s,
    with ``gcp_credentials`` (resources/gcp_credentials.py; ``None``: Application Default
    Credentials).
    """

    url: str
    gcs_endpoint: str | None = None
    gcs_project: str | None = None
    gcp_credentials: str | None = field(default=None, repr=False)

    @property
    def is_gcs(self) -> bool:
        return self.url.startswith("gs://")

    def bucket_and_prefix(self) -> tuple[str, str]:
        if not self.is_gcs:
            raise StagingError(f"{self.url} is not a gs:// location")
        rest = self.url[len("gs://") :]
        bucket, _, prefix = rest.partition("/")
        if not bucket:
            raise StagingError(f"staging location {self.url!r} names no bucket")
        prefix = prefix.strip("/")
        return bucket, (prefix + "/" if prefix else "")

    def open(self) -> StagingStore:
        if self.is_gcs:
            return GcsStagingStore(self)
        return LocalStagingStore(Path(self.url))


class StagingStore(Protocol):
    location: StagingLocation

    def list(self, prefix: str = "") -> list[StoredFile]: ...

    def read_bytes(self, name: str) -> bytes: ...

    def read_head(self, name: str, size: int) -> bytes: ...

    def put_file(self, local_path: Path, name: str) -> None: ...

    def put_bytes(self, name: str, data: bytes) -> None: ...

    def create_only(self, name: str, data: bytes) -> None: ...

    def create_only_file(self, local_path: Path, name: str) -> str: ...

    def delete(self, name: str) -> bool: ...

    def delete_version(self, name: str, version: str) -> bool: ...

    def uri(self, name: str) -> str: ...


class LocalStagingStore:
    """Staging files in one local directory (tests, single-machine installs)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.location = StagingLocation(str(self.root))

    def _path(self, name: str) -> Path:
        if name.startswith("/") or ".." in Path(name).parts:
            raise StagingError(f"staging file name {name!r} escapes the staging directory")
        return self.root / name

    def list(self, prefix: str = "") -> list[StoredFile]:
        if not self.root.exists():
            return []
        base = self.root / prefix.rpartition("/")[0] if "/" in prefix else self.root
        if not base.is_dir():
            return []
        rel = base.relative_to(self.root)
        out = []
        for entry in os.scandir(base):
            name = entry.name if str(rel) == "." else f"{rel}/{entry.name}"
            if entry.is_file() and name.startswith(prefix) and not entry.name.startswith(".tmp-"):
                st = entry.stat()
                out.append(StoredFile(name, st.st_size, _mtime(st.st_mtime), _local_version(st)))
        return sorted(out, key=lambda f: f.name)

    def read_bytes(self, name: str) -> bytes:
        try:
            return self._path(name).read_bytes()
        except FileNotFoundError as e:
            raise StagingError(f"staging file {self.uri(name)} does not exist") from e

    def read_head(self, name: str, size: int) -> bytes:
        """The first ``size`` bytes (fewer when the file is shorter)."""
        try:
            with open(self._path(name), "rb") as handle:
                return handle.read(size)
        except FileNotFoundError as e:
            raise StagingError(f"staging file {self.uri(name)} does not exist") from e

    def put_file(self, local_path: Path, name: str) -> None:
        target = self._path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._temp_copy(_copy_of(local_path), target.parent)
        os.replace(tmp, target)

    def put_bytes(self, name: str, data: bytes) -> None:
        target = self._path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._temp_copy(lambda out: out.write(data), target.parent)
        os.replace(tmp, target)

    def create_only(self, name: str, data: bytes) -> None:
        target = self._path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = self._temp_copy(lambda out: out.write(data), target.parent)
        try:
            os.link(tmp, target)  # atomic and exclusive: the file appears whole or not at all
        except FileExistsError as e:
            if target.read_bytes() != data:
                raise CommitConflictError(
                    f"{self.uri(name)} already exists: another writer committed it first"
                ) from e
        finally:
            os.unlink(tmp)

    def create_only_file(self, local_path: Path, name: str) -> str:
        """Create ``name`` from ``local_path`` only if no file of that name exists; returns
        the new file's version. An existing file with other content (another writer's
        upload, or a leftover) raises :class:`CommitConflictError`; with the same bytes it is
        this upload, repeated, and its version is returned.

        On the same file system ``local_path`` itself becomes the staged file (a hard link,
        after an fsync): a stage task's files are written once, not written and copied (in
        ``make bench`` the copy was a tenth of a range's CPU). The caller must not change
        ``local_path`` afterwards. Elsewhere the file is copied in first."""
        target = self._path(name)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            _link_in(local_path, target)
        except FileExistsError as e:
            if not filecmp.cmp(target, local_path, shallow=False):
                raise CommitConflictError(
                    f"{self.uri(name)} already exists with other content: another writer "
                    "uploaded it"
                ) from e
        return _local_version(target.stat())

    def delete(self, name: str) -> bool:
        try:
            self._path(name).unlink()
            return True
        except FileNotFoundError:
            return False

    def delete_version(self, name: str, version: str) -> bool:
        """Delete ``name`` only while it is still the object of ``version``."""
        path = self._path(name)
        try:
            if _local_version(path.stat()) != version:
                return False
            path.unlink()
            return True
        except FileNotFoundError:
            return False

    def uri(self, name: str) -> str:
        return str(self._path(name))

    @staticmethod
    def _temp_copy(write: Callable[[BinaryIO], object], directory: Path) -> str:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
        with os.fdopen(fd, "wb") as out:
            write(out)
            out.flush()
            os.fsync(out.fileno())
        return tmp


def _link_in(local_path: Path, target: Path) -> None:
    """Make ``local_path`` durable and appear as ``target``, atomically and exclusively
    (``FileExistsError`` when ``target`` exists): a hard link, or on another file system a
    fully written temporary copy, linked. The new file then gets a fresh modification time,
    so a file created again from the same source after a delete is another version (nobody
    pins a file before the commit that follows, and its version is read after this)."""
    fd = os.open(local_path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    try:
        os.link(local_path, target)
    except OSError as e:
        if e.errno != errno.EXDEV:
            raise
        tmp = LocalStagingStore._temp_copy(_copy_of(local_path), target.parent)
        try:
            os.link(tmp, target)
        finally:
            os.unlink(tmp)
    now = time.time_ns()
    os.utime(target, ns=(now, now))


def _copy_of(local_path: Path) -> Callable[[BinaryIO], None]:
    """Writes ``local_path`` into a file in 1 MiB pieces: a staged file can be far larger
    than a stage task's memory should grow (bench/bench_stage.py --scale10)."""

    def write(out: BinaryIO) -> None:
        with open(local_path, "rb") as source:
            shutil.copyfileobj(source, out, 1 << 20)

    return write


def gcs_client(project: str | None, gcp_credentials: str | None) -> Any:
    """Real GCS's client: dagster-gcp's ``GCSResource`` (Application Default Credentials), or
    with a service account key, the same client given that key's credentials (GCSResource has
    no ``gcp_credentials`` of its own; the bigquery resource's key serves both)."""
    from kbqe_dagster.resources.gcp_credentials import credentials_from_base64

    credentials = credentials_from_base64(gcp_credentials)
    if credentials is None:
        import dagster_gcp

        return dagster_gcp.GCSResource(project=project).get_client()
    from google.cloud import storage

    return storage.Client(project=project, credentials=credentials)


class GcsStagingStore:
    """Staging files under ``gs://bucket/prefix/``; the client is built lazily per process."""

    def __init__(self, location: StagingLocation) -> None:
        self.location = location
        self.bucket_name, self.prefix = location.bucket_and_prefix()
        self._bucket = None

    def __getstate__(self) -> dict:
        return {"location": self.location}

    def __setstate__(self, state: dict) -> None:
        self.__init__(state["location"])

    @property
    def bucket(self):
        if self._bucket is None:
            from google.cloud import storage

            if self.location.gcs_endpoint:
                from google.auth.credentials import AnonymousCredentials

                client = storage.Client(
                    project=self.location.gcs_project or "local",
                    credentials=AnonymousCredentials(),
                    client_options={"api_endpoint": self.location.gcs_endpoint},
                )
            else:
                client = gcs_client(self.location.gcs_project, self.location.gcp_credentials)
            self._bucket = client.bucket(self.bucket_name)
        return self._bucket

    def _blob(self, name: str):
        blob = self.bucket.blob(self.prefix + name)
        blob.chunk_size = GCS_CHUNK_SIZE
        return blob

    def list(self, prefix: str = "") -> list[StoredFile]:
        # The delimiter keeps listings flat: the state file under _kbqe/ is not a staging file.
        blobs: Iterator = self.bucket.client.list_blobs(
            self.bucket_name,
            prefix=self.prefix + prefix,
            delimiter="/" if "/" not in prefix else None,
        )
        cut = len(self.prefix)
        return sorted(
            (
                StoredFile(
                    b.name[cut:],
                    b.size or 0,
                    b.updated,
                    str(b.generation) if b.generation is not None else None,
                )
                for b in blobs
            ),
            key=lambda f: f.name,
        )

    def read_bytes(self, name: str) -> bytes:
        from google.api_core.exceptions import NotFound

        try:
            # A plain blob (no chunk_size): ranged downloads of an empty object fail against
            # fake-gcs-server, and the original project's done files are empty.
            return self.bucket.blob(self.prefix + name).download_as_bytes()
        except NotFound as e:
            raise StagingError(f"staging file {self.uri(name)} does not exist") from e

    def read_head(self, name: str, size: int) -> bytes:
        """The first ``size`` bytes, with one ranged read (fewer when the file is shorter)."""
        from google.api_core.exceptions import NotFound, RequestRangeNotSatisfiable

        try:
            return self.bucket.blob(self.prefix + name).download_as_bytes(start=0, end=size - 1)
        except RequestRangeNotSatisfiable:
            return b""  # 416: no byte at offset 0, the object is empty
        except NotFound as e:
            raise StagingError(f"staging file {self.uri(name)} does not exist") from e

    def put_file(self, local_path: Path, name: str) -> None:
        self._blob(name).upload_from_filename(str(local_path), content_type="application/avro")

    def put_bytes(self, name: str, data: bytes) -> None:
        self._blob(name).upload_from_string(data)

    def create_only(self, name: str, data: bytes) -> None:
        from google.api_core.exceptions import PreconditionFailed

        try:
            self._blob(name).upload_from_string(data, if_generation_match=0)
        except PreconditionFailed as e:
            # A retried request whose first attempt succeeded also lands here: the same
            # content means the commit is ours; different content means another writer's.
            if self.read_bytes(name) != data:
                raise CommitConflictError(
                    f"{self.uri(name)} already exists: another writer committed it first"
                ) from e

    def create_only_file(self, local_path: Path, name: str) -> str:
        """Upload ``local_path`` as ``name`` only if no object of that name exists
        (``if_generation_match=0``); returns the new object's generation. An existing object
        with other content raises :class:`CommitConflictError`; with the same bytes it is
        this upload (a retried request whose first attempt succeeded)."""
        from google.api_core.exceptions import PreconditionFailed

        blob = self._blob(name)
        try:
            blob.upload_from_filename(
                str(local_path), content_type="application/avro", if_generation_match=0
            )
        except PreconditionFailed as e:
            existing = self.bucket.get_blob(self.prefix + name)
            if existing is None or existing.download_as_bytes() != Path(local_path).read_bytes():
                raise CommitConflictError(
                    f"{self.uri(name)} already exists with other content: another writer "
                    "uploaded it"
                ) from e
            return str(existing.generation)
        if blob.generation is None:
            raise StagingError(f"{self.uri(name)}: the upload returned no object generation")
        return str(blob.generation)

    def delete(self, name: str) -> bool:
        from google.api_core.exceptions import NotFound

        try:
            self._blob(name).delete()
            return True
        except NotFound:
            return False

    def delete_version(self, name: str, version: str) -> bool:
        """Delete ``name`` only while its generation is ``version`` (``if_generation_match``)."""
        from google.api_core.exceptions import NotFound, PreconditionFailed

        # The read first only serves fake-gcs-server, which ignores preconditions on DELETE
        # (test_emulator_gap_delete_ignores_if_generation_match); GCS enforces the guard.
        current = self.bucket.get_blob(self.prefix + name)
        if current is None or str(current.generation) != version:
            return False
        try:
            self.bucket.blob(self.prefix + name).delete(if_generation_match=int(version))
            return True
        except (NotFound, PreconditionFailed):
            return False

    def uri(self, name: str) -> str:
        return f"gs://{self.bucket_name}/{self.prefix}{name}"


def _local_version(st: os.stat_result) -> str:
    """A local file's identity: inode, size and nanosecond mtime. A file deleted and created
    again under its name (even with equal bytes, even on a reused inode) gets a new mtime."""
    return f"{st.st_ino}-{st.st_size}-{st.st_mtime_ns}"


def _mtime(ts: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(ts, tz=dt.UTC)
