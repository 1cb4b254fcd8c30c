"""What every local service shares: where its files live, starting a process in its own
session with a pid file, readiness checks with timeouts, and stopping exactly what we started.
"""

from __future__ import annotations

import logging
import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kbqe_dagster import processes
from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack.endpoints import LocalEndpoints, local_endpoints
from kbqe_dagster.packaged import checkout_root

log = logging.getLogger(__name__)

HOST = "127.0.0.1"


LOCAL_HOME_ENV = "KBQE_LOCAL_HOME"
USER_HOME_DIR = ".kbqe-local"


def stack_home() -> Path:
    """Where the stack keeps its downloads, data, logs and pid files: ``$KBQE_LOCAL_HOME``,
    else ``.kbqe-local`` in the checkout the package runs from (the repository root, as
    ``make`` and the tests use it), else, for an installed wheel, ``~/.kbqe-local``: one home
    per user whatever the working directory, and never inside site-packages."""
    explicit = os.environ.get(LOCAL_HOME_ENV)
    if explicit:
        return Path(explicit).resolve()
    checkout = checkout_root()
    return ((checkout or Path.home()) / USER_HOME_DIR).resolve()


@dataclass(frozen=True)
class ServiceDirs:
    """Where one service keeps its pid file, log and data; the shared download cache."""

    name: str
    home: Path

    @property
    def cache(self) -> Path:
        return self.home / "cache"

    @property
    def run(self) -> Path:
        return self.home / "run" / self.name

    @property
    def data(self) -> Path:
        return self.run / "data"

    @property
    def log_file(self) -> Path:
        return self.run / f"{self.name}.log"

    @property
    def pid_file(self) -> Path:
        return self.run / f"{self.name}.pid"

    def ensure(self) -> None:
        for d in (self.cache, self.run, self.data):
            d.mkdir(parents=True, exist_ok=True)


def require_command(command: str, how_to_fix: str) -> str:
    """The absolute path of ``command`` or a StackError saying how to install it."""
    path = shutil.which(command)
    if path is None:
        raise StackError(f"'{command}' was not found on PATH: {how_to_fix}")
    return path


def port_open(port: int, host: str = HOST, timeout: float = 0.5) -> bool:
    """True when something accepts TCP connections on host:port."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def require_free_port(port: int, service: str) -> None:
    if port_open(port):
        raise StackError(
            f"{service}: port {HOST}:{port} is already taken by another process. Stop it "
            f"(`ss -ltnp 'sport = :{port}'` shows which) or choose another port through "
            f"the KBQE_LOCAL_* environment variables."
        )


def wait_until(
    ready: Callable[[], bool],
    timeout: float,
    what: str,
    log_file: Path | None = None,
    alive: Callable[[], bool] | None = None,
) -> None:
    """Poll ``ready`` until it is true; a StackError naming ``what`` and the log otherwise."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if ready():
            return
        if alive is not None and not alive():
            raise StackError(f"{what} exited during start-up; see {log_file}{_tail(log_file)}")
        time.sleep(0.25)
    raise StackError(f"{what} not ready after {timeout:.0f}s; see {log_file}{_tail(log_file)}")


def _tail(log_file: Path | None, lines: int = 15) -> str:
    if log_file is None or not log_file.exists():
        return ""
    text = log_file.read_text(errors="replace").splitlines()[-lines:]
    return "\n  last lines:\n    " + "\n    ".join(text)


def read_pid(pid_file: Path) -> int | None:
    """The pid recorded in ``pid_file`` if that process is still alive."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return None
    return pid if pid_alive(pid) else None


def pid_alive(pid: int) -> bool:
    """A service's process runs: a zombie child of ours (a service that exited) is reaped."""
    return processes.pid_alive(pid, reap_child=True)


def spawn(
    dirs: ServiceDirs,
    argv: Sequence[str],
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    user: int | None = None,
    group: int | None = None,
) -> int:
    """Start ``argv`` in its own session (so stop() can signal its whole group), log to the
    service's log file, and record its pid. ``user``/``group`` (ids) run it as another user,
    for a server that refuses to run as root (PostgreSQL)."""
    dirs.ensure()
    full_env = dict(os.environ)
    full_env.update(env or {})
    as_user: dict[str, object] = {}
    if user is not None:
        as_user = {"user": user, "group": group, "extra_groups": []}
    with open(dirs.log_file, "ab") as out:
        proc = subprocess.Popen(  # type: ignore[call-overload]
            list(argv),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=str(cwd or dirs.run),
            start_new_session=True,
            **as_user,
        )
    dirs.pid_file.write_text(str(proc.pid))
    log.info("started %s (pid %s): %s", dirs.name, proc.pid, " ".join(argv[:3]))
    return proc.pid


