"""The ``erasure:`` section: which tables hold a data subject's rows, by which column, and
where erasure requests come from (the right to be forgotten; docs/operations.md, "Erasure").

::

    erasure:
      requests_topic: kbqe.erasure_requests      # optional: key = request id,
                                                 # value = {"subject": "u-42", "tables": [...]}
      audit: {dataset: kbqe_audit, table: erasure_requests}
      salt_env: KBQE_ERASURE_SALT                # the salt of the audit table's subject hash
      tables:
        shop.orders:     {columns: [customer_id]}
        shop.*:          {columns: [customer.id]}          # a nested field path
        shop.sessions:   {kafka_key: true}                 # the subject is the Kafka key
        kbqe_dead_letters.dead_letters: {kafka_key: true}  # matched on raw_key

A ``tables`` key is ``dataset.table`` or ``dataset.*`` (an exact key wins over its dataset's
wildcard). A keyed topic's table ``D.T`` stands for its current state ``D.T`` and its
changelog ``D.T_changelog`` (the history view ``D.T_history`` reads the changelog). The
salt itself is never in the file: only the name of the environment variable holding it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.protocol.naming import TOPIC_RE
from kbqe_dagster.core.record.routing import allow_pattern_problem, is_valid_dataset, is_valid_table

_SEGMENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,299}")
_ENV_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def column_path_problem(path: str) -> str | None:
    """Why ``path`` is not a column or nested field path (``a``, ``a.b.c``), or ``None``."""
    if all(_SEGMENT_RE.fullmatch(part) for part in path.split(".")):
        return None
    return f"{path!r} is not a column or a nested field path (letters, digits, _, dots)"


@dataclass(frozen=True)
class ErasureTable:
    """Where a data subject's rows are found in one table (or every table of a dataset),
    under ``erasure.tables.<dataset.table | dataset.*>``. At least one of the two keys."""

    columns: tuple[str, ...] = ()
    """Columns, or nested field paths (``customer.id``), holding a subject id: a row whose
    value in any of them is the subject's is erased. Default: none."""
    kafka_key: bool = False
    """The subject id is the Kafka key (its UTF-8 bytes): a row is erased when its key
    column (``enrichment.key_column``, which must be set) holds it; in a ``format: raw``
    archive, its own key column (``_kafka_key`` unless ``enrichment.key_column`` names it); in
    the dead-letter table, its ``raw_key``. Default false."""

    def __post_init__(self) -> None:
        if not self.columns and not self.kafka_key:
            raise ValueError("name the subject's columns, or kafka_key: true")


ERASURE_TABLE_SPEC: dict[str, r.Converter] = {
    "columns": r.list_of(r.checked(r.string, column_path_problem)),
    "kafka_key": r.boolean,
}


@dataclass(frozen=True)
class AuditTable:
    """The audit table of erasure requests, under ``erasure.audit``."""

    dataset: str = "kbqe_audit"
    """Its dataset (created when missing). Default ``kbqe_audit``."""
    table: str = "erasure_requests"
    """The table: one row per request and pass (request id, the subject's salted hash,
    tables, rows deleted, status, when). Default ``erasure_requests``."""


@dataclass(frozen=True)
class ErasureSettings:
    """Erasure of a data subject's rows across tables, under ``erasure:`` (absent: no
    erasure; docs/operations.md, "Erasure")."""

    tables: tuple[tuple[str, ErasureTable], ...] = ()
    """``dataset.table`` or ``dataset.*`` → :class:`ErasureTable`, in file order. Required
    (at least one) when the section is present."""
    requests_topic: str | None = None
    """A Kafka topic of erasure requests read by ``erasure_request_sensor``: key = request
    id (UTF-8), value = JSON ``{"subject": "<id>", "tables": ["dataset.table", ...]}``
    (``tables`` optional: every table of this section). Default: none (``kbqe erase`` only)."""
    audit: AuditTable = field(default_factory=AuditTable)
    """Where every request is recorded."""
    salt_env: str = "KBQE_ERASURE_SALT"
    """The environment variable holding the salt of the subject hash recorded in the audit
    table (HMAC-SHA256): the subject is never written in clear there or in logs. An erasure
    refuses to run while it is unset. Default ``KBQE_ERASURE_SALT``."""

    @property
    def enabled(self) -> bool:
        return bool(self.tables)

    def table_settings(self, dataset: str, table: str) -> ErasureTable | None:
        """The entry covering ``dataset.table``: its exact key, else ``dataset.*``."""
        entries = dict(self.tables)
        return entries.get(f"{dataset}.{table}") or entries.get(f"{dataset}.*")


AUDIT_SPEC: dict[str, r.Converter] = {
    "dataset": r.checked(r.string, lambda d: None if is_valid_dataset(d) else "not a dataset"),
    "table": r.checked(r.string, lambda t: None if is_valid_table(t) else "not a table name"),
}

ERASURE_SPEC: dict[str, r.Converter] = {
    "tables": r.identity,  # read by _read_tables
    "requests_topic": r.nullable(
        r.checked(r.string, lambda t: None if TOPIC_RE.fullmatch(t) else "not a topic name")
    ),
    "audit": r.identity,  # read by _read_audit
    "salt_env": r.checked(r.string, lambda v: None if _ENV_RE.fullmatch(v) else "not a variable"),
}


def read_erasure(raw: Any, problems: r.Problems, path: str = "erasure") -> ErasureSettings:
    """Read the ``erasure:`` section; problems name ``erasure.<key>``."""
    if raw is None:
        return ErasureSettings()
    values = r.read_section(raw, path, ERASURE_SPEC, problems, required=("tables",))
    tables = _read_tables(values.pop("tables", None), problems, f"{path}.tables")
    audit = r.build_section(AuditTable(), values.pop("audit", None), f"{path}.audit", AUDIT_SPEC,
                            problems)  # fmt: skip
    return ErasureSettings(tables=tables, audit=audit, **values)


def _read_tables(raw: Any, problems: r.Problems, path: str) -> tuple[tuple[str, ErasureTable], ...]:
    if raw is None:
        return ()
    if not isinstance(raw, Mapping) or not raw:
        problems.add(path, f"expected a mapping of 'dataset.table' or 'dataset.*' to "
                     f"{{columns, kafka_key}}, got {r.describe(raw)}")  # fmt: skip
        return ()
    out = []
    for key, section in raw.items():
        where = f"{path}.{key}"
        problem = allow_pattern_problem(key)
        if problem:
            problems.add(where, problem.replace("allow-list entry", "table key"))
            continue
        before = len(problems.items)
        values = r.read_section(section, where, ERASURE_TABLE_SPEC, problems)
        if len(problems.items) > before:
            continue
        try:
            out.append((str(key), ErasureTable(**values)))
        except ValueError as error:
            problems.add(where, str(error))
    return tuple(out)
