"""``kbqe completeness``: per table, the newest complete DAY partition (an HOUR table's: hour,
``2026-11-23T14``) and what holds the next one back (core/completeness/decision.py decides,
operations/completeness.py reads the systems)."""

from __future__ import annotations

import argparse
from datetime import date
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

NOT_COMPLETE_EXIT = 3
"""``--day`` given and that day is not complete for every table shown. Not 2: argparse
exits 2 on a usage error, and a script must tell "not yet" from "wrong command line"."""


def add_completeness(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    cmd = sub.add_parser(
        "completeness",
        parents=[common, staging_options(), config_option()],
        help="newest complete day per table, and which partitions hold the next one back",
        description="A day of a table is complete when every Kafka partition feeding it is "
        "staged and loaded past the day's end plus the configured lateness; a "
        "partition loaded up to its high watermark never holds a day back, and a "
        "declared day stays declared. Reads only: completeness_sensor and `kbqe "
        "run --until-idle` declare days and keep the late counts.",
    )
    cmd.add_argument("--table", metavar="DATASET.TABLE", help="only this table")
    cmd.add_argument(
        "--day",
        metavar="YYYY-MM-DD",
        type=date.fromisoformat,
        help=f"exit {NOT_COMPLETE_EXIT} unless this day is complete for every "
        "table shown (for scripts)",
    )
    cmd.add_argument(
        "--bootstrap-servers",
        metavar="HOST:PORT",
        help="Kafka (default: the KBQE_ENV environment's, the local stack's)",
    )
    cmd.set_defaults(handler=_completeness)


def _completeness(args: argparse.Namespace) -> int:
    from kbqe_dagster.operations.completeness import evaluate

    if args.table is not None and args.table.count(".") != 1:
        raise OperatorCommandError(f"--table {args.table!r}: expected DATASET.TABLE")
    report = evaluate(
        pipeline_config(args),
        open_store(args),
        watermark_reader(args),
        now(),
        table=args.table,
    )
    emit(args, report, render_completeness)
    if args.day is not None:
        # An HOUR table's day is complete with its 23:00 UTC hour.
        complete = all(
            t.verdict.unit.covers_day(t.verdict.newest_complete, args.day)
            for t in report.tables.values()
        )
        return 0 if complete and report.tables else NOT_COMPLETE_EXIT
    return 0


def watermark_reader(args: argparse.Namespace) -> Any:
    """Kafka's watermarks, read in one batch for every feeding partition."""
    from kbqe_dagster.resources.environment import kafka_settings_for
    from kbqe_dagster.resources.kafka.cluster import watermarks_of

    # The runs' Kafka and authentication; --bootstrap-servers changes where, not how.
    settings = kafka_settings_for(args.bootstrap_servers)
    return lambda topics: watermarks_of(settings, topics)


def render_completeness(report: Any) -> str:
    from kbqe_dagster.cli import render

    rows = []
    for name, t in sorted(report.tables.items()):
        v = t.verdict
        held = ", ".join(
            f"{h.topic}[{h.partition}] {h.behind_messages} msg"
            + (f" / {render.age(h.behind_seconds)}" if h.behind_seconds is not None else "")
            + f" ({h.waiting_for})"
            for h in v.held_back_by
        ) or ("-" if v.newest_complete else "no feeding partition known")
        rows.append(
            [
                name,
                v.basis,
                v.key(v.newest_complete) or "-",
                held,
                str(sum(t.late_after_complete.values())),
            ]
        )
    if not rows:
        return "no table: nothing is routed statically and the staging area holds no file"
    return render.table(
        ["table", "basis", "newest complete", "next day held back by", "late after complete"],
        rows,
    )
