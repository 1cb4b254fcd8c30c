"""``kbqe erase``: erase a data subject's rows from the tables of ``erasure:`` now, as one
erasure batch (operations/erasure_batch.py) that also re-runs every pending request."""

from __future__ import annotations

import argparse
import os
import uuid
from typing import Any

from kbqe_dagster.cli.common import (
    SubParsers,
    config_option,
    emit,
    now,
    open_store,
    pipeline_config,
    staging_options,
)
from kbqe_dagster.core.errors import OperatorCommandError

PENDING_EXIT = 3
"""The request was applied but rows of its subject may still arrive (staged, in flight or in
Kafka when it arrived): it stays pending until a later batch (the ``erasure`` job, ``kbqe run
--until-idle`` or ``kbqe erase --pending``) sees them loaded and erased."""


def add_erase(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    cmd = sub.add_parser(
        "erase",
        parents=[common, staging_options(), config_option()],
        help="erase a data subject's rows from every table of erasure: (right to be forgotten)",
        description="One DELETE per table for this subject and every pending request, "
        "audited with the subject's salted hash (never the subject). The request stays "
        "pending, its DELETE re-run by later batches, until every message Kafka held when it "
        "arrived is loaded. Kafka itself is not erased: docs/operations.md, 'Erasure'.",
    )
    cmd.add_argument("--subject", metavar="ID", help="the subject id to erase")
    cmd.add_argument(
        "--table",
        metavar="DATASET.TABLE",
        action="append",
        default=[],
        help="only this table (repeatable; each must be covered by erasure.tables)",
    )
    cmd.add_argument("--request-id", metavar="ID", help="the request's id (default: cli-<random>)")
    cmd.add_argument(
        "--pending",
        action="store_true",
        help="no new subject: re-run the pending requests only",
    )
    cmd.add_argument(
        "--dry-run",
        action="store_true",
        help="count the rows that would be deleted; delete, audit and record nothing",
    )
    cmd.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        help="Kafka (default: the KBQE_ENV environment's, the local stack's)",
    )
    cmd.set_defaults(handler=_erase)


def _erase(args: argparse.Namespace) -> int:
    from kbqe_dagster.core.erasure.requests import ErasureRequest
    from kbqe_dagster.observability.sources import sources_from_environment
    from kbqe_dagster.operations.erasure_batch import apply_erasures
    from kbqe_dagster.resources.environment import kafka_settings_for
    from kbqe_dagster.resources.kafka.cluster import watermarks_of

    if bool(args.subject) == bool(args.pending):
        raise OperatorCommandError("give --subject ID, or --pending (not both)")
    config = pipeline_config(args)
    sources = sources_from_environment()
    # --bootstrap-servers changes where, not how: the environment's authentication stays.
    settings = sources.kafka
    if args.bootstrap_servers:
        settings = kafka_settings_for(args.bootstrap_servers)
    requests = []
    if args.subject:
        request_id = args.request_id or f"cli-{uuid.uuid4().hex[:12]}"
        requests.append(ErasureRequest(request_id, args.subject, tuple(args.table), "cli"))

    def marks(topics: Any) -> dict[tuple[str, int], tuple[int, int]]:
        return {tp: (w.low, w.high) for tp, w in watermarks_of(settings, topics).items()}

    if sources.bigquery is None:
        raise OperatorCommandError("no BigQuery resource in this environment (KBQE_ENV)")
    report = apply_erasures(
        config,
        open_store(args),
        sources.bigquery.erasure_tables(),
        marks,
        salt=os.environ.get(config.erasure.salt_env, ""),
        now=now(),
        requests=requests,
        dry_run=args.dry_run,
    )
    emit(args, report, render_erasure)
    if any(r.status == "refused" for r in report.requests):
        return 1
    pending = any(r.status == "pending" and r.request_id in {q.request_id for q in requests}
                  for r in report.requests)  # fmt: skip
    return PENDING_EXIT if pending else 0


def render_erasure(report: Any) -> str:
    from kbqe_dagster.cli import render

    lines = []
    what = "would delete" if report.dry_run else "deleted"
    rows = [
        [
            t.table,
            str(t.rows_found) if report.dry_run else str(t.rows_deleted),
            "-" if t.bytes_processed is None else str(t.bytes_processed),
            "whole table" if t.partitions is None else (", ".join(t.partitions) or "none"),
            t.skipped or "",
        ]
        for t in report.tables
    ]
    lines.append(
        render.table(["table", f"rows {what}", "bytes processed", "partitions", "note"], rows)
    )
    for r in report.requests:
        lines.append(
            f"request {r.request_id} ({r.source}): {r.status}, {r.rows_deleted} row(s); {r.note}"
        )
        for w in r.waiting_for:
            lines.append(
                f"  waiting for {w['topic']}[{w['partition']}] offsets {w['from']}..{w['until']} "
                "to be loaded"
            )
    return "\n".join(lines)
