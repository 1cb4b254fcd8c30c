"""Session-wide fixtures: the local stack's endpoints and the real local stack itself.

``local_stack`` uses a stack that is already up (a developer's ``kbqe stack up``) and leaves
it running; whatever was not running it starts, and at the end of the session it stops
exactly those services, by their pid files. Tests that use it are marked ``integration``
automatically, so ``pytest -m "not integration"`` never starts a JVM.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from kbqe_dagster.localstack import stack
from kbqe_dagster.localstack.base import LocalService
from kbqe_dagster.localstack.endpoints import LocalEndpoints
from kbqe_dagster.localstack.endpoints import local_endpoints as _read_endpoints

log = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
STACK_FIXTURE = "local_stack"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--kernel-fuzz-cases",
        type=int,
        default=16_000,
        metavar="N",
        help="messages of the native kernel's differential fuzzes, records of its Storage "
        "Write rows fuzz (default 16,000; the issues' proofs run 1,000,000)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # One stack home whatever directory pytest runs from, the same one `kbqe stack` uses
    # from the repository root, so tests reuse a developer's running stack.
    os.environ.setdefault("KBQE_LOCAL_HOME", str(REPO_ROOT / ".kbqe-local"))
    # The PostgreSQL that `cdc_stack` starts comes from Maven Central's embedded binaries even
    # where the machine has its own: CI machines have none, so that is the path to prove.
    os.environ.setdefault("KBQE_LOCAL_POSTGRES_BINARIES", "maven")


REQUIRE_KERNEL = "KBQE_REQUIRE_KERNEL"


def kernel_skip_fails(reason: str, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether a skip for ``reason`` fails instead: under ``KBQE_REQUIRE_KERNEL=1`` (``.ci/run``
    sets it where cargo is, so the kernel is built) every skip for the native kernel (not
    built, switched off, built before what the test needs: reasons that say "kernel") is a
    failure, so a CI whose kernel is missing or old cannot pass silently."""
    return environ.get(REQUIRE_KERNEL, "").strip() == "1" and "kernel" in reason.lower()


def _fail_a_kernel_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    if not report.skipped or hasattr(report, "wasxfail") or not isinstance(report.longrepr, tuple):
        return
    reason = str(report.longrepr[2])
    if kernel_skip_fails(reason):
        report.outcome = "failed"
        report.longrepr = f"{REQUIRE_KERNEL}=1 makes this kernel skip a failure: {reason}"


# A skip at import (importorskip, a module-level pytest.skip) is a collection's report; a
# skipif mark's or a pytest.skip in a test, the test's.
@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    _fail_a_kernel_skip(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    _fail_a_kernel_skip(outcome.get_result())


SERVICE_FIXTURES = frozenset({STACK_FIXTURE, "cdc_stack", "emulators"})
"""Fixtures that start (or reuse) the local stack's services on their fixed ports."""


# tryfirst: before pytest's own -m selection, which `make test` relies on to run the tests
# that need a service apart from those that need none (Makefile).
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the local stack's services is ``integration``, whether it says so or
    not."""
    silent: set[str] = set()
    for item in items:
        if SERVICE_FIXTURES & set(getattr(item, "fixturenames", ())):
            if not announces_the_stack(item.nodeid, item.get_closest_marker("integration")):
                silent.add(item.nodeid.split("::")[0])
            item.add_marker(pytest.mark.integration)
    if silent:
        raise pytest.UsageError(
            "these test files use the local stack without saying so: name them *_on_local_stack"
            " (or *_on_emulator[s]) or mark their tests integration: " + ", ".join(sorted(silent))
        )


def announces_the_stack(nodeid: str, marked: object) -> bool:
    """A test that starts services says so to its reader: in its file's name
    (``*_on_local_stack``, ``*_on_emulator[s]``, ``*_on_local_emulator``) or in an
    ``integration`` mark of its own, its class's or its module's (``marked``)."""
    return "_on_" in nodeid.split("::")[0].rsplit("/", 1)[-1] or marked is not None


@pytest.fixture(scope="session")
def local_endpoints() -> LocalEndpoints:
    """Ports and URLs of the local stack (``KBQE_LOCAL_*_PORT`` overrides applied)."""
    return _read_endpoints()


@pytest.fixture(scope="session")
def local_stack(local_endpoints: LocalEndpoints) -> Iterator[LocalEndpoints]:
    """The whole local stack, running and answering; yields its endpoints."""
    services = stack.build(endpoints=local_endpoints)
    not_running = [s for s in services if s.pid() is None]
    started_at = time.monotonic()
    try:
        stack.up_services(services)
    except BaseException:
        _stop_started(not_running)
        raise
    log.info(
        "local stack ready in %.1fs (started: %s)",
        time.monotonic() - started_at,
        ", ".join(s.name for s in not_running) or "none",
    )
    try:
        yield local_endpoints
    finally:
        _stop_started(not_running)


CDC_SERVICES = ("postgres", "connect")


@pytest.fixture(scope="session")
def cdc_stack(local_stack: LocalEndpoints) -> Iterator[LocalEndpoints]:
    """The local stack plus its on-demand PostgreSQL and Kafka Connect worker (Debezium),
    which ``local_stack`` never starts. Whichever of the two was not running it starts, and
    at the end of the session it stops exactly those."""
    services = [
        s for s in stack.build(CDC_SERVICES, endpoints=local_stack) if s.name in CDC_SERVICES
    ]
    not_running = [s for s in services if s.pid() is None]
    try:
        stack.up_services(services)
    except BaseException:
        _stop_started(not_running)
        raise
    try:
        yield local_stack
    finally:
        _stop_started(not_running)


def _stop_started(candidates: list[LocalService]) -> None:
    """Stop the services this fixture started: those that were not running before it."""
    stack.down_services([s for s in candidates if s.pid() is not None])


@pytest.fixture(scope="session")
def spark_context(local_stack):
    """One local SparkContext for the whole session (stage-job and stage-then-load tests),
    from the resource the stage asset uses."""
    from kbqe_dagster.resources.spark import local_spark_config, spark_resource

    resource = spark_resource(local_spark_config("local[2]"))
    context = resource.spark_context
    yield context
    context.stop()
