"""``/healthcheck`` and ``kbqe health``: is the pipeline able to work, and is it keeping up?

Checks, all run in parallel, each answering within ``timeout_s`` (default 3 s) or failing:

- ``kafka``: the cluster answers a metadata request. A configured topic it does not hold (not
  created yet, or deleted) is a normal state that the stage side skips: the check passes but
  is *degraded*, naming the topics;
- ``schema_registry``: the registry lists its subjects;
- ``staging``: the staging area lists and its load state file reads (a corrupt state file
  stops loading, so it fails this check);
- ``bigquery``: BigQuery answers for the dead-letter dataset (absent is an answer);
- ``quarantine``: no table has quarantined files (from the state file just read);
- ``staging_freshness``: the oldest committed avro file still waiting for a load (quarantined
  ones excluded) is younger than ``max_staging_age_s`` — by default the staging freshness
  asset check's limit, ``FRESHNESS_CADENCES`` load cadences. It uses the metrics' cached
  listing, and adds that listing's own age, so a stale listing never hides an old file.

Healthy when every check passes; degraded (still healthy: ``/healthcheck`` answers 200, exit
0) when a check that passes says something the pipeline wants is absent. A probe still
running from an earlier request is not started again (it fails as "still running"), so an
unreachable system never accumulates threads. Every text that comes from a client library is
redacted.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from kbqe_dagster.core.load.state import LoadState
from kbqe_dagster.observability.collector import MetricSources
from kbqe_dagster.observability.sources import ExporterSources
from kbqe_dagster.operations.snapshot import read_load_state
from kbqe_dagster.resources.staging_store import StagingStore

DEFAULT_TIMEOUT_S = 3.0
log = logging.getLogger(__name__)

Probe = Callable[[], tuple[str, Any]]
"""Returns a detail text and a value for later checks; raises when the system fails."""


@dataclass(frozen=True)
class CheckResult:
    name: str
    ok: bool
    detail: str
    seconds: float
    degraded: bool = False
    """Passes, but something the pipeline wants is absent (the detail says what)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "degraded": self.degraded,
            "detail": self.detail,
            "seconds": round(self.seconds, 3),
        }


@dataclass(frozen=True)
class HealthReport:
    checks: tuple[CheckResult, ...]
    checked_at: datetime
    thresholds: Mapping[str, float] = field(default_factory=dict)

    @property
    def healthy(self) -> bool:
        return all(c.ok for c in self.checks)

    @property
    def degraded(self) -> tuple[str, ...]:
        """The checks that pass degraded."""
        return tuple(c.name for c in self.checks if c.degraded)

    def to_json(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "degraded": list(self.degraded),
            "checked_at": self.checked_at.isoformat(),
            "checks": {c.name: c.to_json() for c in self.checks},
            "thresholds": dict(self.thresholds),
        }


