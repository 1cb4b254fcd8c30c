"""``kbqe dead-letters``: list and inspect dead-letter records still in the staging area."""

from __future__ import annotations

import argparse

from kbqe_dagster.cli import render
from kbqe_dagster.cli.common import (
    SubParsers,
    config_option,
    emit,
    open_store,
    pipeline_config,
    staging_options,
)
from kbqe_dagster.core.errors import OperatorCommandError


def add_dead_letters(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    dl = sub.add_parser(
        "dead-letters",
        parents=[common, staging_options(), config_option()],
        help="list and inspect dead-letter records still in the staging area",
    )
    dl.add_argument("--reason", help="only records with this reason (e.g. bad_magic)")
    dl.add_argument("--topic", help="only records of this source topic")
    dl.add_argument(
        "--limit",
        type=int,
        default=20,
        metavar="N",
        help="show at most N records (default 20; 0 shows only the counts)",
    )
    dl.set_defaults(handler=_dead_letters)


def _dead_letters(args: argparse.Namespace) -> int:
    from kbqe_dagster.operations.dead_letter_listing import dead_letters

    if args.limit < 0:
        raise OperatorCommandError(f"--limit must be 0 or more, got {args.limit}")
    config = pipeline_config(args)
    report = dead_letters(
        open_store(args),
        config.dead_letter,
        reason=args.reason,
        topic=args.topic,
        limit=args.limit,
    )
    emit(args, report, render.dead_letters)
    return 0
