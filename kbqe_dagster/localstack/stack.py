"""The local stack as a whole: which services it has, in which order, and starting, stopping
and reporting them together (``kbqe stack up|down|status`` and the tests' ``local_stack``).

The services are independent of one another at start-up (Apicurio keeps its schemas in its
own H2 file, not in Kafka; the BigQuery emulator reads fake-gcs-server's files directly), so
``up`` starts them in parallel threads: two JVMs and two emulators overlap their start-up
instead of queueing. Their Maven downloads still take turns (see ``jvm.run_maven``).
``down`` stops them one by one in reverse order, each only through its own pid file.
"""

from __future__ import annotations

import importlib
import logging
import shutil
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack.base import LocalService, ServiceStatus
from kbqe_dagster.localstack.endpoints import LocalEndpoints

log = logging.getLogger(__name__)

# (module, class) of every service, in start order; down() goes in reverse. Each class is a
# LocalService constructed as ``cls(home, endpoints)``. Classes are imported when a stack is
# built, so a service whose module does not exist yet is skipped (with a warning) instead of
# breaking the others.
SERVICES: tuple[tuple[str, str], ...] = (
    ("kbqe_dagster.localstack.kafka", "KafkaService"),
    ("kbqe_dagster.localstack.apicurio", "ApicurioService"),
    ("kbqe_dagster.localstack.gcs", "GcsService"),
    ("kbqe_dagster.localstack.bigquery", "BigQueryEmulatorService"),
)


def service_classes() -> list[type[LocalService]]:
    """The service classes in start order; missing modules are skipped with a warning."""
    classes: list[type[LocalService]] = []
    for module_name, class_name in SERVICES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as err:
            if err.name != module_name:  # the module exists but one of its imports is broken
                raise
            log.warning(
                "local stack: %s is not available yet (no module %s); skipping it",
                class_name,
                module_name,
            )
            continue
        classes.append(getattr(module, class_name))
    return classes


def build(
    names: Iterable[str] | None = None,
    home: Path | None = None,
    endpoints: LocalEndpoints | None = None,
) -> list[LocalService]:
    """Service objects in start order, all of them or only ``names`` (a StackError names
    an unknown service and lists the known ones)."""
    services = [cls(home, endpoints) for cls in service_classes()]  # type: ignore[call-arg]
    if names is None:
        return services
    wanted = list(dict.fromkeys(names))
    known = [s.name for s in services]
    unknown = [n for n in wanted if n not in known]
    if unknown:
        raise StackError(
            f"unknown local service(s) {', '.join(unknown)}; the stack has {', '.join(known)}"
        )
    return [s for s in services if s.name in wanted]


def up(
    names: Iterable[str] | None = None,
    home: Path | None = None,
    endpoints: LocalEndpoints | None = None,
) -> list[ServiceStatus]:
    """Start every service (or ``names``) that is not running and wait until each answers.
    Running services of ours are left as they are, so a second ``up`` is a no-op. When some
    service fails, the others still finish starting and one StackError reports the failures."""
    return up_services(build(names, home, endpoints))


DAGSTER_HOME_DIR = "dagster_home"  # the demo's Dagster instance, beside the services


@dataclass(frozen=True)
class Wiped:
    path: Path
    what: str


def wipe_data(
    names: Iterable[str] | None = None,
    home: Path | None = None,
    endpoints: LocalEndpoints | None = None,
) -> list[Wiped]:
    """Delete the data of stopped services (all, or ``names``): Kafka's log, the registry's
    schemas, the staging bucket, the BigQuery tables, and for the whole stack the demo's
    Dagster instance. The download cache, pid files and logs stay. Refused while any of them
    runs: deleting under a live process corrupts it instead of resetting it."""
    services = build(names, home, endpoints)
    running = [s.name for s in services if s.pid() is not None]
    if running:
        raise StackError(
            f"--fresh deletes the data of stopped services, and {', '.join(running)} still "
            "run: `kbqe stack down` first"
        )
    targets = [Wiped(s.dirs.data, f"{s.name} data") for s in services]
    if names is None and services:
        targets.append(
            Wiped(services[0].dirs.home / DAGSTER_HOME_DIR, "the demo's Dagster instance")
        )
    wiped = [t for t in targets if t.path.exists()]
    for t in wiped:
        shutil.rmtree(t.path)
        log.info("fresh: deleted %s (%s)", t.path, t.what)
    return wiped


def up_services(services: Sequence[LocalService]) -> list[ServiceStatus]:
    started = time.monotonic()
    with ThreadPoolExecutor(
        max_workers=max(1, len(services)), thread_name_prefix="stack-up"
    ) as pool:
        futures = [(s.name, pool.submit(s.up)) for s in services]
        results: list[ServiceStatus] = []
        failures: list[tuple[str, BaseException]] = []
        for name, future in futures:
            try:
                results.append(future.result())
            except Exception as err:  # noqa: BLE001 - reported below, after the others finish
                failures.append((name, err))
    if failures:
        raise _combined(failures)
    log.info(
        "local stack up in %.1fs: %s",
        time.monotonic() - started,
        ", ".join(s.name for s in services),
    )
    return results


def _combined(failures: list[tuple[str, BaseException]]) -> StackError:
    if len(failures) == 1:
        err = failures[0][1]
        return err if isinstance(err, StackError) else StackError(_named(failures[0][0], str(err)))
    summary = "; ".join(_named(name, _first_line(err)) for name, err in failures)
    details = "\n".join(f"--- {name}\n{err}" for name, err in failures)
    return StackError(f"{len(failures)} services failed to start — {summary}\n{details}")


def _named(name: str, line: str) -> str:
    """Service errors usually begin with the service's name already; add it when not."""
    return line if line.startswith(name) else f"{name}: {line}"


def _first_line(err: BaseException) -> str:
    text = str(err).strip()
    return text.splitlines()[0] if text else type(err).__name__


def down(
    names: Iterable[str] | None = None,
    home: Path | None = None,
    endpoints: LocalEndpoints | None = None,
) -> list[str]:
    """Stop the services of ours that run (reverse start order, only by their pid files);
    returns the names of those that were stopped."""
    return down_services(build(names, home, endpoints))


def down_services(services: Sequence[LocalService]) -> list[str]:
    stopped = []
    for service in reversed(services):
        if service.down():
            stopped.append(service.name)
    return stopped


def status(
    names: Iterable[str] | None = None,
    home: Path | None = None,
    endpoints: LocalEndpoints | None = None,
) -> list[ServiceStatus]:
    """Each service's status in start order: running means our process answers requests."""
    return [s.status() for s in build(names, home, endpoints)]
