"""The BigQuery emulator of the local stack: ``bqemulator`` (PyPI, DuckDB-backed), its
offline DuckDB extensions, and its view of the fake GCS bucket.

Extensions, offline. At start-up the emulator runs ``INSTALL spatial; LOAD spatial`` (fatal
when it fails: GEOGRAPHY support) and ``INSTALL avro; LOAD avro`` (best effort: without it
every AVRO load job answers "unsupported"). ``INSTALL`` downloads from the DuckDB extension
repository, which this machine cannot reach. The same binaries are on PyPI as
``duckdb-extension-<name>`` (one release per DuckDB version; each wheel holds
``duckdb_extension_<name>/extensions/v<duckdb version>/<name>.duckdb_extension``).
:meth:`BigQueryEmulatorService.install` installs them with DuckDB's own
``INSTALL '<file>'`` into an extension directory under the stack home; an ``INSTALL <name>``
of an extension already present there is a no-op, so the emulator then starts offline.
``json``, ``parquet`` and ``icu`` are statically linked into the duckdb 1.5.5 wheel and
need nothing. bqemulator opens DuckDB without a config, so DuckDB looks in
``$HOME/.duckdb/extensions/v<version>/<platform>/``; we give the emulator process
``HOME=run/bigquery/duckdb-home`` (there is no environment variable for
``extension_directory``) rather than writing into the developer's real home.
``spatial`` is NOT in the project's ``local`` extras yet: ``pip install
duckdb-extension-spatial==<duckdb version>`` (1.5.5 exists on PyPI); install() names it.

gs:// URIs. bqemulator does not talk to a GCS API: it maps ``gs://b/o`` to
``$BQEMU_GCS_LOCAL_ROOT/b/o``. We point that at fake-gcs-server's filesystem root
(:attr:`GcsService.filesystem_root`), where object ``o`` of bucket ``b`` is that same file.

Storage. Persistent: the DuckDB file ``run/bigquery/data/duckdb/bqemulator.duckdb`` survives
restarts, like the fake GCS bucket does, so the staging area, the load state and the tables
stay consistent with one another across ``kbqe stack down``/``up``. Delete
``run/bigquery/data`` for an empty emulator. An emulator killed in the middle of a write can
leave a write-ahead log that DuckDB no longer replays ("Failure while replaying WAL file":
the emulator then exits at every start); :meth:`BigQueryEmulatorService.up` moves that
database aside (kept, for a look) and starts an empty one, with a warning naming both.

Behaviour the load step must not rely on locally (pinned by
``kbqe_dagster_tests/localstack/test_bigquery_contract.py``; see DESIGN.md §7): a duplicate
job id re-runs the job (rows appended twice) instead of answering 409; ALLOW_FIELD_ADDITION
is ignored and a file with more or fewer columns than the table fails; Avro columns are
matched by position; an Avro load creates a missing table only from an explicit ``schema``
in the job config, and without its time partitioning; REQUIRED is not enforced; load
statistics carry ``outputRows`` only, and it is the destination's row count after the load,
not the rows this job appended; an Avro map (read as a DuckDB MAP) cannot be inserted into
BigQuery's REPEATED RECORD of key/value. ``resources/bigquery/emulator.py`` rebuilds BigQuery's
behaviour over these gaps for the load step.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack.base import HOST, LocalService, ServiceStatus, spawn
from kbqe_dagster.localstack.endpoints import LOCAL_PROJECT, LocalEndpoints
from kbqe_dagster.localstack.gcs import GcsService
from kbqe_dagster.localstack.probe import request_json

log = logging.getLogger(__name__)

# Extensions the emulator INSTALLs at start-up (see the module docstring); json, parquet and
# icu are statically linked into the duckdb wheel.
REQUIRED_EXTENSIONS: tuple[str, ...] = ("spatial", "avro")


@dataclass(frozen=True)
class ExtensionFile:
    """One DuckDB extension binary as shipped by its PyPI package."""

    name: str
    path: Path

    @staticmethod
    def pip_package(name: str, duckdb_version: str) -> str:
        return f"duckdb-extension-{name.replace('_', '-')}=={duckdb_version}"


def duckdb_version() -> str:
    try:
        import duckdb
    except ImportError as exc:
        raise StackError(
            "BigQuery emulator: the 'duckdb' package is missing; run `pip install -e '.[local]'`."
        ) from exc
    return str(duckdb.__version__)


def find_extension_file(name: str, version: str) -> ExtensionFile:
    """The ``.duckdb_extension`` file of ``duckdb-extension-<name>`` for DuckDB ``version``,
    or a StackError naming the pip package to install."""
    package = ExtensionFile.pip_package(name, version)
    spec = importlib.util.find_spec(f"duckdb_extension_{name}")
    if spec is None or not spec.submodule_search_locations:
        raise StackError(
            f"BigQuery emulator: DuckDB extension '{name}' is not installed and cannot be "
            f"downloaded here; run `pip install '{package}'`."
        )
    package_dir = Path(next(iter(spec.submodule_search_locations)))
    path = package_dir / "extensions" / f"v{version}" / f"{name}.duckdb_extension"
    if not path.is_file():
        shipped = sorted(p.name for p in (package_dir / "extensions").glob("v*"))
        raise StackError(
            f"BigQuery emulator: DuckDB extension '{name}' for duckdb {version} not found at "
            f"{path} (the installed package ships {shipped or 'nothing'}); run "
            f"`pip install '{package}'` so its version matches duckdb's."
        )
    return ExtensionFile(name, path)


def install_extensions(extension_dir: Path, names: Sequence[str]) -> list[str]:
    """Install each extension into ``extension_dir`` from its PyPI package; returns the
    names newly installed. Idempotent: present extensions are left alone."""
    import duckdb

    version = duckdb_version()
    files = [find_extension_file(name, version) for name in names]  # fail before writing
    extension_dir.mkdir(parents=True, exist_ok=True)
    installed: list[str] = []
    con = duckdb.connect(
        ":memory:",
        config={
            "extension_directory": str(extension_dir),
            "autoinstall_known_extensions": False,
        },
    )
    try:
        present = {
            row[0]
            for row in con.execute(
                "SELECT extension_name FROM duckdb_extensions() WHERE installed"
            ).fetchall()
        }
        for ext in files:
            if ext.name in present:
                continue
            con.execute(f"INSTALL '{ext.path}'")
            installed.append(ext.name)
    finally:
        con.close()
    return installed


WAL_REPLAY_FAILURE = "Failure while replaying WAL file"
"""DuckDB's words when a database's write-ahead log cannot be replayed at open."""
WAL_LOG_LINES = 80
"""Lines at the end of the log searched for it (the emulator's start-up traceback)."""


class BigQueryEmulatorService(LocalService):
    """bqemulator's REST (and gRPC Storage API) server, persistent, offline extensions."""

    name = "bigquery"
    start_timeout = 90.0

    def __init__(
        self,
        home: Path | None = None,
        endpoints: LocalEndpoints | None = None,
        gcs_root: Path | None = None,
    ) -> None:
        super().__init__(home, endpoints)
        self._gcs_root = gcs_root or GcsService(self.dirs.home, self.endpoints).filesystem_root

    @property
    def endpoint(self) -> str:
        return self.endpoints.bigquery_url

    @property
    def ports(self) -> Sequence[int]:
        return (self.endpoints.bigquery_port, self.endpoints.bigquery_grpc_port)

    @property
    def project(self) -> str:
        return LOCAL_PROJECT

    @property
    def gcs_root(self) -> Path:
        """The directory ``gs://`` URIs are resolved under (fake-gcs-server's root)."""
        return self._gcs_root

    @property
    def duckdb_home(self) -> Path:
        """``HOME`` of the emulator process: DuckDB finds its extensions under it."""
        return self.dirs.run / "duckdb-home"

    @property
    def extension_dir(self) -> Path:
        return self.duckdb_home / ".duckdb" / "extensions"

    @property
    def database_dir(self) -> Path:
        return self.dirs.data / "duckdb"

    def up(self) -> ServiceStatus:
        """Start the emulator; a database whose write-ahead log no longer replays is moved
        aside and the emulator starts empty (module docstring)."""
        try:
            return super().up()
        except StackError:
            if not self._database_unreplayable():
                raise
        kept = self.database_dir.with_name(
            f"{self.database_dir.name}.unreplayable-{int(time.time())}"
        )
        self.database_dir.rename(kept)
        log.warning(
            "bigquery: the emulator's database no longer opens (its write-ahead log does "
            "not replay, see %s); moved it to %s and starting an empty one",
            self.dirs.log_file,
            kept,
        )
        return super().up()

    def _database_unreplayable(self) -> bool:
        if not self.dirs.log_file.exists() or not self.database_dir.exists():
            return False
        tail = self.dirs.log_file.read_text(errors="replace").splitlines()[-WAL_LOG_LINES:]
        return any(WAL_REPLAY_FAILURE in line for line in tail)

    def install(self) -> None:
        newly = install_extensions(self.extension_dir, REQUIRED_EXTENSIONS)
        if newly:
            log.info("installed DuckDB extensions %s into %s", newly, self.extension_dir)
        self.gcs_root.mkdir(parents=True, exist_ok=True)

    def launch(self) -> int:
        argv = [
            # bqemulator's own command line, a DuckDB cursor per worker thread against a
            # deadlock between a query and an append (bqemulator_threads.py).
            sys.executable,
            "-m",
            "kbqe_dagster.localstack.bqemulator_threads",
            "start",
            "--rest-host",
            HOST,
            "--rest-port",
            str(self.endpoints.bigquery_port),
            "--grpc-host",
            HOST,
            "--grpc-port",
            str(self.endpoints.bigquery_grpc_port),
            "--data-dir",
            str(self.database_dir),
            "--project",
            self.project,
            "--log-format",
            "console",
        ]
        env = {
            "HOME": str(self.duckdb_home),
            "BQEMU_GCS_LOCAL_ROOT": str(self.gcs_root),
            "BQEMU_UPLOAD_STAGING_DIR": str(self.dirs.data / "uploads"),
            "BQEMU_ENABLE_FORMAT_EXTENSIONS": "true",
        }
        return spawn(self.dirs, argv, env=env)

    def ready(self) -> bool:
        answer = request_json(
            "GET",
            f"{self.endpoint}/bigquery/v2/projects/{self.project}/datasets",
        )
        return (
            answer is not None
            and answer.status == 200
            and isinstance(answer.body, dict)
            and answer.body.get("kind") == "bigquery#datasetList"
        )
