"""The asset checks of the load side, decided once: the load op evaluates them as it goes and
the standalone checks (UI, schedules) evaluate them on demand, both through these functions,
so the two can never judge the same facts differently. Each returns a :class:`Verdict`;
``defs/`` only turns it into Dagster's event type.

- ``rows_loaded``: every job loaded exactly the records its files hold (ERROR when a count
  differs, WARN when a side is unknown);
- ``no_quarantined_files``: the table has no quarantined files;
- ``pending_files_fresh`` (on ``staging``, WARN): the oldest pending file is younger than
  the freshness limit (core/load/pending.py).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ROWS_LOADED = "rows_loaded"
NO_QUARANTINED_FILES = "no_quarantined_files"
PENDING_FILES_FRESH = "pending_files_fresh"

ERROR = "ERROR"
WARN = "WARN"


@dataclass(frozen=True)
class Verdict:
    """One evaluation of one check: plain values, turned into Dagster's types in defs/."""

    name: str
    passed: bool
    severity: str = ERROR
    description: str = ""
    metadata: dict[str, Any] = field(default_factory=dict)
    json_keys: tuple[str, ...] = ()
    """Metadata entries to show as JSON (lists and mappings)."""


@dataclass(frozen=True)
class JobRows:
    """Rows one load job wrote against the records staged in its files."""

    job_id: str
    table: str
    expected: int | None
    loaded: int | None
    source: str

    @property
    def passed(self) -> bool | None:
        if self.expected is None or self.loaded is None:
            return None
        return self.expected == self.loaded


def rows_loaded(jobs: Sequence[JobRows]) -> Verdict:
    failed = [j for j in jobs if j.passed is False]
    unknown = [j for j in jobs if j.passed is None]
    if failed:
        severity, passed = ERROR, False
        what = (
            f"{len(failed)} job(s) loaded a different row count than staged, "
            f"e.g. {failed[0].job_id}"
        )
    elif unknown:
        severity, passed = WARN, False
        what = f"{len(unknown)} job(s) could not be verified (counts unknown), e.g. {unknown[0].job_id}"
    else:
        severity, passed = ERROR, True
        what = f"{len(jobs)} job(s): rows loaded == records staged"
    return Verdict(
        ROWS_LOADED,
        passed,
        severity,
        what,
        metadata={
            "jobs": [
                {
                    "job_id": j.job_id,
                    "table": j.table,
                    "staged_records": j.expected,
                    "rows_loaded": j.loaded,
                    "rows_source": j.source,
                }
                for j in jobs
            ],
            "rows_loaded": sum(j.loaded or 0 for j in jobs),
            "records_staged": sum(j.expected or 0 for j in jobs),
        },
        json_keys=("jobs",),
    )


def no_quarantined_files(
    quarantined_tables: Iterable[str], errors: Mapping[str, str] | None = None
) -> Verdict:
    """``quarantined_tables``: ``dataset.table`` of the asset's tables that hold quarantined
    files; ``errors``: the last error per table, where known."""
    bad = sorted(quarantined_tables)
    return Verdict(
        NO_QUARANTINED_FILES,
        not bad,
        ERROR,
        (
            f"quarantined files in {', '.join(bad)}: loading them failed too often; "
            "`kbqe load plan` lists them, `kbqe load release` retries them"
            if bad
            else "no quarantined files"
        ),
        metadata={"quarantined_tables": bad, "errors": dict(errors or {})},
        json_keys=("quarantined_tables", "errors"),
    )


def pending_files_fresh(age_s: float, files: int, limit_s: float) -> Verdict:
    passed = age_s <= limit_s
    return Verdict(
        PENDING_FILES_FRESH,
        passed,
        WARN,
        (
            f"{files} avro file(s) wait for a load; the oldest for {age_s:.0f}s "
            f"({'within' if passed else 'over'} the {limit_s:.0f}s limit)"
        ),
        metadata={
            "oldest_pending_age_s": round(age_s, 1),
            "pending_files": files,
            "limit_s": limit_s,
        },
    )
