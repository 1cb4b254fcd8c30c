"""Whether a run's worker process is known to be gone: the decision behind kbqe's run launcher
(kbqe_dagster/run_launcher.py), pure.

Dagster's default run launcher starts each run as a child of the code server, and only that
server notices a child that dies without a word (SIGKILL, the OOM killer): it marks the run
failed. Once the server has been restarted or its location reloaded, the runs it started live on
as orphans, and if one of them then dies, nobody sees it: the run stays STARTED for ever, its
pool slots and tag-limit slots stay held, and the stage sensor never stages its topics again (the
soak on PostgreSQL found it; docs/deployment.md, "Stuck runs: a worker that died unseen").

A run worker therefore records who it is (:class:`ProcessIdentity`, the run tag
:data:`WORKER_TAG`) when it starts, and the daemon's run monitoring asks here whether that
process still exists. A process is named by its boot, its pid namespace, its pid and its start
time, so a pid reused after the worker's death is not mistaken for it, and a process the
monitor cannot see (another host, another container's pid namespace) is never declared gone:
for it there is no verdict, and Dagster's ``dagster/max_runtime`` tag remains the bound.
"""

from __future__ import annotations

from dataclasses import dataclass

WORKER_TAG = "kbqe/run_worker"
"""The run tag holding the run worker's :class:`ProcessIdentity` (``ProcessIdentity.tag``)."""


@dataclass(frozen=True)
class ProcessIdentity:
    """One process, unambiguously on one machine: ``boot_id`` (the kernel's, new at each boot),
    ``pid_namespace`` (as ``/proc/self/ns/pid`` names it), ``pid`` and ``start_ticks`` (field 22
    of ``/proc/<pid>/stat``: when it started, in clock ticks since boot)."""

    boot_id: str
    pid_namespace: str
    pid: int
    start_ticks: int

    @property
    def tag(self) -> str:
        return f"{self.boot_id}/{self.pid_namespace}/{self.pid}/{self.start_ticks}"

    @classmethod
    def from_tag(cls, value: str | None) -> ProcessIdentity | None:
        """The identity a :attr:`tag` wrote, or None for a missing or malformed tag (a run of
        an older version, or a tag edited by hand: no verdict, never a failure)."""
        if not value:
            return None
        parts = value.split("/")
        if len(parts) != 4 or not parts[0] or not parts[1]:
            return None
        try:
            return cls(parts[0], parts[1], int(parts[2]), int(parts[3]))
        except ValueError:
            return None


def worker_gone(
    recorded: ProcessIdentity | None,
    boot_id: str,
    pid_namespace: str,
    seen_start_ticks: int | None,
) -> str | None:
    """Why the run worker ``recorded`` is known to be gone, or None when it may still run.

    ``boot_id`` and ``pid_namespace`` are the monitor's own; ``seen_start_ticks`` is the start
    time of the process the monitor sees at ``recorded.pid`` (None: no such process).
    """
    if recorded is None:
        return None  # no identity recorded: nothing to compare
    if recorded.boot_id != boot_id:
        return None  # another machine, or this one before a reboot: out of sight
    if recorded.pid_namespace != pid_namespace:
        return None  # another container's processes: out of sight
    if seen_start_ticks == recorded.start_ticks:
        return None  # the very process: it runs
    if seen_start_ticks is None:
        return f"run worker pid {recorded.pid} no longer exists"
    return (
        f"run worker pid {recorded.pid} no longer exists "
        "(the pid now belongs to a process started later)"
    )
