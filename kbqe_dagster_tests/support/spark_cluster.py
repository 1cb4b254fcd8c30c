"""A Spark standalone cluster on this machine, as another host's would be: a master and two
workers, each its own JVM started with the ``spark-class`` that pyspark ships, one worker in a
network namespace of its own, the executors' Python a second environment where kbqe_dagster is
installed from a wheel. For the cluster tests (resources/test_spark_cluster_on_local_stack.py,
whose docstring says why each piece is there) and bench/bench_cluster.py.

Needs root (network and mount namespaces) and ``ip``/``unshare``; :func:`cluster_unavailable`
says why not where they are missing. Everything it starts it stops by pid (each daemon leads a
process group of its own: its executors and their Python workers go with it), and the
namespace, its veth pair and the temporary directory go with them.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pyspark

REPO = Path(__file__).resolve().parents[2]
SPARK_HOME = Path(pyspark.__file__).parent
SPARK_CLASS = SPARK_HOME / "bin" / "spark-class"
MAIN_SITE_PACKAGES = Path(pyspark.__file__).parents[1]
"""The environment the tests run in; the executors' environment borrows its heavy packages."""

MASTER = "org.apache.spark.deploy.master.Master"
WORKER = "org.apache.spark.deploy.worker.Worker"
# The daemons only schedule: a small heap, the serial collector and the C1 compiler start them
# in about half the time (resources/spark.py gives the driver the same).
DAEMON_JAVA_OPTS = "-Xms32m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"
DAEMON_MEMORY = "256m"  # the daemons' heap (spark-class refuses an -Xmx in their options)
EXECUTOR_JAVA_OPTS = "-Xms32m -Xmn8m -XX:+UseSerialGC -XX:TieredStopAtLevel=1"
START_TIMEOUT = 120.0  # a loaded CI machine (load 15 on 2 cores) took 30 s
CLONE_NEWNET = 0x40000000


def cluster_unavailable() -> str | None:
    """Why this machine cannot host the cluster, or None."""
    if os.geteuid() != 0:
        return "a Spark cluster with a worker in a network namespace needs root"
    missing = [tool for tool in ("ip", "unshare", "java") if shutil.which(tool) is None]
    if missing:
        return f"a Spark cluster with a worker in a network namespace needs {', '.join(missing)}"
    if not SPARK_CLASS.exists():
        return f"pyspark ships no spark-class at {SPARK_CLASS}"
    return None


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.strip()}")


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@dataclass
class NetNamespace:
    """A network namespace joined to this host's by a veth pair: ``host_address`` on the host's
    end, ``address`` on the namespace's, its own loopback. Nothing else routes into it: the host's
    127.0.0.1 is not reachable from inside, as another host's would not be."""

    name: str
    host_address: str
    address: str

    @classmethod
    def create(cls) -> NetNamespace:
        pid = os.getpid()
        name, subnet = f"kbqe-spark-{pid}", f"10.{200 + pid % 50}.{pid // 50 % 256}"
        ns = cls(name, f"{subnet}.1", f"{subnet}.2")
        host_end, ns_end = f"kbqs{pid % 100000}h", f"kbqs{pid % 100000}n"
        _run("ip", "netns", "add", name)
        try:
            _run("ip", "link", "add", host_end, "type", "veth", "peer", "name", ns_end)
            _run("ip", "link", "set", ns_end, "netns", name)
            _run("ip", "addr", "add", f"{ns.host_address}/30", "dev", host_end)
            _run("ip", "link", "set", host_end, "up")
            for argv in (
                ("ip", "addr", "add", f"{ns.address}/30", "dev", ns_end),
                ("ip", "link", "set", ns_end, "up"),
                ("ip", "link", "set", "lo", "up"),
            ):
                _run("ip", "netns", "exec", name, *argv)
        except BaseException:
            ns.delete()
            raise
        return ns

    def delete(self) -> None:
        # Deleting the namespace destroys its veth end, and with it the host's.
        subprocess.run(["ip", "netns", "delete", self.name], capture_output=True)

    def exec_prefix(self) -> list[str]:
        return ["ip", "netns", "exec", self.name]


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"setns: {os.strerror(errno)}")


