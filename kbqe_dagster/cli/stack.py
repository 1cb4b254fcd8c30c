"""``kbqe stack up|down|status``: the local development stack under ``.kbqe-local/``."""

from __future__ import annotations

import argparse
import dataclasses
import json
from collections.abc import Sequence
from typing import Any

from kbqe_dagster.cli import render
from kbqe_dagster.cli.common import SubParsers


def add_stack(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    stack = sub.add_parser(
        "stack",
        parents=[common],
        help="the local development stack (Kafka, registry, GCS, BigQuery)",
        description="Install, start, stop and inspect the local stack under .kbqe-local/. "
        "PostgreSQL and Kafka Connect (with Debezium) start only when named: "
        "`kbqe stack up postgres connect`.",
    )
    actions = stack.add_subparsers(dest="stack_action", required=True, metavar="{up,down,status}")
    names_help = (
        "only these services (default: all; `up` leaves out the on-demand postgres and "
        "connect unless named); see `kbqe stack status`"
    )

    up = actions.add_parser("up", parents=[common], help="start what is not running (idempotent)")
    up.add_argument("services", nargs="*", metavar="SERVICE", help=names_help)
    up.add_argument(
        "--fresh",
        action="store_true",
        help="first delete the stopped services' data (Kafka topics, schemas, "
        "staging bucket, BigQuery tables, the demo's Dagster instance); "
        "the download cache stays",
    )
    up.set_defaults(handler=_stack_up)

    down = actions.add_parser("down", parents=[common], help="stop what we started (by pid)")
    down.add_argument("services", nargs="*", metavar="SERVICE", help=names_help)
    down.set_defaults(handler=_stack_down)

    status = actions.add_parser("status", parents=[common], help="which services run, where")
    status.add_argument("services", nargs="*", metavar="SERVICE", help=names_help)
    status.add_argument("--json", action="store_true", help="print JSON instead of a table")
    status.set_defaults(handler=_stack_status)


def _stack_up(args: argparse.Namespace) -> int:
    from kbqe_dagster.localstack import stack

    if args.fresh:
        wiped = stack.wipe_data(args.services or None)
        for w in wiped:
            print(f"deleted {w.path} ({w.what})")
        if not wiped:
            print("nothing to delete: no service has data yet")
    statuses = stack.up(args.services or None)
    print(_status_table(statuses))
    return 0


def _stack_down(args: argparse.Namespace) -> int:
    from kbqe_dagster.localstack import stack

    stopped = stack.down(args.services or None)
    print(f"stopped: {', '.join(stopped)}" if stopped else "nothing of ours was running")
    return 0


def _stack_status(args: argparse.Namespace) -> int:
    """Always exit 0: the report is the answer (``running`` says what runs)."""
    from kbqe_dagster.localstack import stack

    statuses = stack.status(args.services or None)
    if args.json:
        print(json.dumps([_status_json(s) for s in statuses], indent=2))
    else:
        print(_status_table(statuses))
    return 0


def _status_json(status: Any) -> dict[str, Any]:
    """A service's entry: its status, and how to connect (PostgreSQL's host, port, user,
    password, database; Connect's url) as keys of the entry itself."""
    entry = dataclasses.asdict(status)
    connection = entry.pop("connection")
    return {**entry, **connection}


def _status_table(statuses: Sequence[Any]) -> str:
    return render.table(
        ("service", "running", "pid", "endpoint"),
        ((s.name, "yes" if s.running else "no", str(s.pid or "-"), s.endpoint) for s in statuses),
    )
