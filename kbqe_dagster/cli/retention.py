"""``kbqe retention plan``: a dry run of done-file retention."""

from __future__ import annotations

import argparse

from kbqe_dagster.cli import render
from kbqe_dagster.cli.common import SubParsers, emit, open_store, staging_options


def add_retention(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    retention = sub.add_parser("retention", parents=[common], help="done-file retention")
    actions = retention.add_subparsers(dest="retention_action", required=True, metavar="{plan}")
    plan = actions.add_parser(
        "plan",
        parents=[common, staging_options()],
        help="dry run: which done files retention would delete, and why the rest stay",
    )
    plan.set_defaults(handler=_retention_plan)


def _retention_plan(args: argparse.Namespace) -> int:
    from kbqe_dagster.operations.retention_plan import retention_plan

    emit(args, retention_plan(open_store(args)), render.retention_plan)
    return 0