class Forwarder:
    """The local stack's services as the namespace sees them: for each port, a listening socket
    made inside the namespace on its own 127.0.0.1, whose connections are relayed to the same
    port on the host's 127.0.0.1. Only the listening sockets are the namespace's (a socket keeps
    the namespace it was made in); this thread and the outbound sockets stay in the host's. The
    services advertise 127.0.0.1 (Kafka's metadata, the GCS emulator's URLs), so the same address
    and port must work from an executor in the namespace, as a DNS name of the services would
    on a real network."""

    def __init__(self, ns: NetNamespace, ports: Iterable[int]) -> None:
        self.listeners: list[socket.socket] = []
        self.connections = 0
        host_ns = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        target = os.open(f"/run/netns/{ns.name}", os.O_RDONLY)
        try:
            _setns(target)
            try:
                for port in ports:
                    listener = socket.socket()
                    listener.bind(("127.0.0.1", port))
                    listener.listen(64)
                    self.listeners.append(listener)
            finally:
                _setns(host_ns)
        finally:
            os.close(host_ns)
            os.close(target)
        for listener in self.listeners:
            threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        port = listener.getsockname()[1]
        while True:
            try:
                inside, _ = listener.accept()
            except OSError:
                return  # closed
            try:
                outside = socket.create_connection(("127.0.0.1", port), timeout=10)
                outside.settimeout(None)
            except OSError:
                inside.close()
                continue
            self.connections += 1
            pair = _Pair(inside, outside)
            threading.Thread(target=pair.pump, args=(inside, outside), daemon=True).start()
            threading.Thread(target=pair.pump, args=(outside, inside), daemon=True).start()

    def close(self) -> None:
        for listener in self.listeners:
            listener.close()


class _Pair:
    """Two sockets relayed both ways; closed when both directions have ended."""

    def __init__(self, a: socket.socket, b: socket.socket) -> None:
        self.sockets, self.open_directions, self.lock = (a, b), 2, threading.Lock()

    def pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(1 << 16):
                dst.sendall(data)
        except OSError:
            pass
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass
        with self.lock:
            self.open_directions -= 1
            last = self.open_directions == 0
        if last:
            for s in self.sockets:
                s.close()


def build_executor_python(root: Path, source: Path = REPO) -> Path:
    """A second Python environment at ``root``: kbqe_dagster installed from a wheel built from
    a copy of ``source`` (a build in the checkout would leave build/ and egg-info there), the
    heavy dependencies (pyspark, the native kernel, fastavro, confluent-kafka, ...) borrowed from
    this environment's site-packages by a .pth line, which puts them after the environment's
    own: kbqe_dagster is the wheel's. A .pth line is only a path, so the editable install of
    kbqe_dagster in the borrowed site-packages (its own .pth and finder) is never activated.
    Returns the interpreter."""
    copy = root / "source"
    copy.mkdir(parents=True)
    for name in ("pyproject.toml", "setup.cfg", "README.md"):
        if (source / name).exists():
            shutil.copy2(source / name, copy / name)
    shutil.copytree(
        source / "kbqe_dagster",
        copy / "kbqe_dagster",
        ignore=shutil.ignore_patterns("__pycache__", "*.so"),
    )
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    wheels = root / "wheels"
    subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(copy)],
        check=True,
        capture_output=True,
        cwd=root,
    )
    (wheel,) = wheels.glob("kbqe_dagster-*.whl")
    env = root / "executor-env"
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(env)], check=True, capture_output=True
    )
    python = env / "bin" / "python"
    subprocess.run(
        [*pip, "--python", str(python), "install", "--no-deps", str(wheel)],
        check=True,
        capture_output=True,
        cwd=root,
    )
    (site,) = (env / "lib").glob("python3*/site-packages")
    (site / "borrowed_dependencies.pth").write_text(f"{MAIN_SITE_PACKAGES}\n")
    shutil.rmtree(copy)
    return python


def imported_package_dir(python: str | Path = sys.executable) -> Path:
    """Where ``python`` imports kbqe_dagster from without PYTHONPATH (-I): the checkout of an
    editable install, site-packages otherwise."""
    out = subprocess.run(
        [
            str(python),
            "-I",
            "-c",
            "import kbqe_dagster, os; print(os.path.dirname(kbqe_dagster.__file__))",
        ],
        check=True,
        capture_output=True,
        text=True,
        cwd="/",
    )
    return Path(out.stdout.strip())


