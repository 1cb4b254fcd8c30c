"""Done-file retention in the staging area: delete what ``core/protocol/retention_plan.py`` allows, in its
order, stopping at the first failure (every prefix of the plan is safe, a gap in it is not).

It only deletes done files whose avro file is already gone, so it needs no lock against the
load coordinator; stage runs only add later ranges, which never makes a kept file deletable
by mistake.
"""

from __future__ import annotations

import logging
from collections import Counter
from dataclasses import dataclass, field

from kbqe_dagster.core.protocol.naming import parse_listing
from kbqe_dagster.core.protocol.retention_plan import plan_retention
from kbqe_dagster.resources.staging_store import StagingStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetentionResult:
    deleted: tuple[str, ...]
    kept: int
    kept_by_reason: dict[str, int] = field(default_factory=dict)
    failed: str | None = None
    """The done file whose deletion failed (the rest of the plan waits for the next run)."""
    error: str | None = None


def apply_retention(store: StagingStore) -> RetentionResult:
    """Delete every deletable done file of the staging area, in plan order."""
    plan = plan_retention(parse_listing(f.name for f in store.list()))
    reasons = Counter(str(k.reason.name).lower() for k in plan.keep)
    deleted: list[str] = []
    for name in plan.delete:
        try:
            store.delete(name)  # False (already gone) is as good as deleted
        except Exception as error:  # noqa: BLE001 - any failure stops the ordered plan here
            log.warning("done-file retention stopped at %s: %s", store.uri(name), error)
            return RetentionResult(tuple(deleted), len(plan.keep), dict(reasons), name, str(error))
        deleted.append(name)
    log.info("done-file retention: %d deleted, %d kept", len(deleted), len(plan.keep))
    return RetentionResult(tuple(deleted), len(plan.keep), dict(reasons))
