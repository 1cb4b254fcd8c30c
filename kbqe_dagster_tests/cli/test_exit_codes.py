"""docs/cli.md's exit-code table has one row per command, and the codes it names are the
commands' real ones: 2 is argparse's usage error for every command and nothing else, the
commands' own codes are their modules' constants, 1 is an error, 130 an interrupt."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from kbqe_dagster import cli
from kbqe_dagster.cli import build_parser
from kbqe_dagster.cli.completeness import NOT_COMPLETE_EXIT
from kbqe_dagster.cli.config import INVALID_EXIT
from kbqe_dagster.core.errors import KbqeError
from kbqe_dagster_tests.cli.conftest import Run
from kbqe_dagster_tests.support.cli import commands

DOC = Path(__file__).resolve().parents[2] / "docs" / "cli.md"
COMMON = {1: "error", 2: "usage error", 130: "interrupted"}


def table() -> dict[str, set[int]]:
    """Command → the exit codes its row names (as `N`)."""
    section = DOC.read_text().split("\n## Exit codes\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `kbqe ([a-z -]+)` \| (.*) \|$", section, re.MULTILINE)
    assert len(rows) == len({name for name, _ in rows}), "a command has two rows"
    return {name: {int(code) for code in re.findall(r"`(\d+)`", codes)} for name, codes in rows}


ALL_COMMANDS = sorted(commands(build_parser()))


def test_every_command_has_one_row_and_every_row_is_a_command() -> None:
    assert sorted(table()) == ALL_COMMANDS


def test_the_common_codes_are_stated_once_for_every_command() -> None:
    section = DOC.read_text().split("\n## Exit codes\n", 1)[1]
    assert "exits `1` on an error" in section and "`2` on a usage error" in section
    assert "`130` when interrupted" in section
    # A command's own code never reuses a common one for another meaning (1 excepted: a
    # command whose answer is "no" may say it with the error code, documented in its row).
    assert [name for name, codes in table().items() if codes & {2, 130}] == []


def test_the_commands_own_codes_are_the_modules_constants() -> None:
    rows = table()
    assert NOT_COMPLETE_EXIT == 3 and rows["completeness"] == {0, NOT_COMPLETE_EXIT}
    assert rows["config check"] == {0, INVALID_EXIT}
    assert rows["health"] == {0, 1} and rows["run"] == {0, 1}


@pytest.mark.parametrize("command", ALL_COMMANDS)
def test_a_usage_error_exits_2_for_every_command(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as usage:
        cli.main([*command.split(), "--no-such-option"])
    assert usage.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: kbqe") and ": error: " in err  # argparse's, not ours


def _handler_raising(error: BaseException):
    def handler(args: argparse.Namespace) -> int:
        raise error

    return handler


@pytest.mark.parametrize(
    ("error", "code"),
    [(KbqeError("no"), 1), (RuntimeError("bug"), 1), (KeyboardInterrupt(), 130)],
)
def test_an_error_exits_1_and_an_interrupt_130(
    run: Run, monkeypatch: pytest.MonkeyPatch, error: BaseException, code: int
) -> None:
    import kbqe_dagster.cli.config as config_command

    monkeypatch.setattr(config_command, "_schema", _handler_raising(error))
    assert run("config", "schema").code == code
