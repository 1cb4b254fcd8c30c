"""Faults of the services around the pipeline: the Kafka broker restarted while a stage run
reads, the schema registry down, fake-gcs-server down between two avro uploads of a range.

Each stops a real service of the local stack through its pid file and starts it again in a
``finally`` (``reliability/services.py``), then restarts the stage run; the final
accounting decides whether anything was lost or doubled.
"""

from __future__ import annotations

import time
from pathlib import Path

from kbqe_dagster.resources.schema_registry import RegistryUnavailableError, forget_found_schemas
from kbqe_dagster.staging.task import stage_range
from reliability import children
from reliability.harness import Suite, SuiteFailure, join
from reliability.report import GCS_DOWN, KAFKA_RESTART, REGISTRY_DOWN
from reliability.services import outage, service

EVENT_WAIT = 120.0
BROKER_DOWN_SECONDS = 2.0  # the paused run resumes against a stopped broker for this long
GCS_DOWN_SECONDS = 4.0  # short: the upload's own retry (120 s deadline) rides it out
GCS_LONG_DOWN_SECONDS = 135.0  # --long: past the retry deadline, the range must fail


def _committed_or_failed(result: dict) -> str:
    failures = "; ".join(result["failures"][:2]) or "none"
    return f"{len(result['committed'])} range(s) committed, failures: {failures}"


def kafka_restart(suite: Suite) -> None:
    """Stop and start the broker between two ranges of a running stage run."""
    started = time.monotonic()
    suite.produce(250, 350, KAFKA_RESTART)
    staged_first, resume = suite.procs.Event(), suite.procs.Event()
    outcome = suite.procs.Queue()
    proc = suite.spawn(children.stage_run_paused, suite.world.ctx, staged_first, resume, outcome)
    try:
        if not staged_first.wait(EVENT_WAIT):
            raise SuiteFailure("kafka restart: the stage run never committed its first range")
        with outage("kafka", suite.world.endpoints) as down:
            resume.set()
            time.sleep(BROKER_DOWN_SECONDS)
            down.restore()
        code = join(proc)
    finally:
        resume.set()
        if proc.is_alive():
            proc.kill()
    if code != 0:
        raise SuiteFailure(f"kafka restart: the stage run exited {code}")
    during = outcome.get(timeout=10)
    prep, results = suite.world.stage_pass()
    suite.record(
        KAFKA_RESTART,
        None,
        True,
        f"broker down {down.seconds:.1f}s mid-run; the run: {_committed_or_failed(during)}; "
        f"restart staged {len(results)} range(s), deleted "
        f"{len(prep.orphans_deleted)} orphan(s)",
        started,
    )


def _registry_http_client() -> type:
    """The HTTP client class confluent-kafka's registry client sends with (``httpx`` or its
    successor ``httpx2``, chosen by confluent-kafka itself), to count its attempts."""
    try:
        from confluent_kafka.schema_registry.common._httpx_compat import httpx
    except ImportError:
        import httpx
    return httpx.Client


def registry_down(suite: Suite) -> None:
    """A range staged while the registry is down, by a worker that has not seen its schema
    yet (a worker keeps the schemas it found: ids never change), fails with
    RegistryUnavailableError after the client's retries, commits nothing and dead-letters
    nothing."""
    started = time.monotonic()
    suite.produce(100, 200, REGISTRY_DOWN)
    world = suite.world
    registry = world.endpoints.registry_url
    ranges = list(world.prepare().plan.ranges)
    if not ranges:
        raise SuiteFailure("registry down: nothing planned")
    rng = ranges[0]
    before = {f.name for f in world.store().list()}
    attempts: list[float] = []
    client_class = _registry_http_client()
    real_send = client_class.send

    def counting_send(self, request, *args, **kwargs):
        if str(request.url).startswith(registry):
            attempts.append(time.monotonic())
        return real_send(self, request, *args, **kwargs)

    forget_found_schemas()  # a fresh worker
    with outage("apicurio", world.endpoints):
        client_class.send = counting_send  # type: ignore[method-assign]
        failed_at = time.monotonic()
        try:
            stage_range(world.ctx, rng)
            raise SuiteFailure(f"registry down: {rng} was staged without a registry")
        except RegistryUnavailableError as error:
            message = str(error)
        finally:
            client_class.send = real_send  # type: ignore[method-assign]
        waited = time.monotonic() - failed_at
        after = {f.name for f in world.store().list()}
    if after != before:
        raise SuiteFailure(f"registry down: the failed range wrote {sorted(after - before)[:3]}")
    if len(attempts) < 2:
        raise SuiteFailure(f"registry down: {len(attempts)} attempt(s), the client did not retry")
    prep, results = world.stage_pass()
    suite.record(
        REGISTRY_DOWN,
        None,
        True,
        f"{rng}: RegistryUnavailableError after {len(attempts)} attempts in "
        f"{waited:.1f}s ({message[:90]}); nothing written; restart staged "
        f"{len(results)} range(s)",
        started,
    )


def _done_files_on_disk(suite: Suite) -> list[str]:
    """Done files of this run in fake-gcs-server's filesystem backend: what becomes visible
    when the server is back. Read from disk because the server is down."""
    gcs = service("gcs", suite.world.endpoints)
    bucket, prefix = suite.world.staging.bucket_and_prefix()
    root = Path(gcs.filesystem_root) / bucket / prefix
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.name.endswith(".done"))


def gcs_down(suite: Suite) -> None:
    """fake-gcs-server stops right after the first avro upload of a range: no done file of
    it may exist during the outage; after it, the upload's retry commits it or the range
    fails (``--long``: past the retry deadline) and the restart stages it once."""
    started = time.monotonic()
    suite.produce(100, 200, GCS_DOWN)
    done_before = _done_files_on_disk(suite)
    uploaded, resume = suite.procs.Event(), suite.procs.Event()
    outcome = suite.procs.Queue()
    proc = suite.spawn(children.stage_run_upload_outage, suite.world.ctx, uploaded, resume, outcome)
    down_for = GCS_LONG_DOWN_SECONDS if suite.long else GCS_DOWN_SECONDS
    try:
        if not uploaded.wait(EVENT_WAIT):
            raise SuiteFailure("gcs down: the stage run never uploaded a file")
        with outage("gcs", suite.world.endpoints) as down:
            resume.set()
            time.sleep(down_for)
            committed_during = sorted(set(_done_files_on_disk(suite)) - set(done_before))
            down.restore()
        code = join(proc)
    finally:
        resume.set()
        if proc.is_alive():
            proc.kill()
    if committed_during:
        raise SuiteFailure(
            f"gcs down: done files appeared during the outage: {committed_during[:3]}"
        )
    if code != 0:
        raise SuiteFailure(f"gcs down: the stage run exited {code}")
    during = outcome.get(timeout=10)
    prep, results = suite.world.stage_pass()
    suite.record(
        GCS_DOWN,
        None,
        True,
        f"down {down.seconds:.1f}s after the first upload; no done file during the "
        f"outage; the run: {_committed_or_failed(during)}; restart deleted "
        f"{len(prep.orphans_deleted)} orphan(s), staged {len(results)} range(s)",
        started,
    )
