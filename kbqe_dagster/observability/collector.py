"""The Prometheus collector: metric values computed at scrape time from durable sources.

Three sources, each a :class:`CachedSource` (time to live, one refresh in flight, bounded
wait) so that a burst of scrapes costs one round of requests:

- ``staging``: one listing of the staging area plus the load state file → pending files,
  bytes and ages per table, file counts, load jobs by status, quarantined tables;
- ``kafka``: watermarks of every configured topic against the done files → lag;
- ``dagster``: the instance's event log, read incrementally → stage and load counters.

A source that fails is reported by ``kbqe_exporter_source_up{source} 0`` and its gauges are
left out rather than served stale; the event-log counters keep their last totals (they are
totals, still true). The load counters need the event log *and* the state file, so they are
left out while either is missing — a partial sum would look like a counter reset.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import dagster as dg
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from kbqe_dagster.observability import families
from kbqe_dagster.observability.cache import CachedSource, Reading
from kbqe_dagster.observability.event_log import EventLogFold
from kbqe_dagster.observability.event_totals import EventTotals
from kbqe_dagster.observability.lag import LagView, read_lag
from kbqe_dagster.observability.sources import ExporterSources, open_instance
from kbqe_dagster.observability.staging_view import StagingView, read_staging_view

DEFAULT_TTL_S = 15.0
DEFAULT_WAIT_S = 5.0
JOB_MEMORY_MARGIN = timedelta(days=1)


class NoDagsterInstance(Exception):
    """No Dagster home configured: the event-log metrics cannot be computed."""


@dataclass(frozen=True)
class Readings:
    staging: Reading[StagingView]
    kafka: Reading[LagView]
    dagster: Reading[EventTotals]
    at: float


class MetricSources:
    """The exporter's cached sources, built from the environment's connections."""

    def __init__(
        self,
        sources: ExporterSources,
        *,
        ttl_s: float = DEFAULT_TTL_S,
        instance: Callable[[], dg.DagsterInstance] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``instance``: how to open the Dagster instance (default: ``sources.dagster_home``)."""
        self.sources = sources
        self.redact = sources.redactor()
        self.clock = clock
        store = sources.staging.open()
        describe = self._describe
        self.staging: CachedSource[StagingView] = CachedSource(
            "staging",
            lambda: read_staging_view(store, datetime.now(UTC)),
            ttl_s,
            describe_error=describe,
            clock=clock,
        )
        self.kafka: CachedSource[LagView] = CachedSource(
            "kafka",
            lambda: read_lag(store, sources.kafka, sources.pipeline, self.redact),
            ttl_s,
            describe_error=describe,
            clock=clock,
        )
        keep = sources.pipeline.retention.keep_load_history + JOB_MEMORY_MARGIN
        fold = EventLogFold(instance or self._open_instance, keep_jobs_for=keep)
        self.dagster: CachedSource[EventTotals] = CachedSource(
            "dagster",
            fold.refresh,
            ttl_s,
            keep_on_error=True,
            describe_error=describe,
            clock=clock,
        )

    def _open_instance(self) -> dg.DagsterInstance:
        if not self.sources.dagster_home:
            raise NoDagsterInstance(
                "no Dagster instance: set DAGSTER_HOME (or pass --dagster-home) to the "
                "instance the stage and load runs report to"
            )
        return open_instance(self.sources.dagster_home)

    def _describe(self, error: BaseException) -> str:
        return self.redact(f"{type(error).__name__}: {error}")

    def read(self, wait_s: float) -> Readings:
        """All three readings; their refreshes run in parallel, so the wait is shared."""
        deadline = self.clock() + wait_s
        all_sources = (self.staging, self.kafka, self.dagster)
        for source in all_sources:
            source.read(0)  # starts the refresh of a stale source without waiting
        staging, kafka, dagster = (s.read(max(0.0, deadline - self.clock())) for s in all_sources)
        return Readings(staging, kafka, dagster, self.clock())


class KbqeCollector(Collector):
    """Yields every kbqe metric family from the readings of :class:`MetricSources`."""

    def __init__(self, sources: MetricSources, wait_s: float = DEFAULT_WAIT_S) -> None:
        self.sources = sources
        self.wait_s = wait_s

    def describe(self) -> list[Metric]:
        return []  # nothing to collect at registration: the first scrape does it

    def collect(self) -> Iterator[Metric]:
        r = self.sources.read(self.wait_s)
        yield from exporter_families(r)
        if r.staging.ok:
            assert r.staging.value is not None
            yield from families.staging_families(r.staging.value)
            yield from families.load_state_families(r.staging.value.state)
        if r.kafka.ok:
            assert r.kafka.value is not None
            yield from families.lag_families(r.kafka.value)
        if r.dagster.value is not None:
            yield from families.stage_families(r.dagster.value)
            yield from families.storage_write_families(r.dagster.value)
            if r.staging.ok:
                assert r.staging.value is not None
                yield from families.load_families(r.dagster.value, r.staging.value.state)


def exporter_families(r: Readings) -> Iterator[Metric]:
    named = (("staging", r.staging), ("kafka", r.kafka), ("dagster", r.dagster))
    up = GaugeMetricFamily(
        "kbqe_exporter_source_up",
        "1 when the latest refresh of the source succeeded.",
        labels=["source"],
    )
    age = GaugeMetricFamily(
        "kbqe_exporter_source_age_seconds",
        "Age of the values served from the source.",
        labels=["source"],
    )
    took = GaugeMetricFamily(
        "kbqe_exporter_source_duration_seconds",
        "Duration of the source's latest refresh.",
        labels=["source"],
    )
    for name, reading in named:
        up.add_metric([name], 1.0 if reading.ok else 0.0)
        reading_age = reading.age_s(r.at)
        if reading_age is not None:
            age.add_metric([name], round(reading_age, 3))
        if reading.duration_s is not None:
            took.add_metric([name], round(reading.duration_s, 3))
    yield up
    yield age
    yield took
