"""Helpers of bench/bench_stage.py: the process-tree sampler (peak RSS and CPU of the Spark
driver, its JVM and the Python workers), load average, and the machine facts of a report.

Linux ``/proc`` is read directly: it gives what the benchmark needs in one file per process
(parent, RSS, the kernel's own peak ``VmHWM``, CPU ticks), and psutil is not a dependency of
the project. Elsewhere psutil is used when installed (RSS and CPU only, no kernel peak).
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

try:  # optional, only used where /proc is missing
    import psutil
except ImportError:  # pragma: no cover - depends on the machine
    psutil = None

PROC = Path("/proc")
TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
MB = 1024 * 1024


@dataclass(frozen=True)
class ProcSample:
    pid: int
    ppid: int
    role: str  # driver | jvm | worker | other
    rss: int  # bytes
    hwm: int  # bytes, 0 when unknown
    cpu: float  # seconds of user + system time
    pss: int = 0  # bytes: resident memory with pages shared between processes split among them


SPARK_JVM_MAIN = "org.apache.spark.deploy.SparkSubmit"  # what PySpark's launch_gateway runs


def _role(pid: int, root: int, cmdline: str) -> str:
    if pid == root:
        return "driver"
    if "pyspark.daemon" in cmdline or "pyspark/daemon" in cmdline or "pyspark.worker" in cmdline:
        return "worker"
    # Spark's JVM only: a Kafka broker or Apicurio the measuring process started is a JVM too,
    # and counting one as "the Spark JVM" is how 160 MB became 730 MB (bench_stage.py).
    if cmdline.split("\0", 1)[0].endswith("java") and SPARK_JVM_MAIN in cmdline:
        return "jvm"
    return "other"


def _read_proc(pid: int, root: int, pss: bool = True) -> ProcSample | None:
    try:
        stat = (PROC / str(pid) / "stat").read_text()
        status = (PROC / str(pid) / "status").read_text()
        cmdline = (PROC / str(pid) / "cmdline").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rest = stat[stat.rindex(")") + 2 :].split()  # the command name may contain spaces
    ppid, utime, stime = int(rest[1]), int(rest[11]), int(rest[12])
    memory = {}
    for line in status.splitlines():
        if line.startswith(("VmRSS:", "VmHWM:")):
            memory[line[:5]] = int(line.split()[1]) * 1024
    return ProcSample(
        pid,
        ppid,
        _role(pid, root, cmdline),
        memory.get("VmRSS", 0),
        memory.get("VmHWM", 0),
        (utime + stime) / TICKS,
        _pss(pid) if pss else 0,
    )


def cpu_seconds(pid: int | None) -> float | None:
    """User + system CPU seconds ``pid`` has used so far (None when it is not running): the
    stack's services (the Kafka broker, fake GCS) work for the stage job outside its tree."""
    sample = _read_proc(pid, pid, pss=False) if pid else None
    return sample.cpu if sample else None


