"""docs/cli.md documents exactly the commands the parser has: every command has a
``### `kbqe ...` `` section, and every section names a real command."""

from __future__ import annotations

import re
from pathlib import Path

from kbqe_dagster.cli import build_parser
from kbqe_dagster_tests.support.cli import commands

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
HEADING = re.compile(r"^#{2,4} `kbqe ([a-z][a-z -]*)`\s*$", re.MULTILINE)


def documented() -> list[str]:
    return HEADING.findall(DOC.read_text(encoding="utf-8"))


def test_every_registered_command_is_documented() -> None:
    missing = sorted(set(commands(build_parser())) - set(documented()))
    assert not missing, f"docs/cli.md has no `### kbqe <command>` section for {missing}"


def test_every_documented_command_exists() -> None:
    unknown = sorted(set(documented()) - set(commands(build_parser())))
    assert not unknown, f"docs/cli.md documents commands the parser does not have: {unknown}"


def test_each_command_is_documented_once() -> None:
    names = documented()
    assert len(names) == len(set(names))


def test_the_operator_commands_are_registered() -> None:
    assert {
        "staging status",
        "load plan",
        "load release",
        "retention plan",
        "bootstrap",
        "dead-letters",
        "produce-sample",
    } <= set(commands(build_parser()))
