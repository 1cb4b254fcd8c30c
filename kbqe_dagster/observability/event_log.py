"""Reading the Dagster instance's event log incrementally into :class:`EventTotals`.

Stage tasks run in Spark executors and load ops in Dagster run processes: both are gone by
the time Prometheus scrapes, but what they did is in the event log, durably, as the staging
and load materializations they reported. Each refresh reads only the events stored since the
previous one (one cursor per asset key and event kind), so a scrape costs a few indexed
queries however long the history is; the first refresh after a start reads the whole history
and rebuilds the same totals.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import dagster as dg

from kbqe_dagster.core.protocol.naming import STAGING_ASSET
from kbqe_dagster.observability.event_totals import EventTotals

log = logging.getLogger(__name__)

LOAD_ASSET_PREFIX = ["bigquery"]
PAGE = 1000
RANGES_KEPT_FOR = timedelta(hours=1)
"""A job's materializations are all written by one op run: after this its ranges are done."""


class EventLogFold:
    """The totals of every stage, load and retention event read so far."""

    def __init__(
        self,
        instance: Callable[[], dg.DagsterInstance],
        *,
        keep_jobs_for: timedelta,
        clock: Callable[[], float] = time.time,
        page: int = PAGE,
    ) -> None:
        """``keep_jobs_for``: remember load job ids as long as the load state file keeps
        finished jobs (``retention.keep_load_history``) plus a margin."""
        self._open = instance
        self._instance: dg.DagsterInstance | None = None
        self._keep_jobs_for = keep_jobs_for
        self._clock = clock
        self._page = page
        self._cursors: dict[tuple[str, dg.AssetKey], int] = {}
        self.totals = EventTotals()

    @property
    def instance(self) -> dg.DagsterInstance:
        if self._instance is None:
            self._instance = self._open()
        return self._instance

    def refresh(self) -> EventTotals:
        """Fold the events stored since the last refresh; a snapshot of the totals."""
        self._materializations(
            dg.AssetKey([STAGING_ASSET]), lambda meta, _: self.totals.add_stage_run(meta)
        )
        for key in self.instance.get_asset_keys(prefix=LOAD_ASSET_PREFIX):
            self._materializations(key, self.totals.add_load)
        self._observations(
            dg.AssetKey([STAGING_ASSET]), lambda meta, _: self.totals.add_staging_observation(meta)
        )
        now = self._clock()
        self.totals.forget(
            jobs_before=now - self._keep_jobs_for.total_seconds(),
            ranges_before=now - RANGES_KEPT_FOR.total_seconds(),
        )
        return self.totals.snapshot()

    def _materializations(
        self, key: dg.AssetKey, fold: Callable[[dict[str, Any], float], None]
    ) -> None:
        self._read("materialization", key, self.instance.fetch_materializations, fold)

    def _observations(
        self, key: dg.AssetKey, fold: Callable[[dict[str, Any], float], None]
    ) -> None:
        self._read("observation", key, self.instance.fetch_observations, fold)

    def _read(
        self,
        kind: str,
        key: dg.AssetKey,
        fetch: Callable[..., Any],
        fold: Callable[[dict[str, Any], float], None],
    ) -> None:
        cursor = self._cursors.get((kind, key), 0)
        while True:
            result = fetch(
                dg.AssetRecordsFilter(asset_key=key, after_storage_id=cursor),
                limit=self._page,
                ascending=True,
            )
            for record in result.records:
                event = record.asset_materialization or record.asset_observation
                if event is not None:
                    fold(_plain(event.metadata), record.timestamp)
                cursor = max(cursor, record.storage_id)
            self._cursors[(kind, key)] = cursor
            if not result.has_more or not result.records:
                return


def _plain(metadata: dict[str, Any]) -> dict[str, Any]:
    """Metadata values unwrapped: ints, floats, text, JSON as Python data."""
    return {name: getattr(value, "value", value) for name, value in metadata.items()}
