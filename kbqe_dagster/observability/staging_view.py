"""What the staging area holds right now, for the metrics and the health check: the one
definition of pending files (``core/load/pending.py``) over one listing of the staging location
plus the load state file (``operations/snapshot.py``), the same reading ``kbqe staging
status`` does, so the metrics, the checks and the operator command never disagree."""

from __future__ import annotations

from datetime import datetime

from kbqe_dagster.core.load.pending import PendingFiles, PendingState, StagingView, staging_view
from kbqe_dagster.operations.snapshot import read_load_state, take_snapshot
from kbqe_dagster.resources.staging_store import StagingStore

__all__ = ["PendingFiles", "PendingState", "StagingView", "read_staging_view"]


def read_staging_view(store: StagingStore, now: datetime) -> StagingView:
    """List the staging area once and read its load state."""
    snapshot = take_snapshot(store)
    return staging_view(snapshot.files.values(), read_load_state(store), now)
