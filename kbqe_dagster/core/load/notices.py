"""Schema and table notices: a table was created, gained columns, or relaxed a column
(REQUIRED → NULLABLE) — what a data engineer wants to hear about without watching every
load. Pure: the diff of two column lists, the notice document, and the remembered schemas.

The load step remembers each table's columns as of its last finished load
(``_kbqe/table_schemas.json`` in the staging area), so a schema change is noticed once,
whichever process (load cycle, poll, ``kbqe run``) finishes the job that caused it. A table
seen for the first time is a **created** table when it was created by one of kbqe's loads
(its creation time is not before the job was planned); otherwise it is adopted silently
(for example the tables of the original Scala project).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from enum import StrEnum
from typing import Any

KNOWN_SCHEMAS_FILE = "_kbqe/table_schemas.json"


@dataclass(frozen=True)
class Column:
    name: str
    type: str
    mode: str = "NULLABLE"


class NoticeKind(StrEnum):
    TABLE_CREATED = "table_created"
    COLUMNS_ADDED = "columns_added"
    COLUMNS_RELAXED = "columns_relaxed"


@dataclass(frozen=True)
class SchemaNotice:
    table: str
    """``dataset.table``."""
    kind: NoticeKind
    columns: tuple[str, ...]
    """The columns concerned: all (created), the new ones, or the relaxed ones."""
    before: tuple[Column, ...] | None
    after: tuple[Column, ...]
    job_id: str | None = None
    """The load job whose finish revealed the change."""

    @property
    def text(self) -> str:
        """One line for people (the ``text`` field Slack-compatible webhooks show)."""
        names = ", ".join(self.columns)
        if self.kind is NoticeKind.TABLE_CREATED:
            return f"kbqe: table {self.table} created with {len(self.columns)} column(s): {names}"
        if self.kind is NoticeKind.COLUMNS_ADDED:
            return f"kbqe: table {self.table} gained column(s) {names}"
        return f"kbqe: table {self.table} relaxed column(s) {names} to NULLABLE"

    def to_json(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "table": self.table,
            "kind": str(self.kind),
            "columns": list(self.columns),
            "job_id": self.job_id,
            "before": None if self.before is None else [asdict(c) for c in self.before],
            "after": [asdict(c) for c in self.after],
        }


def schema_notices(
    table: str,
    before: Sequence[Column] | None,
    after: Sequence[Column],
    *,
    created: bool = False,
    job_id: str | None = None,
) -> list[SchemaNotice]:
    """What changed from ``before`` (None: the table was not known) to ``after``.
    ``created``: an unknown table was created by kbqe's load (else it is adopted silently)."""
    after = tuple(after)
    if before is None:
        if not created:
            return []
        return [
            SchemaNotice(
                table, NoticeKind.TABLE_CREATED, tuple(c.name for c in after), None, after, job_id
            )
        ]
    before = tuple(before)
    old = {c.name.lower(): c for c in before}
    added = tuple(c.name for c in after if c.name.lower() not in old)
    relaxed = tuple(
        c.name
        for c in after
        if c.name.lower() in old and old[c.name.lower()].mode == "REQUIRED" and c.mode == "NULLABLE"
    )
    notices = []
    if added:
        notices.append(SchemaNotice(table, NoticeKind.COLUMNS_ADDED, added, before, after, job_id))
    if relaxed:
        notices.append(
            SchemaNotice(table, NoticeKind.COLUMNS_RELAXED, relaxed, before, after, job_id)
        )
    return notices


def encode_known(known: Mapping[str, Iterable[Column]]) -> bytes:
    return json.dumps(
        {
            "version": 1,
            "tables": {t: [asdict(c) for c in cols] for t, cols in sorted(known.items())},
        },
        indent=1,
    ).encode()


def decode_known(content: bytes | None) -> dict[str, tuple[Column, ...]]:
    """The remembered schemas; an unreadable file is forgotten (the next load re-learns every
    table; at worst a change is not noticed once — never a wrong load)."""
    if not content:
        return {}
    try:
        raw = json.loads(content)
        return {t: tuple(Column(**c) for c in cols) for t, cols in raw["tables"].items()}
    except (ValueError, KeyError, TypeError):
        return {}
