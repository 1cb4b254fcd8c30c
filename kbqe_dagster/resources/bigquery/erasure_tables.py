"""BigQuery for erasure: the tables of a dataset, a table's subject columns and their types,
the statements of a batch (core/erasure/statements.py) with their job statistics, and the
audit table.

**Emulator gap** (pinned by ``test_emulator_gap_bytes_array_parameter``): the local emulator
hands an ``ARRAY<BYTES>`` query parameter to DuckDB as the values' base64 text, so
``key IN UNNEST(@subjects)`` on a BYTES column fails ("Cannot compare values of type BLOB and
VARCHAR"). :class:`EmulatorErasureTables` compares ``TO_BASE64(key)`` with the base64 text
instead, at this boundary: the statements stay BigQuery's own. The emulator also reports 0
bytes processed for every query: there the figure is ``None`` (unknown), never 0.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kbqe_dagster.core.erasure.statements import Param, Statement

log = logging.getLogger(__name__)

AUDIT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("request_id", "STRING"),
    ("subject_hash", "STRING"),
    ("source", "STRING"),
    ("status", "STRING"),
    ("pass_number", "INT64"),
    ("tables", "STRING"),
    ("rows_deleted", "INT64"),
    ("bytes_processed", "INT64"),
    ("note", "STRING"),
    ("recorded_at", "TIMESTAMP"),
)
"""The audit table: one row per request and pass (docs/operations.md, "Erasure")."""


@dataclass(frozen=True)
class StatementResult:
    rows: tuple[tuple[Any, ...], ...]
    affected_rows: int | None
    bytes_processed: int | None
    """What BigQuery billed (job statistics); None where it is not reported (the emulator)."""
    job_id: str | None


class ErasureTables:
    """BigQuery's side of an erasure, over a ``google.cloud.bigquery`` client."""

    reports_bytes_processed = True

    def __init__(self, client: Any, location: str | None = None) -> None:
        self.client = client
        self.location = location

    # --- what exists ---------------------------------------------------------------------
    def base_tables(self, dataset: str) -> list[str]:
        """The tables (not views) of ``dataset``; none when it does not exist."""
        from google.api_core.exceptions import NotFound

        try:
            return sorted(
                t.table_id for t in self.client.list_tables(dataset) if t.table_type == "TABLE"
            )
        except NotFound:
            return []

    def column_types(self, dataset: str, table: str) -> dict[str, tuple[str, str]]:
        """Every column and nested field path of ``dataset.table`` → (type, mode)."""
        schema = self._schema(dataset, table)
        out: dict[str, tuple[str, str]] = {}

        def walk(fields: Iterable[Any], prefix: str, repeated: bool) -> None:
            for f in fields:
                path = f"{prefix}{f.name}"
                mode = "REPEATED" if repeated or f.mode == "REPEATED" else (f.mode or "NULLABLE")
                out[path] = (f.field_type, mode)
                if f.field_type in ("RECORD", "STRUCT"):
                    walk(f.fields, path + ".", mode == "REPEATED")

        walk(schema, "", False)
        return out

    def _schema(self, dataset: str, table: str) -> list[Any]:
        return list(self.client.get_table(f"{dataset}.{table}").schema)

    # --- statements ----------------------------------------------------------------------
    def run(self, statement: Statement, *, dry_run: bool = False) -> StatementResult:
        """Run ``statement``; ``dry_run``: BigQuery's estimate of its bytes, nothing run."""
        from google.cloud import bigquery

        sql, params = self._adapted(statement)
        config = bigquery.QueryJobConfig(
            query_parameters=[_parameter(p) for p in params], dry_run=dry_run
        )
        job = self.client.query(sql, job_config=config, location=self.location, job_retry=None)
        rows: tuple[tuple[Any, ...], ...] = ()
        if not dry_run:
            rows = tuple(tuple(row.values()) for row in job.result())
        processed = getattr(job, "total_bytes_processed", None)
        return StatementResult(
            rows=rows,
            affected_rows=getattr(job, "num_dml_affected_rows", None),
            bytes_processed=int(processed) if processed and self.reports_bytes_processed else None,
            job_id=getattr(job, "job_id", None),
        )

    def estimate(self, statement: Statement) -> int | None:
        """BigQuery's own estimate of the bytes ``statement`` would process (a dry run:
        nothing runs, nothing is billed); for ``kbqe erase --dry-run``."""
        return self.run(statement, dry_run=True).bytes_processed

    def _adapted(self, statement: Statement) -> tuple[str, tuple[Param, ...]]:
        return statement.sql, statement.params

    # --- the audit table -----------------------------------------------------------------
    def ensure_audit_table(self, dataset: str, table: str) -> None:
        from google.cloud import bigquery

        self.client.create_dataset(dataset, exists_ok=True)
        schema = [bigquery.SchemaField(name, kind) for name, kind in AUDIT_COLUMNS]
        self.client.create_table(bigquery.Table(self._ref(dataset, table), schema=schema),
                                 exists_ok=True)  # fmt: skip

    def append_audit(self, dataset: str, table: str, rows: Sequence[Mapping[str, Any]]) -> None:
        """One INSERT of ``rows`` (values as query parameters: nothing is spliced)."""
        if not rows:
            return
        from google.cloud import bigquery

        names = [name for name, _ in AUDIT_COLUMNS]
        params = []
        tuples = []
        for i, row in enumerate(rows):
            placeholders = []
            for name, kind in AUDIT_COLUMNS:
                params.append(bigquery.ScalarQueryParameter(f"{name}_{i}", kind, row.get(name)))
                placeholders.append(f"@{name}_{i}")
            tuples.append(f"({', '.join(placeholders)})")
        sql = f"INSERT INTO `{dataset}.{table}` ({', '.join(names)}) VALUES {', '.join(tuples)}"
        config = bigquery.QueryJobConfig(query_parameters=params)
        self.client.query(sql, job_config=config, location=self.location).result()

    def audited_request_ids(self, dataset: str, table: str) -> set[str]:
        from google.api_core.exceptions import NotFound

        try:
            rows = self.client.query(
                f"SELECT DISTINCT request_id FROM `{dataset}.{table}`", location=self.location
            ).result()
        except NotFound:
            return set()
        return {row[0] for row in rows}

    def _ref(self, dataset: str, table: str) -> str:
        return f"{self.client.project}.{dataset}.{table}"


