"""``kbqe demo`` and ``kbqe dev``: the Quick start's main command and the Dagster UI."""

from __future__ import annotations

import argparse

from kbqe_dagster.cli.common import SubParsers


def add_demo(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    demo = sub.add_parser(
        "demo",
        parents=[common],
        help="run the main job end to end on the local stack",
        description="Start the local stack, produce sample events, stage them on Spark, load "
        "them into the BigQuery emulator and print the rows per table.",
    )
    demo.add_argument("--count", type=int, default=2_000, help="good sample events to produce")
    demo.add_argument(
        "--then-dagster-dev",
        action="store_true",
        help="afterwards, start the Dagster UI (`dg dev`) on the same local instance",
    )
    demo.set_defaults(handler=_demo)

    dev = sub.add_parser(
        "dev",
        parents=[common],
        help="start the Dagster UI (`dg dev`) on $DAGSTER_HOME, else on the local instance",
    )
    dev.add_argument("--port", type=int, default=3000)
    dev.set_defaults(handler=_dev)


def _demo(args: argparse.Namespace) -> int:
    from kbqe_dagster.cli.logs import dagster_console_config
    from kbqe_dagster.demo.run import run_demo

    verbose = bool(getattr(args, "verbose", False))
    return run_demo(args.count, args.then_dagster_dev, dagster_console_config(verbose), verbose)


def _dev(args: argparse.Namespace) -> int:
    from kbqe_dagster.demo.run import exec_dagster_dev

    return exec_dagster_dev(args.port)
