"""``kbqe load plan`` (a dry run of the next load cycle) and ``kbqe load release`` (a table's
quarantined files back to the planner)."""

from __future__ import annotations

import argparse
import sys

from kbqe_dagster.cli import render
from kbqe_dagster.cli.common import (
    SubParsers,
    config_option,
    emit,
    open_store,
    pipeline_config,
    staging_options,
)

PAUSE_REMINDER = (
    "kbqe: note: pause the load_cycle and poll_load_jobs schedules (and let their runs end) "
    "while the load state is edited: the load op is a singleton inside Dagster, this command "
    "runs outside it"
)


def add_load(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    load = sub.add_parser("load", parents=[common], help="BigQuery load jobs")
    actions = load.add_subparsers(dest="load_action", required=True, metavar="{plan,release}")
    plan = actions.add_parser(
        "plan",
        parents=[common, staging_options(), config_option()],
        help="dry run of the next load cycle: the jobs it would submit, in order",
    )
    plan.set_defaults(handler=_load_plan)

    release = actions.add_parser(
        "release",
        parents=[common, staging_options()],
        help="release a table's quarantined files so the next load cycle retries them",
        description="Remove files of a table from the quarantine of the load state, so the "
        "next load cycle plans them again. A dry run unless --yes is given. Pause "
        "the load schedules first: this command runs outside Dagster.",
    )
    release.add_argument(
        "--table",
        required=True,
        metavar="DATASET.TABLE",
        help="the table whose quarantined files are released",
    )
    release.add_argument(
        "--file",
        action="append",
        default=[],
        metavar="NAME",
        dest="files",
        help="only this quarantined file (repeatable; default: all of the table's)",
    )
    release.add_argument(
        "--yes",
        action="store_true",
        help="write the load state (without it: show what would be released)",
    )
    release.set_defaults(handler=_load_release)


def _load_plan(args: argparse.Namespace) -> int:
    from kbqe_dagster.operations.load_plan import load_plan

    config = pipeline_config(args)
    emit(args, load_plan(open_store(args), config), render.load_plan)
    return 0


def _load_release(args: argparse.Namespace) -> int:
    from kbqe_dagster.operations.load_release import release

    report = release(open_store(args), args.table, args.files, dry_run=not args.yes)
    emit(args, report, render.load_release)
    print(PAUSE_REMINDER, file=sys.stderr)
    return 0