@dataclass
class Daemon:
    """A master's or worker's JVM: its pid (it leads a process group of its own), its log."""

    name: str
    process: subprocess.Popen
    log: Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def wait_for(
        self,
        text: str,
        count: int = 1,
        timeout: float = START_TIMEOUT,
        alive: Sequence[Daemon] = (),
    ) -> None:
        """Until ``text`` is ``count`` times in this daemon's log, while it and ``alive`` run."""
        deadline = time.monotonic() + timeout
        while self.log_text().count(text) < count:
            for daemon in (self, *alive):
                if daemon.process.poll() is not None:
                    raise RuntimeError(
                        f"{daemon.name} exited {daemon.process.returncode}: "
                        f"{daemon.log_text()[-3000:]}"
                    )
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"{self.name}: no {text!r} after {timeout:.0f}s: {self.log_text()[-3000:]}"
                )
            time.sleep(0.1)

    def stop(self) -> None:
        """SIGTERM to its process group (the JVM, its executors, their Python workers), then
        SIGKILL to what is left of it."""
        pgid = self.process.pid
        for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline:
                if self.process.poll() is not None and not _group_alive(pgid):
                    return
                time.sleep(0.1)

    def executors(self) -> list[int]:
        """The pids of this worker's executor JVMs now (its children running the executor
        backend)."""
        return [
            pid
            for pid, ppid, cmdline in _processes()
            if ppid == self.process.pid and "CoarseGrainedExecutorBackend" in cmdline
        ]


def _processes() -> list[tuple[int, int, str]]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        out.append((int(entry.name), ppid, cmdline))
    return out


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


@dataclass
class SparkCluster:
    """A master and its workers; what a driver needs to use them (:meth:`driver_environment`)."""

    root: Path
    ns: NetNamespace
    forwarder: Forwarder | None
    executor_python: Path
    master_url: str
    daemons: list[Daemon] = field(default_factory=list)

    @property
    def master(self) -> Daemon:
        return self.daemons[0]

    @property
    def workers(self) -> list[Daemon]:
        return self.daemons[1:]

    def driver_environment(self) -> dict[str, str]:
        """The settings a driver on the host uses this cluster with (docs/runbook.md, "Scale
        out"): its address on the veth, the only one of the host's that the namespace reaches."""
        return {
            "KBQE_SPARK_MASTER": self.master_url,
            "KBQE_SPARK_DRIVER_HOST": self.ns.host_address,
            "KBQE_SPARK_DRIVER_BIND_ADDRESS": self.ns.host_address,
            "KBQE_SPARK_EXECUTOR_PYTHON": str(self.executor_python),
            "KBQE_SPARK_CONF_spark_executor_memory": "512m",
            "KBQE_SPARK_CONF_spark_executor_extraJavaOptions": EXECUTOR_JAVA_OPTS,
            # Each run's first job waits (bounded) for both workers' executors: on a loaded
            # machine the namespaced worker's executor can register after a small stage's
            # tasks all ran on the other one, and the tests count on both doing work.
            "KBQE_SPARK_CONF_spark_scheduler_minRegisteredResourcesRatio": "1.0",
            "KBQE_SPARK_CONF_spark_scheduler_maxRegisteredResourcesWaitingTime": "120s",
        }

    def kill_executors(self) -> list[int]:
        """SIGKILL every executor JVM of the cluster now (their Python workers die with their
        pipes); returns their pids."""
        pids = [pid for worker in self.workers for pid in worker.executors()]
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        return pids

    def workers_that_ran_tasks(self) -> int:
        """How many workers have an executor that finished a task (their executors' logs)."""
        return sum(
            any(
                "Finished task" in log.read_text(errors="replace")
                for log in (self.root / f"worker-{i}" / "work").glob("app-*/*/stderr")
            )
            for i in range(len(self.workers))
        )

    def stop(self) -> None:
        for daemon in reversed(self.daemons):
            daemon.stop()
        if self.forwarder is not None:
            self.forwarder.close()
        self.ns.delete()


