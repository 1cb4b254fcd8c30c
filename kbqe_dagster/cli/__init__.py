"""The ``kbqe`` operator command (console script ``kbqe = kbqe_dagster.cli:main``).

The top of the package: one module per command group (``stack``, ``demo``, ``staging``,
``load``, ``retention``, ``bootstrap``, ``dead_letters``, ``produce_sample``,
``observability``, ``run``, ``completeness``, ``config``, ``erase``), what they share in ``common``, the terminal text in
``render``. Each group's ``add_<group>`` adds its sub-parsers and sets ``handler`` to a function
``(args) -> exit code``; to add a command, write one such function in its group's module and
append it to :data:`COMMANDS`. Nothing below the CLI imports this package.

Errors go to stderr whole (``kbqe: error: ...``; an invalid pipeline file: every problem, one
per line) with exit code 1 (exit codes: docs/cli.md); ``--verbose`` adds the traceback.
Progress goes through ``logging`` to stderr (set up by ``cli/logs.py``: libraries' chatter
only with ``--verbose``); results (tables, JSON) go to stdout, so ``kbqe stack status --json
| jq`` works.

May import every room of the package; nothing imports it: the top layer."""

from __future__ import annotations

import argparse
import logging
import sys
import traceback
from collections.abc import Callable, Sequence

from kbqe_dagster.cli.bootstrap import add_bootstrap
from kbqe_dagster.cli.common import CommandAdder
from kbqe_dagster.cli.completeness import add_completeness
from kbqe_dagster.cli.config import add_config
from kbqe_dagster.cli.dead_letters import add_dead_letters
from kbqe_dagster.cli.demo import add_demo
from kbqe_dagster.cli.erase import add_erase
from kbqe_dagster.cli.load import add_load
from kbqe_dagster.cli.logs import setup_logging
from kbqe_dagster.cli.observability import add_health, add_metrics
from kbqe_dagster.cli.produce_sample import add_produce_sample
from kbqe_dagster.cli.retention import add_retention
from kbqe_dagster.cli.run import add_run
from kbqe_dagster.cli.stack import add_stack
from kbqe_dagster.cli.staging import add_staging
from kbqe_dagster.core.errors import KbqeError
from kbqe_dagster.packaged import package_version

log = logging.getLogger("kbqe")

Handler = Callable[[argparse.Namespace], int]


# --- the command line itself ---------------------------------------------------------------
COMMANDS: list[CommandAdder] = [
    add_stack,
    add_demo,
    add_staging,
    add_load,
    add_retention,
    add_bootstrap,
    add_dead_letters,
    add_produce_sample,
    add_metrics,
    add_health,
    add_run,
    add_completeness,
    add_config,
    add_erase,
]


def build_parser() -> argparse.ArgumentParser:
    # --verbose is accepted before and after the command; SUPPRESS keeps a sub-parser's
    # default from overwriting a --verbose given earlier on the line.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "-v",
        "--verbose",
        action="store_true",
        default=argparse.SUPPRESS,
        help="debug logging, full error messages and tracebacks",
    )
    parser = argparse.ArgumentParser(
        prog="kbqe",
        parents=[common],
        description="kbqe_dagster operator commands: Kafka -> BigQuery, exactly once.",
    )
    # The installed distribution's version (importlib.metadata), what `pip show` says.
    parser.add_argument("--version", action="version", version=f"kbqe {package_version()}")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    verbose = bool(getattr(args, "verbose", False))
    setup_logging(verbose)
    handler: Handler = args.handler
    try:
        return handler(args)
    except KbqeError as err:
        _report(str(err), verbose)
        return 1
    except KeyboardInterrupt:
        print("kbqe: interrupted", file=sys.stderr)
        return 130
    except Exception as err:  # noqa: BLE001 - the operator gets one line, not a traceback
        _report(f"unexpected {type(err).__name__}: {err}", verbose)
        return 1


def _report(message: str, verbose: bool) -> None:
    """The whole message (a pipeline file's every problem, one per line); ``--verbose``
    adds the traceback, never more of the message."""
    if verbose:
        traceback.print_exc(file=sys.stderr)
    print(f"kbqe: error: {message.strip() or '(no message)'}", file=sys.stderr)