class Prober:
    """Runs probes in parallel threads, bounded by one shared deadline."""

    def __init__(self, timeout_s: float, redact: Callable[[object], str]) -> None:
        self.timeout_s = timeout_s
        self.redact = redact
        self._lock = threading.Lock()
        self._running: dict[str, float] = {}  # probe name → start of a probe still running
        self._failing: set[str] = set()

    def run(self, probes: Mapping[str, Probe]) -> dict[str, tuple[CheckResult, Any]]:
        started = time.monotonic()
        results: dict[str, tuple[CheckResult, Any]] = {}
        threads = []
        for name, probe in probes.items():
            with self._lock:
                since = self._running.get(name)
                if since is None:
                    self._running[name] = started
            if since is not None:
                why = f"an earlier probe is still running ({started - since:.0f}s, no answer)"
                results[name] = (self._fail(name, why, 0.0), None)
                continue
            thread = threading.Thread(
                target=self._probe,
                args=(name, probe, results),
                name=f"kbqe-health-{name}",
                daemon=True,
            )
            thread.start()
            threads.append((name, thread))
        for name, thread in threads:
            thread.join(max(0.0, started + self.timeout_s - time.monotonic()))
            if name not in results:
                results[name] = (
                    self._fail(
                        name, f"no answer within {self.timeout_s:g}s", time.monotonic() - started
                    ),
                    None,
                )
        return results

    def _probe(self, name: str, probe: Probe, results: dict) -> None:
        started = time.monotonic()
        try:
            detail, value = probe()
            result = (
                CheckResult(name, True, self.redact(detail), time.monotonic() - started),
                value,
            )
            self._log_recovery(name)
        except Exception as error:  # noqa: BLE001 - a failing system is a check result
            result = (
                self._fail(name, f"{type(error).__name__}: {error}", time.monotonic() - started),
                None,
            )
        finally:
            with self._lock:
                self._running.pop(name, None)
        results.setdefault(name, result)  # after the deadline, the timeout result stays

    def _fail(self, name: str, why: str, seconds: float) -> CheckResult:
        detail = self.redact(why)
        with self._lock:
            first = name not in self._failing
            self._failing.add(name)
        # Logged when a check starts failing (the answer carries every later failure), so a
        # health endpoint polled every few seconds does not flood the log.
        if first:
            log.warning("health check %s failed: %s", name, detail)
        else:
            log.debug("health check %s still failing: %s", name, detail)
        return CheckResult(name, False, detail, seconds)

    def _log_recovery(self, name: str) -> None:
        with self._lock:
            recovered = name in self._failing
            self._failing.discard(name)
        if recovered:
            log.info("health check %s passes again", name)


