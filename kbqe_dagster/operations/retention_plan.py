"""``kbqe retention plan``: which done files the retention schedule would delete, in order,
and why every other one is kept (``core/retention.plan_retention``) — a dry run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kbqe_dagster.core.protocol.retention_plan import KeptDoneFile, plan_retention
from kbqe_dagster.operations.snapshot import take_snapshot
from kbqe_dagster.resources.staging_store import StagingStore


@dataclass(frozen=True)
class RetentionReport:
    staging: str
    delete: tuple[str, ...]
    """Done files to delete, in this order (every prefix of it is safe)."""
    keep: tuple[KeptDoneFile, ...]
    unrecognized: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "staging": self.staging,
            "delete": list(self.delete),
            "keep": [k.name for k in self.keep],
            "kept": [
                {"name": k.name, "reason": k.reason.name.lower(), "why": k.reason.value}
                for k in self.keep
            ],
            "unrecognized": list(self.unrecognized),
        }


def retention_plan(store: StagingStore) -> RetentionReport:
    listing = take_snapshot(store).listing
    plan = plan_retention(listing)
    keep = tuple(sorted(plan.keep, key=lambda k: k.name))
    return RetentionReport(
        store.location.url, plan.delete, keep, tuple(sorted(listing.unrecognized))
    )