def stop_pid_file(
    dirs: ServiceDirs, grace: float = 15.0, first_signal: int = signal.SIGTERM
) -> bool:
    """Stop the process group recorded in the pid file (``first_signal``, TERM by default,
    then KILL after ``grace``). Returns True when something was stopped. Never touches a
    process we did not start."""
    pid = read_pid(dirs.pid_file)
    if pid is None:
        dirs.pid_file.unlink(missing_ok=True)
        return False
    _signal_group(pid, first_signal)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and pid_alive(pid):
        time.sleep(0.2)
    if pid_alive(pid):
        _signal_group(pid, signal.SIGKILL)
        time.sleep(0.2)
    dirs.pid_file.unlink(missing_ok=True)
    log.info("stopped %s (pid %s)", dirs.name, pid)
    return True


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)  # spawn() made pid a session (and group) leader
    except ProcessLookupError:
        pass
    except PermissionError:
        os.kill(pid, sig)


@dataclass
class ServiceStatus:
    name: str
    running: bool
    pid: int | None
    endpoint: str
    detail: str = ""
    # How a client connects, for services whose endpoint is more than a URL (PostgreSQL:
    # host, port, user, password, database; Connect: url). `kbqe stack status --json` prints
    # these keys in the service's entry.
    connection: dict[str, str | int] = field(default_factory=dict)


class LocalService:
    """One service of the local stack. Subclasses implement install/launch/ready."""

    name: str = "service"
    start_timeout: float = 120.0
    # Started only when named (`kbqe stack up postgres connect`), never by a plain `up`, the
    # demo or the tests' `local_stack`; `down` and `status` still cover it.
    on_demand: bool = False
    # Services this one needs running first (started before it when it is started).
    requires: tuple[str, ...] = ()

    def __init__(self, home: Path | None = None, endpoints: LocalEndpoints | None = None) -> None:
        self.dirs = ServiceDirs(self.name, home or stack_home())
        self.endpoints = endpoints or local_endpoints()

    # --- to implement ---------------------------------------------------------------------
    @property
    def endpoint(self) -> str:
        raise NotImplementedError

    @property
    def ports(self) -> Sequence[int]:
        raise NotImplementedError

    def install(self) -> None:
        """Download/prepare what the service needs; idempotent, reuses the cache."""

    def launch(self) -> int:
        """Start the process (with spawn()) and return its pid."""
        raise NotImplementedError

    def ready(self) -> bool:
        """True once the service answers real requests (not just an open port)."""
        raise NotImplementedError

    def after_ready(self) -> None:
        """One-time set-up once ready (create a bucket, set a global rule, ...)."""

    # --- shared behaviour -------------------------------------------------------------------
    def pid(self) -> int | None:
        return read_pid(self.dirs.pid_file)

    def up(self) -> ServiceStatus:
        """Idempotent start: a running service of ours is left as it is."""
        if self.pid() is not None:
            wait_until(self.ready, self.start_timeout, self.name, self.dirs.log_file)
            return self.status()
        for port in self.ports:
            require_free_port(port, self.name)
        self.dirs.ensure()
        self.install()
        started = time.monotonic()
        pid = self.launch()
        wait_until(
            self.ready,
            self.start_timeout,
            self.name,
            self.dirs.log_file,
            alive=lambda: pid_alive(pid),
        )
        self.after_ready()
        log.info("%s ready at %s in %.1fs", self.name, self.endpoint, time.monotonic() - started)
        return self.status()

    def down(self) -> bool:
        return stop_pid_file(self.dirs)

    def connection(self) -> dict[str, str | int]:
        """What a client needs beyond the endpoint (none for most services)."""
        return {}

    def data_dirs(self) -> tuple[Path, ...]:
        """Where the service keeps its data (what ``kbqe stack up --fresh`` deletes)."""
        return (self.dirs.data,)

    def status(self) -> ServiceStatus:
        pid = self.pid()
        running = pid is not None and self.ready()
        return ServiceStatus(self.name, running, pid, self.endpoint, connection=self.connection())
