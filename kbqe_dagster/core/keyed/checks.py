"""The asset checks of a keyed current table ``D.T``, decided once, here: the merge job and
the standalone checks both report these verdicts (what they measure comes from
keyed/merge.py's :meth:`~kbqe_dagster.keyed.merge.KeyedMerger.check`).

- ``keys_unique``: no key has two rows.
- ``matches_changelog``: ``D.T`` equals each key's greatest event recomputed from the changelog
  rows the merge has applied (every column compared). Above :data:`SAMPLE_ABOVE_ROWS`
  changelog rows, a seeded sample of :data:`SAMPLE_PER_MILLE` ‰ of the keys is compared; the
  seed is the evaluation's date, so every key is covered over time.
- ``no_deleted_rows`` (``deletes: hard`` only): no row's winning event is a delete.
"""

from __future__ import annotations

from dataclasses import dataclass

from kbqe_dagster.core.keyed.contract import DeleteMode
from kbqe_dagster.core.load.checks import Verdict

KEYS_UNIQUE = "keys_unique"
MATCHES_CHANGELOG = "matches_changelog"
NO_DELETED_ROWS = "no_deleted_rows"

SAMPLE_ABOVE_ROWS = 10_000_000
"""Changelogs larger than this are compared on a sample of keys (the comparison reads the
whole changelog's columns: a billed query)."""
SAMPLE_PER_MILLE = 10


def check_names(deletes: DeleteMode) -> tuple[str, ...]:
    base = (KEYS_UNIQUE, MATCHES_CHANGELOG)
    return base + ((NO_DELETED_ROWS,) if deletes is DeleteMode.HARD else ())


def sample_for(changelog_rows: int | None, seed: str) -> tuple[str, int] | None:
    """``(seed, per mille)`` for a changelog too large to compare whole, else None."""
    if changelog_rows is None or changelog_rows <= SAMPLE_ABOVE_ROWS:
        return None
    return (seed, SAMPLE_PER_MILLE)


@dataclass(frozen=True)
class KeyedCheck:
    """What was measured on one current table."""

    table: str
    rows: int
    duplicate_keys: int
    extra: int
    """Rows of the table that the recomputation from the changelog does not have."""
    missing: int
    """Rows of the recomputation that the table does not have."""
    deleted_rows: int
    deletes: DeleteMode
    sample: tuple[str, int] | None = None


def keyed_verdicts(check: KeyedCheck) -> list[Verdict]:
    compared = (
        "all keys"
        if check.sample is None
        else f"keys sampled at {check.sample[1]} per mille, seed {check.sample[0]}"
    )
    verdicts = [
        Verdict(
            KEYS_UNIQUE,
            check.duplicate_keys == 0,
            metadata={"rows": check.rows, "duplicate_keys": check.duplicate_keys},
        ),
        Verdict(
            MATCHES_CHANGELOG,
            check.extra == 0 and check.missing == 0,
            metadata={
                "rows": check.rows,
                "rows_not_in_changelog_state": check.extra,
                "changelog_state_rows_missing": check.missing,
                "compared": compared,
            },
        ),
    ]
    if check.deletes is DeleteMode.HARD:
        verdicts.append(
            Verdict(
                NO_DELETED_ROWS,
                check.deleted_rows == 0,
                metadata={"deleted_rows": check.deleted_rows},
            )
        )
    return verdicts
