"""The local stack as a whole: which services it has, in which order, and starting, stopping
and reporting them together (``kbqe stack up|down|status`` and the tests' ``local_stack``).

The services are independent of one another at start-up (Apicurio keeps its schemas in its
own H2 file, not in Kafka; the BigQuery emulator reads fake-gcs-server's files directly), so
``up`` starts them in parallel threads: two JVMs and two emulators overlap their start-up
instead of queueing. Their Maven downloads still take turns (see ``jvm.run_maven``).
``down`` stops them one by one in reverse order, each only through its own pid file.

Some services are started on demand only (``LocalService.on_demand``): PostgreSQL and the
Kafka Connect worker, for change-data-capture work. A plain ``up`` (``kbqe stack up``, the
demo, the tests' ``local_stack``) leaves them out; naming them starts them, after the
services they require (Connect needs Kafka and the registry), in waves. ``down`` and
``status`` without names cover every service, on-demand ones included.
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
    # on demand only (LocalService.on_demand): started when named
    ("kbqe_dagster.localstack.postgres", "PostgresService"),
    ("kbqe_dagster.localstack.connect", "ConnectService"),
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
    on_demand: bool = False,
) -> list[LocalService]:
    """Service objects in start order: ``names`` with the services they require, else the
    default ones (and the on-demand ones too with ``on_demand``). A StackError names an
    unknown service and lists the known ones."""
    services = [cls(home, endpoints) for cls in service_classes()]  # type: ignore[call-arg]
    if names is None:
        return [s for s in services if on_demand or not s.on_demand]
    by_name = {s.name: s for s in services}
    wanted = list(dict.fromkeys(names))
    unknown = [n for n in wanted if n not in by_name]
    if unknown:
        raise StackError(
            f"unknown local service(s) {', '.join(unknown)}; the stack has {', '.join(by_name)}"
        )
    closure: set[str] = set()
    pending = list(wanted)
    while pending:
        name = pending.pop()
        if name not in closure:
            closure.add(name)
            pending.extend(by_name[name].requires)
    return [s for s in services if s.name in closure]


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
    services = build(names, home, endpoints, on_demand=True)
    running = [s.name for s in services if s.pid() is not None]
    if running:
        raise StackError(
            f"--fresh deletes the data of stopped services, and {', '.join(running)} still "
            "run: `kbqe stack down` first"
        )
    targets = [Wiped(d, f"{s.name} data") for s in services for d in s.data_dirs()]
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
    """Start ``services`` in waves: each wave those whose required services (among these)
    are up; a failed wave stops the next from starting."""
    started = time.monotonic()
    results: dict[str, ServiceStatus] = {}
    remaining = list(services)
    while remaining:
        names = {s.name for s in remaining}
        wave = [s for s in remaining if not names & set(s.requires)] or remaining
        for status in _up_wave(wave):
            results[status.name] = status
        remaining = [s for s in remaining if s not in wave]
    log.info(
        "local stack up in %.1fs: %s",
        time.monotonic() - started,
        ", ".join(s.name for s in services),
    )
    return [results[s.name] for s in services]


def _up_wave(services: Sequence[LocalService]) -> list[ServiceStatus]:
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
    """Stop the services of ours that run (reverse start order, only by their pid files),
    on-demand ones included; returns the names of those that were stopped. Naming a service
    stops it alone, not the services it requires."""
    if names is None:
        return down_services(build(None, home, endpoints, on_demand=True))
    wanted = set(names)
    return down_services([s for s in build(wanted, home, endpoints) if s.name in wanted])


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
    """Each service's status in start order (on-demand ones included): running means our
    process answers requests."""
    if names is None:
        return [s.status() for s in build(None, home, endpoints, on_demand=True)]
    wanted = set(names)
    return [s.status() for s in build(wanted, home, endpoints) if s.name in wanted]
