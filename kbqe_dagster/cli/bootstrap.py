"""``kbqe bootstrap``: make partitions of a topic start at given offsets."""

from __future__ import annotations

import argparse

from kbqe_dagster.cli import render
from kbqe_dagster.cli.common import SubParsers, emit, now, open_store, staging_options


def add_bootstrap(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    boot = sub.add_parser(
        "bootstrap",
        parents=[common, staging_options()],
        help="make partitions of a topic start at given offsets (writes bootstrap markers)",
        description="Write bootstrap markers so each partition resumes at the given offset. "
        "A partition can only move forward; nothing is written if one is refused.",
    )
    boot.add_argument("--topic", required=True, help="the Kafka topic")
    boot.add_argument(
        "--offsets",
        required=True,
        metavar="P=OFFSET[,P=OFFSET...]",
        help="next offset per partition, e.g. 0=2787665,1=2828379",
    )
    boot.set_defaults(handler=_bootstrap)


def _bootstrap(args: argparse.Namespace) -> int:
    from kbqe_dagster.operations.bootstrap import bootstrap, parse_partition_offsets

    offsets = parse_partition_offsets(args.offsets)
    report = bootstrap(open_store(args), args.topic, offsets, now())
    emit(args, report, render.bootstrap)
    return 0