def _daemon_env(local_ip: str, local_dirs: Path | None = None) -> dict[str, str]:
    """A daemon's whole environment: nothing of the test's (no PYTHONPATH, no KBQE_*), as on a
    host of its own; its executors inherit it."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": os.environ.get("HOME", "/root"),
        "SPARK_HOME": str(SPARK_HOME),
        "SPARK_LOCAL_IP": local_ip,  # the daemon's web UI binds here, not to every address
        "SPARK_DAEMON_JAVA_OPTS": DAEMON_JAVA_OPTS,
        "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
        # The master's REST submission server would take the fixed port 6066.
        "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
        "SPARK_NO_DAEMONIZE": "1",
    }
    if "JAVA_HOME" in os.environ:
        env["JAVA_HOME"] = os.environ["JAVA_HOME"]
    if local_dirs is not None:
        env["SPARK_LOCAL_DIRS"] = str(local_dirs)
    return env


def checkout_paths(repo: Path = REPO) -> list[Path]:
    """What hides the checkout from the workers: the checkout itself, or, where this
    environment's site-packages (which the executors borrow, and whose pyspark starts the
    daemons) is inside it (CI's ``.venv``), every directory of it but the one holding them."""
    if not MAIN_SITE_PACKAGES.resolve().is_relative_to(repo.resolve()):
        return [repo]
    return [
        p
        for p in repo.iterdir()
        if p.is_dir() and not MAIN_SITE_PACKAGES.resolve().is_relative_to(p.resolve())
    ]


def outermost(paths: Iterable[Path]) -> list[Path]:
    """``paths`` without those inside another of them (hiding the outer one hides them, and
    their mount points would not exist in its empty tmpfs): a checkout with an editable
    install holds the package directory it imports."""
    resolved = sorted({Path(p).resolve() for p in paths})
    return [p for p in resolved if not any(o != p and p.is_relative_to(o) for o in resolved)]


def _hiding(paths: Sequence[Path], argv: list[str]) -> list[str]:
    """``argv`` in a mount namespace of its own where each of ``paths`` is an empty tmpfs."""
    paths = outermost(paths)
    mounts = " && ".join(f'mount -t tmpfs kbqe-hidden "${{{i + 1}}}"' for i in range(len(paths)))
    script = f'{mounts} && shift {len(paths)} && exec "$@"' if paths else 'exec "$@"'
    return [
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        script,
        "sh",
        *map(str, paths),
        *argv,
    ]


def _build_into(out: list, root: Path, given: Path | None) -> None:
    try:
        out.append(given or build_executor_python(root))
    except BaseException as e:  # handed to the caller's thread
        out.append(e)


def _start(name: str, argv: list[str], env: dict[str, str], root: Path, cwd: Path) -> Daemon:
    log = root / f"{name}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            argv, env=env, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
    return Daemon(name, process, log)


def start_cluster(
    hidden: Sequence[Path] = (),
    forwarded_ports: Iterable[int] = (),
    workers: int = 2,
    namespaced: Sequence[int] = (1,),
    executor_python: Path | None = None,
) -> SparkCluster:
    """A master on the host's end of a veth and ``workers`` workers of one core each, those
    numbered in ``namespaced`` inside the namespace; every worker in a mount namespace where
    ``hidden`` (the checkout, the driver's files) are empty. The services on
    ``forwarded_ports`` are reachable from inside the namespace (:class:`Forwarder`)."""
    root = Path(tempfile.mkdtemp(prefix="kbqe-spark-cluster-"))
    ns = NetNamespace.create()
    cluster = SparkCluster(root, ns, None, Path(), "")
    try:
        cluster.forwarder = Forwarder(ns, forwarded_ports)
        # Built while the JVMs start: the executors need it only when the first job runs.
        built: list[Path | BaseException] = []
        builder = threading.Thread(
            target=_build_into, args=(built, root / "python", executor_python), daemon=True
        )
        builder.start()
        port = free_port(ns.host_address)
        cluster.master_url = f"spark://{ns.host_address}:{port}"
        master = _start(
            "master",
            [
                str(SPARK_CLASS),
                MASTER,
                "--host",
                ns.host_address,
                "--port",
                str(port),
                "--webui-port",
                "0",
            ],  # fmt: skip
            _daemon_env(ns.host_address),
            root,
            root,
        )
        cluster.daemons.append(master)
        master.wait_for("I have been elected leader")
        for i in range(workers):
            inside = i in namespaced
            host = ns.address if inside else "127.0.0.1"
            home = root / f"worker-{i}"
            (home / "work").mkdir(parents=True)
            (home / "local").mkdir()
            argv = [
                str(SPARK_CLASS), WORKER, "--host", host, "--port", "0", "--webui-port", "0",
                "--cores", "1", "--memory", "1g", "--work-dir", str(home / "work"),
                cluster.master_url,
            ]  # fmt: skip
            argv = _hiding(hidden, argv)
            if inside:
                argv = ns.exec_prefix() + argv
            cluster.daemons.append(
                _start(f"worker-{i}", argv, _daemon_env(host, home / "local"), root, home)
            )
        try:
            master.wait_for("Registering worker", count=workers, alive=cluster.workers)
        except RuntimeError as e:
            tails = "".join(f"\n--- {w.name}:\n{w.log_text()[-2000:]}" for w in cluster.workers)
            raise RuntimeError(f"{e}{tails}") from None
        builder.join()
        if isinstance(built[0], BaseException):
            raise built[0]
        cluster.executor_python = built[0]
    except BaseException:
        cluster.stop()
        shutil.rmtree(root, ignore_errors=True)
        raise
    return cluster