class HealthChecker:
    def __init__(
        self,
        probes: Mapping[str, Probe],
        metric_sources: MetricSources | None,
        *,
        max_staging_age_s: float,
        redact: Callable[[object], str],
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        """``probes`` should include ``staging`` returning the :class:`LoadState` it read;
        ``metric_sources`` provides the cached staging listing for freshness; ``redact``
        (``ExporterSources.redactor()``, no default so it cannot be forgotten) cleans every
        text a probe returns or raises."""
        self.probes = dict(probes)
        self.metric_sources = metric_sources
        self.max_staging_age_s = max_staging_age_s
        self.timeout_s = timeout_s
        self.prober = Prober(timeout_s, redact)

    def check(self) -> HealthReport:
        started = time.monotonic()
        listing = self.metric_sources.staging if self.metric_sources else None
        if listing is not None:
            listing.read(0)  # the listing refreshes while the probes run
        ran = self.prober.run(self.probes)
        results = [ran[name][0] for name in self.probes]
        kafka, missing = ran.get("kafka", (None, None))
        if kafka is not None and kafka.ok and missing:
            results[results.index(kafka)] = replace(kafka, degraded=True)
        staging_result, state = ran.get("staging", (None, None))
        results.append(quarantine_result(state, staging_result))
        results.append(stage_path_result())
        if listing is not None:
            reading = listing.read(max(0.0, started + self.timeout_s - time.monotonic()))
            now = self.metric_sources.clock()
            results.append(freshness_result(reading, self.max_staging_age_s, now))
        return HealthReport(
            tuple(results),
            datetime.now(UTC),
            {
                "check_timeout_seconds": self.timeout_s,
                "max_staging_age_seconds": self.max_staging_age_s,
            },
        )


def stage_path_result() -> CheckResult:
    """Which stage path this installation's stage tasks take: informational, never unhealthy
    (the Python path is complete; the native kernel is the fast path, docs/architecture.md)."""
    from kbqe_dagster.staging.native_kernel import kernel_status

    return CheckResult("stage_path", True, str(kernel_status()), 0.0)


def quarantine_result(state: LoadState | None, staging: CheckResult | None) -> CheckResult:
    if state is None:
        why = staging.detail if staging is not None else "no staging probe"
        return CheckResult(
            "quarantine", False, f"unknown: the load state was not read ({why})", 0.0
        )
    tables = sorted(f"{d}.{t}" for d, t in state.quarantined_tables())
    if tables:
        return CheckResult(
            "quarantine",
            False,
            f"quarantined files in {', '.join(tables)}: see _kbqe/quarantine/ in the staging area",
            0.0,
        )
    return CheckResult("quarantine", True, "no table has quarantined files", 0.0)


def freshness_result(reading: Any, limit_s: float, now: float) -> CheckResult:
    name = "staging_freshness"
    if reading.value is None:
        why = reading.error or "no listing of the staging area yet"
        return CheckResult(name, False, f"unknown: {why}", reading.duration_s or 0.0)
    view = reading.value
    listing_age = reading.age_s(now) or 0.0
    oldest = view.oldest_pending()
    if oldest is None:
        return CheckResult(
            name, True, f"no committed file waits for a load (listing {listing_age:.0f}s old)", 0.0
        )
    age = oldest.oldest_age_s + listing_age
    ok = age <= limit_s
    return CheckResult(
        name,
        ok,
        f"oldest file waiting for a load is {age:.0f}s old ({oldest.dataset}.{oldest.table}, "
        f"{oldest.state.value}); limit {limit_s:.0f}s",
        0.0,
    )


# --- the real probes -------------------------------------------------------------------------
def default_probes(
    sources: ExporterSources, timeout_s: float = DEFAULT_TIMEOUT_S
) -> dict[str, Probe]:
    """The real probes; their clients are built on first use and reused, so a probe every few
    seconds does not create a connection (and a credentials lookup) each time."""
    store = sources.staging.open()
    admin = functools.cache(lambda: kafka_admin(sources))
    probes: dict[str, Probe] = {
        "kafka": lambda: kafka_probe(admin(), sources, timeout_s),
        "schema_registry": lambda: registry_probe(sources, timeout_s),
        "staging": lambda: staging_probe(store),
    }
    if sources.bigquery is not None:
        client = functools.cache(sources.bigquery.client)
        dataset = sources.pipeline.dead_letter.dataset
        probes["bigquery"] = lambda: bigquery_probe(client(), dataset, timeout_s)
    return probes


def kafka_admin(sources: ExporterSources) -> Any:
    from confluent_kafka.admin import AdminClient

    # librdkafka's own log lines go through logging (and its handlers), not raw stderr.
    return AdminClient(sources.kafka.config(logger=logging.getLogger("kbqe_dagster.kafka")))


def kafka_probe(admin: Any, sources: ExporterSources, timeout_s: float) -> tuple[str, Any]:
    """The detail, and the configured topics Kafka does not hold (the check is then degraded)."""
    meta = admin.list_topics(timeout=timeout_s)
    missing = sorted(t.name for t in sources.pipeline.topics if t.name not in meta.topics)
    detail = f"{len(meta.brokers)} broker(s) answered"
    if missing:
        detail += (
            f"; configured topic(s) missing in Kafka (not created yet, or deleted; not "
            f"staged until they exist): {', '.join(missing)}"
        )
    return detail, tuple(missing)


def registry_probe(sources: ExporterSources, timeout_s: float) -> tuple[str, Any]:
    from confluent_kafka.schema_registry import SchemaRegistryClient

    conf = {**sources.registry.client_config(), "timeout": timeout_s, "max.retries": 0}
    with SchemaRegistryClient(conf) as client:
        subjects = client.get_subjects()
    return f"{len(subjects)} subject(s)", None


def staging_probe(store: StagingStore) -> tuple[str, Any]:
    state = read_load_state(store)
    return (
        f"listed; load state: {len(state.pending_jobs())} pending job(s), "
        f"{len(state.quarantined)} quarantined file(s)",
        state,
    )


def bigquery_probe(client: Any, dataset: str, timeout_s: float) -> tuple[str, Any]:
    from google.api_core.exceptions import NotFound

    try:
        client.get_dataset(f"{client.project}.{dataset}", retry=None, timeout=timeout_s)
    except NotFound:
        return f"answered (dataset {dataset} not created yet)", None
    return f"answered (dataset {dataset} exists)", None
