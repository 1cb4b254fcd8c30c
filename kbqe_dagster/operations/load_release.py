"""``kbqe load release``: release a table's quarantined files so the next load cycle plans
them again (``core/load_state.release_quarantine``) — a dry run unless told to write.

The state file is read and saved through ``loading/state_file.StateFile``, as the load
coordinator does: the previous version goes to the backup first. Nothing else changes: the
avro and done files stay where they are, and so do the quarantine notes under
``_kbqe/quarantine/<dataset>.<table>/`` (the history of what failed). The released job
records stay too; the coordinator prunes them once they are older than the load history.

This runs outside Dagster, so the load op's singleton pool does not guard it: a load cycle
saving the state between this command's read and save would lose one of the two writes.
The operator pauses the load schedules first; the command says so every time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kbqe_dagster.core.errors import OperatorCommandError
from kbqe_dagster.core.load.state import QuarantinedFile, release_quarantine
from kbqe_dagster.loading.state_file import StateFile
from kbqe_dagster.resources.staging_store import StagingStore

# Where loading/coordinator.py writes its notes (not imported from there: it loads Dagster).
QUARANTINE_NOTES = "_kbqe/quarantine/"


@dataclass(frozen=True)
class ReleaseReport:
    staging: str
    dataset: str
    table: str
    released: tuple[QuarantinedFile, ...]
    """The files released (or, in a dry run, that would be), in load-state order."""
    still_quarantined: tuple[str, ...]
    """Quarantined files of the table that stay quarantined (not named)."""
    dry_run: bool

    @property
    def notes(self) -> str:
        return f"{QUARANTINE_NOTES}{self.dataset}.{self.table}/"

    def to_json(self) -> dict[str, Any]:
        return {
            "staging": self.staging,
            "dataset": self.dataset,
            "table": self.table,
            "dry_run": self.dry_run,
            "released": [
                {
                    "file": q.file,
                    "job_id": q.job_id,
                    "error": q.error,
                    "quarantined_at": q.quarantined_at.isoformat(),
                }
                for q in self.released
            ],
            "still_quarantined": list(self.still_quarantined),
            "notes": self.notes,
        }


def parse_table(text: str) -> tuple[str, str]:
    """``"acme_sales.orders"`` → ``("acme_sales", "orders")``."""
    dataset, dot, table = text.partition(".")
    if not dot or not dataset or not table or "." in table:
        raise OperatorCommandError(
            f"--table: {text!r} is not DATASET.TABLE (e.g. --table acme_sales.orders)"
        )
    return dataset, table


def release(
    store: StagingStore, table: str, files: Sequence[str] = (), *, dry_run: bool = True
) -> ReleaseReport:
    """Release ``files`` (default: all) of ``table``'s quarantined files.

    Refused, with nothing written, when the table has no quarantined file or a named file is
    not one of them. With ``dry_run`` nothing is written either.
    """
    dataset, name = parse_table(table)
    state_file = StateFile(store)
    state = state_file.read()
    mine = tuple(q for q in state.quarantined if (q.dataset, q.table) == (dataset, name))
    if not mine:
        others = sorted(f"{d}.{t}" for d, t in state.quarantined_tables())
        where = f"quarantined tables: {', '.join(others)}" if others else "no table has any"
        raise OperatorCommandError(
            f"{dataset}.{name} has no quarantined file in {store.location.url}; nothing to "
            f"release ({where})"
        )
    held = {q.file for q in mine}
    unknown = [f for f in dict.fromkeys(files) if f not in held]
    if unknown:
        more = f" (and {len(unknown) - 1} more)" if len(unknown) > 1 else ""
        raise OperatorCommandError(
            f"--file {unknown[0]}{more}: not a quarantined file of {dataset}.{name}; nothing "
            f"was released (`kbqe load release --table {dataset}.{name}` lists them)"
        )
    chosen = set(files) or held
    released = tuple(q for q in mine if q.file in chosen)
    if not dry_run:
        state_file.save(release_quarantine(state, chosen))
    return ReleaseReport(
        staging=store.location.url,
        dataset=dataset,
        table=name,
        released=released,
        still_quarantined=tuple(q.file for q in mine if q.file not in chosen),
        dry_run=dry_run,
    )