def _parent(proc_dir: Path) -> int | None:
    try:
        stat = (proc_dir / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def _pss(pid: int) -> int:
    """Proportional set size: forked PySpark workers share most pages with their daemon, so
    summing their RSS counts those pages several times; summing PSS counts them once."""
    try:
        for line in (PROC / str(pid) / "smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        pass
    return 0


def process_tree(root: int, exclude: Iterable[int] = (), pss: bool = True) -> list[ProcSample]:
    """``root`` and all its descendants, classified by role, less the processes in
    ``exclude`` and their own descendants: the local stack's services, which are children of
    the process that started them (``bench_stage.py`` starts those that are not running) but
    serve every run of the machine, and are not part of the run being measured. ``pss``:
    read each process's PSS too (``smaps_rollup``, the costly read; else 0)."""
    exclude = frozenset(exclude)
    if PROC.is_dir():
        # Parents from each process's stat line only; the costly reads (status, cmdline,
        # smaps_rollup) for the tree's few processes only. Reading them for every process of
        # the machine (the broker's JVM has thousands of mappings) took 28 ms a sample, 14 % of
        # a core at 5 Hz, taken from the stage run being measured.
        children: dict[int, list[int]] = {}
        for p in PROC.iterdir():
            if p.name.isdigit():
                ppid = _parent(p)
                if ppid is not None:
                    children.setdefault(ppid, []).append(int(p.name))
        tree, todo = [], [root]
        while todo:
            pid = todo.pop()
            if pid in exclude:
                continue
            sample = _read_proc(pid, root, pss)
            if sample is not None:
                tree.append(sample)
                todo.extend(children.get(pid, ()))
        return tree
    if psutil is None:
        return []
    out = []
    procs = [psutil.Process(root)]
    while procs:
        proc = procs.pop()
        if proc.pid in exclude:
            continue
        try:
            procs.extend(proc.children())
            with proc.oneshot():
                cpu = proc.cpu_times()
                out.append(
                    ProcSample(
                        proc.pid,
                        proc.ppid(),
                        _role(proc.pid, root, "\0".join(proc.cmdline())),
                        proc.memory_info().rss,
                        0,
                        cpu.user + cpu.system,
                    )
                )
        except psutil.Error:
            continue
    return out


@dataclass
class TreeSampler:
    """Samples the process tree of ``root`` every ``interval`` s in a thread. Peaks are of
    the sum over a role at one instant: driver = this Python process + the Spark JVM,
    workers = the PySpark daemon + its forked workers. CPU is the time spent between start
    and stop (processes that exit between samples lose their last ticks).

    PSS is read every ``pss_every``-th sample (once a second) and at stop, RSS and CPU at
    every one: ``smaps_rollup`` walks every mapping of a process (3.5 ms for the Spark JVM),
    and read five times a second for the driver, the JVM and the workers it took ~0.12 s
    of CPU per stage run at N, 8 % of the run's own CPU, from the two cores the run
    measured was using (the raw baselines run without a sampler)."""

    root: int = field(default_factory=os.getpid)
    interval: float = 0.2
    exclude: frozenset[int] = frozenset()
    """pids left out with their descendants (:func:`process_tree`): the stack's services."""
    pss_every: int = 5
    peak: dict[str, int] = field(default_factory=dict)
    hwm: dict[str, int] = field(default_factory=dict)
    samples: int = 0
    worker_pids: set[int] = field(default_factory=set)
    loads: list[float] = field(default_factory=list)
    series: list[tuple[float, float, float, float]] = field(default_factory=list)
    """Once a second: (seconds, driver MB, workers MB, largest worker MB), to see whether
    memory levels off over many tasks or keeps growing."""

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._cpu_start: dict[int, float] = {}
        self._cpu_last: dict[int, tuple[str, float]] = {}
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)
        self._started = time.monotonic()

    def __enter__(self) -> TreeSampler:
        for s in process_tree(self.root, self.exclude, pss=False):
            self._cpu_start[s.pid] = s.cpu
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample(final=True)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self, final: bool = False) -> None:
        pss = final or self.samples % self.pss_every == 0
        tree = process_tree(self.root, self.exclude, pss)
        totals: dict[str, int] = {}
        for s in tree:
            role = "driver" if s.role in ("driver", "jvm") else s.role
            totals[role] = totals.get(role, 0) + s.rss
            if pss:
                totals["pss_" + s.role] = totals.get("pss_" + s.role, 0) + s.pss
                totals["pss_total"] = totals.get("pss_total", 0) + s.pss
            totals[s.role + "_process"] = max(totals.get(s.role + "_process", 0), s.rss)
            self.hwm[s.role] = max(self.hwm.get(s.role, 0), s.hwm)
            self._cpu_last[s.pid] = (s.role, s.cpu)
            if s.role == "worker":
                self.worker_pids.add(s.pid)
        for key, value in totals.items():
            self.peak[key] = max(self.peak.get(key, 0), value)
        self.loads.append(os.getloadavg()[0])
        if self.samples % max(1, round(1 / self.interval)) == 0:
            self.series.append(
                (
                    round(time.monotonic() - self._started, 1),
                    *(
                        round(totals.get(k, 0) / MB, 1)
                        for k in ("driver", "worker", "worker_process")
                    ),
                )
            )
        self.samples += 1

    def cpu_seconds(self) -> dict[str, float]:
        out: dict[str, float] = {}
        for pid, (role, cpu) in self._cpu_last.items():
            out[role] = out.get(role, 0.0) + cpu - self._cpu_start.get(pid, 0.0)
        return {k: round(v, 2) for k, v in out.items()}

    def report(self) -> dict:
        loads = self.loads or [os.getloadavg()[0]]
        return {
            "peak_rss_mb": {
                k: round(v / MB, 1)
                for k, v in sorted(self.peak.items())
                if not k.startswith("pss_")
            },
            # PSS: each shared page counted once across the tree (what the machine really holds).
            "peak_pss_mb": {
                k[4:]: round(v / MB, 1)
                for k, v in sorted(self.peak.items())
                if k.startswith("pss_")
            },
            "kernel_peak_rss_mb": {k: round(v / MB, 1) for k, v in sorted(self.hwm.items()) if v},
            "cpu_seconds": self.cpu_seconds(),
            "worker_processes_seen": len(self.worker_pids),
            "samples": self.samples,
            "load_1min": {"max": round(max(loads), 2), "mean": round(sum(loads) / len(loads), 2)},
            "rss_series_mb": {
                "columns": ["s", "driver", "workers", "largest_worker"],
                "rows": self.series,
            },
        }


