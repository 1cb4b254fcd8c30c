"""``kbqe run --until-idle [--topic T] [--json]``: the sub-command, its arguments and output.

Registered in ``cli.COMMANDS`` by :func:`add_run`; the catch-up loop itself lives in
``runner/``. Progress lines go to stderr as the rounds go; the result goes to stdout
at the end: a table per topic, per table loaded and per table's completeness, or with
``--json`` exactly one JSON document (:meth:`UntilIdleReport.to_json`). Everything the jobs
write while they run — Spark's JVM, Dagster, libraries — is sent to stderr, so stdout carries
the result alone. Exit code 0 only
when everything was staged and loaded; otherwise 1 and ``kbqe: error: <reason>`` on stderr
(the report is still printed).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from kbqe_dagster.core.errors import OperatorCommandError
from kbqe_dagster.core.load.cost import usd
from kbqe_dagster.runner.report import UntilIdleReport
from kbqe_dagster.runner.until_idle import Limits

log = logging.getLogger("kbqe")


def add_run(sub: Any, common: argparse.ArgumentParser) -> None:
    run = sub.add_parser(
        "run",
        parents=[common],
        help="run the pipeline's stage, load and poll jobs in this process until idle",
        description="Catch up now: stage every topic with a backlog, load, poll until the "
        "load jobs finish, and repeat until there is no backlog and nothing "
        "pending, without waiting for allowed_latency or the load cadence. The "
        "runs are recorded in the Dagster instance ($DAGSTER_HOME, else the local "
        "one). Exits 0 only when everything was staged and loaded.",
    )
    run.add_argument(
        "--until-idle",
        action="store_true",
        required=True,
        help="repeat rounds until nothing is left (the only mode today)",
    )
    run.add_argument(
        "--topic",
        action="append",
        default=[],
        metavar="TOPIC",
        dest="topics",
        help="only this topic of the pipeline file (repeatable; default: all); "
        "loads cover every staged table",
    )
    run.add_argument(
        "--max-rounds",
        type=int,
        default=Limits.max_rounds,
        metavar="N",
        help=f"give up when not idle after N rounds (default {Limits.max_rounds})",
    )
    run.add_argument(
        "--poll-timeout",
        type=float,
        default=Limits.poll_timeout_s,
        metavar="SECONDS",
        help="how long one round waits for its BigQuery load jobs (default "
        f"{Limits.poll_timeout_s:.0f})",
    )
    run.add_argument("--json", action="store_true", help="print one JSON document")
    run.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from kbqe_dagster.runner.in_process import in_process_pipeline
    from kbqe_dagster.runner.until_idle import run_until_idle

    if args.max_rounds < 1:
        raise OperatorCommandError(f"--max-rounds must be 1 or more, got {args.max_rounds}")
    if args.poll_timeout <= 0:
        raise OperatorCommandError(f"--poll-timeout must be positive, got {args.poll_timeout}")
    limits = Limits(max_rounds=args.max_rounds, poll_timeout_s=args.poll_timeout)
    if not getattr(args, "verbose", False):
        # The Dagster instance's storage migrations log every plugin at INFO: noise between
        # the progress lines.
        logging.getLogger("alembic").setLevel(logging.WARNING)
    with _results_only_on_stdout():
        with in_process_pipeline(quiet=not getattr(args, "verbose", False)) as pipeline:
            topics = select_topics(pipeline.config.topic_names, args.topics)
            report = run_until_idle(pipeline, topics, limits=limits, progress=log.info)
    print(json.dumps(report.to_json(), indent=2) if args.json else render(report))
    if not report.ok:
        print(f"kbqe: error: {report.error}", file=sys.stderr)
        return 1
    return 0


def select_topics(configured: Iterable[str], wanted: Sequence[str]) -> tuple[str, ...]:
    configured = tuple(configured)
    unknown = [t for t in wanted if t not in configured]
    if unknown:
        raise OperatorCommandError(
            f"topic {unknown[0]!r} is not in the pipeline file (topics: "
            f"{', '.join(configured) or 'none'}); KBQE_PIPELINE_CONFIG names the file"
        )
    return tuple(dict.fromkeys(wanted)) or configured


@contextlib.contextmanager
def _results_only_on_stdout() -> Iterator[None]:
    """While the jobs run, file descriptor 1 and ``sys.stdout`` point at stderr: Spark's JVM
    (started inside the first stage run, inheriting the descriptors) and any library that
    prints can never corrupt the JSON document printed afterwards."""
    sys.stdout.flush()
    out, err = _fileno(sys.stdout), _fileno(sys.stderr)
    saved = os.dup(out) if out is not None and err is not None else None
    if saved is not None:
        os.dup2(err, out)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        if saved is not None:
            os.dup2(saved, out)
            os.close(saved)


def _fileno(stream: Any) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, OSError, io.UnsupportedOperation):  # captured or replaced streams
        return None


# --- text output -----------------------------------------------------------------------------
def render(report: UntilIdleReport) -> str:
    topics = _table(
        ("topic", "staged", "dead-lettered", "tombstones", "stage runs"),
        (
            (name, str(t.staged), str(t.dead_lettered), str(t.tombstones), str(t.stage_runs))
            for name, t in sorted(report.topics.items())
        ),
    )
    # The Storage Write columns only when a table was delivered that way (their price beside the
    # free loads' bytes); a load-only pipeline's table stays narrow.
    appended = any(t.bytes_appended or t.rows_appended for t in report.tables.values())
    tables = (
        _table(
            ("table", "rows loaded", "load jobs", "keys merged", "merge bytes", "bytes loaded")
            + (("rows appended", "bytes appended", "list price") if appended else ()),
            (
                (
                    name,
                    str(t.rows_loaded),
                    str(t.load_jobs),
                    str(t.keys_merged),
                    "-" if t.merge_bytes_processed is None else str(t.merge_bytes_processed),
                    f"{t.bytes_loaded} (free)" if t.load_jobs else "-",
                )
                + (
                    (str(t.rows_appended), str(t.bytes_appended), usd(t.list_price_usd))
                    if appended
                    else ()
                )
                for name, t in sorted(report.tables.items())
            ),
        )
        if report.tables
        else "nothing loaded"
    )
    complete = ""  # no section when nothing was evaluated (the ending says why)
    if report.completeness:
        complete = (
            _table(
                ("table", "newest complete", "declared now", "late after complete"),
                (
                    (
                        name,
                        t.newest_complete or "-",
                        ", ".join(t.newly_complete) or "-",
                        str(t.late_after_complete),
                    )
                    for name, t in sorted(report.completeness.items())
                ),
            )
            + "\n\n"
        )
    ending = (
        f"idle after {report.rounds} round(s)"
        if report.ok
        else f"stopped after {report.rounds} round(s): {report.error}"
    )
    runs = f"{len(report.run_ids)} run(s) recorded in the Dagster instance"
    return f"{topics}\n\n{tables}\n\n{complete}{ending}; {runs}"


def _table(header: Sequence[str], rows: Iterable[Sequence[str]]) -> str:
    lines = [tuple(header), *(tuple(r) for r in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(line, widths)).rstrip() for line in lines)