class EmulatorErasureTables(ErasureTables):
    """:class:`ErasureTables` on the local emulator (module docstring: its gaps)."""

    reports_bytes_processed = False

    def estimate(self, statement: Statement) -> int | None:
        # No estimate to ask for (it answers 0), and a dry run must never reach a DELETE.
        return None

    def _schema(self, dataset: str, table: str) -> list[Any]:
        # The table's metadata misses columns added by ALTER TABLE (resources/bigquery/emulator.py).
        return list(
            self.client.query(f"SELECT * FROM `{dataset}.{table}` LIMIT 0", job_retry=None)
            .result()
            .schema
        )

    def _adapted(self, statement: Statement) -> tuple[str, tuple[Param, ...]]:
        import base64

        sql = statement.sql
        params = []
        for p in statement.params:
            if p.type == "BYTES" and p.array:
                sql = re.sub(
                    rf"([\w`.]+) IN UNNEST\(@{p.name}\)",
                    rf"TO_BASE64(\1) IN UNNEST(@{p.name})",
                    sql,
                )
                encoded = tuple(base64.b64encode(v).decode() for v in p.values)
                params.append(Param(p.name, "STRING", encoded))
            else:
                params.append(p)
        # A BYTES column selected back (a count) is read as bytes either way.
        return sql, tuple(params)


def _parameter(param: Param) -> Any:
    from google.cloud import bigquery

    if param.array:
        return bigquery.ArrayQueryParameter(param.name, param.type, list(param.values))
    return bigquery.ScalarQueryParameter(param.name, param.type, param.values[0])
