"""What the CLI tests share: every leaf command path of the parser, and the one-line error a
failing command must print."""

from __future__ import annotations

import argparse
from collections.abc import Iterator


def commands(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> Iterator[str]:
    """Leaf command paths: ``stack up``, ``staging status``, ``bootstrap``, ..."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield " ".join(path)
        return
    for action in subs:
        for name, sub in action.choices.items():
            yield from commands(sub, path + (name,))


def assert_one_error_line(result, starts_with: str) -> None:
    assert result.code == 1
    assert result.out == ""
    assert len(result.err.splitlines()) == 1, result.err
    assert result.err.startswith(starts_with), result.err