def self_peak_rss_mb() -> float:
    """The kernel's peak RSS of this process (for child processes reporting their own)."""
    try:
        for line in (PROC / "self" / "status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024, 1)
    except FileNotFoundError:
        pass
    import resource  # ru_maxrss is KiB on Linux, bytes on macOS

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return round(peak / (MB if sys.platform == "darwin" else 1024), 1)


def timed(fn: Callable[[], object]) -> tuple[object, float]:
    started = time.perf_counter()
    result = fn()
    return result, time.perf_counter() - started


def _version(module: str) -> str | None:
    try:
        return getattr(__import__(module), "__version__", None)
    except ImportError:
        return None


def machine_facts() -> dict:
    import confluent_kafka

    java = subprocess.run(["java", "-version"], capture_output=True, text=True)
    cpu_model = next((line.split(":", 1)[1].strip() for line in
                      (PROC / "cpuinfo").read_text().splitlines() if line.startswith("model name")),
                     platform.processor()) if (PROC / "cpuinfo").exists() else platform.processor()  # fmt: skip
    return {
        "cpus": os.cpu_count(),
        "cpu_model": cpu_model,
        "cpu_mhz": _cpu_mhz(),
        "memory_gb": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "java": (java.stderr.splitlines() or ["?"])[0],
        "versions": {
            "confluent_kafka": getattr(confluent_kafka, "__version__", None),
            "librdkafka": confluent_kafka.libversion()[0],
            "pyspark": _version("pyspark"),
            "fastavro": _version("fastavro"),
            "cramjam": _version("cramjam"),
            "psutil": _version("psutil"),
        },
    }


def _cpu_mhz() -> float | None:
    """The first core's clock as the kernel reports it now (``cpu MHz``): a busy or throttled
    machine shows it here before it shows it in the figures."""
    info = PROC / "cpuinfo"
    if not info.exists():
        return None
    for line in info.read_text().splitlines():
        if line.startswith("cpu MHz"):
            return round(float(line.split(":", 1)[1]), 1)
    return None


def disk_write_mb_per_s(directory: str | None = None, megabytes: int = 256) -> float:
    """How fast the staging directory's disk takes written bytes: ``megabytes`` in 4 MiB
    writes, then ``fsync``, into a temporary file of ``directory`` (the system's temporary
    directory, where the bench's local staging area lives), MB/s. A local-staging figure
    bound by the disk shows it beside this."""
    import tempfile

    block = os.urandom(4 * 1024 * 1024)
    with tempfile.NamedTemporaryFile(dir=directory, prefix="kbqe-bench-disk-") as out:
        started = time.perf_counter()
        for _ in range(megabytes // 4):
            out.write(block)
        out.flush()
        os.fsync(out.fileno())
        seconds = time.perf_counter() - started
    return round(megabytes * 1024 * 1024 / 1e6 / seconds, 1)
