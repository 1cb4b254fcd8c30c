"""The ``kbqe`` operator command (console script ``kbqe = kbqe_dagster.cli:main``).

Commands are small functions registered in :data:`COMMANDS`: each ``_add_<command>`` adds
its sub-parser and sets ``handler`` to a function ``(args) -> exit code``. To add a command,
write one such function (here or in another module) and append it to ``COMMANDS``.

Errors are one line on stderr (``kbqe: error: ...``) and exit code 1; ``--verbose`` adds the
full message and the traceback. Progress goes through ``logging`` to stderr; results (tables,
JSON) go to stdout, so ``kbqe stack status --json | jq`` works.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import sys
import traceback
from typing import Any, Callable, Sequence

from kbqe_dagster import cli_render
from kbqe_dagster.cli_commands import OPERATOR_COMMANDS, CommandAdder, SubParsers
from kbqe_dagster.core.errors import KbqeError
from kbqe_dagster.demo.commands import add_demo_commands
from kbqe_dagster.observability_commands import OBSERVABILITY_COMMANDS
from kbqe_dagster.runner.command import add_run_command

log = logging.getLogger("kbqe")

Handler = Callable[[argparse.Namespace], int]


# --- kbqe stack ------------------------------------------------------------------------------
def _add_stack(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    stack = sub.add_parser(
        "stack", parents=[common], help="the local development stack (Kafka, registry, GCS, BigQuery)",
        description="Install, start, stop and inspect the local stack under .kbqe-local/.",
    )
    actions = stack.add_subparsers(dest="stack_action", required=True, metavar="{up,down,status}")
    names_help = "only these services (default: all); see `kbqe stack status`"

    up = actions.add_parser("up", parents=[common], help="start what is not running (idempotent)")
    up.add_argument("services", nargs="*", metavar="SERVICE", help=names_help)
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
        print(json.dumps([dataclasses.asdict(s) for s in statuses], indent=2))
    else:
        print(_status_table(statuses))
    return 0


def _status_table(statuses: Sequence[Any]) -> str:
    return cli_render.table(
        ("service", "running", "pid", "endpoint"),
        ((s.name, "yes" if s.running else "no", str(s.pid or "-"), s.endpoint) for s in statuses),
    )


# --- the command line itself ---------------------------------------------------------------
COMMANDS: list[CommandAdder] = [
    _add_stack, add_demo_commands, *OPERATOR_COMMANDS, *OBSERVABILITY_COMMANDS, add_run_command,
]


def build_parser() -> argparse.ArgumentParser:
    # --verbose is accepted before and after the command; SUPPRESS keeps a sub-parser's
    # default from overwriting a --verbose given earlier on the line.
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="debug logging, full error messages and tracebacks")
    parser = argparse.ArgumentParser(
        prog="kbqe", parents=[common],
        description="kbqe_dagster operator commands: Kafka -> BigQuery, exactly once.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    for add in COMMANDS:
        add(sub, common)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    verbose = bool(getattr(args, "verbose", False))
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s" if verbose else "%(message)s",
    )
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
    lines = message.strip().splitlines() or ["(no message)"]
    if verbose:
        traceback.print_exc(file=sys.stderr)
        print(f"kbqe: error: {message.strip()}", file=sys.stderr)
        return
    more = " (more with --verbose)" if len(lines) > 1 else ""
    print(f"kbqe: error: {lines[0]}{more}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
