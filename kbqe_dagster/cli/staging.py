"""``kbqe staging status``: next offsets, committed ranges and pending files of a staging area."""

from __future__ import annotations

import argparse

from kbqe_dagster.cli import render
from kbqe_dagster.cli.common import SubParsers, emit, now, open_store, staging_options


def add_staging(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    staging = sub.add_parser("staging", parents=[common], help="inspect the staging area")
    actions = staging.add_subparsers(dest="staging_action", required=True, metavar="{status}")
    status = actions.add_parser(
        "status",
        parents=[common, staging_options()],
        help="next offsets, committed ranges, pending files per partition and table",
    )
    status.set_defaults(handler=_staging_status)


def _staging_status(args: argparse.Namespace) -> int:
    from kbqe_dagster.operations.staging_status import staging_status

    emit(args, staging_status(open_store(args), now()), render.staging_status)
    return 0
