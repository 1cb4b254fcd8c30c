"""The local stack's emulator parses each SQL text once (localstack/bqemulator_threads.py,
``parse_once``): a second parse of the same text answers the same trees, as copies its caller
may change, and a text that does not parse fails every time. Checked in this process on
sqlglot's ``Dialect.parse`` (no stack), which is restored afterwards.
"""

from __future__ import annotations

import pytest

sqlglot = pytest.importorskip("sqlglot")

from sqlglot.dialects.dialect import Dialect  # noqa: E402
from sqlglot.errors import ParseError  # noqa: E402

from kbqe_dagster.localstack import bqemulator_threads  # noqa: E402

# Long enough to be kept (bqemulator_threads.CACHED_FROM), as a keyed table's MERGE is.
WIDE = (
    "SELECT "
    + ", ".join(f"IF(c{i} IS NULL, 0, c{i} + 1) AS v{i}" for i in range(120))
    + (" FROM `p.d.t` WHERE id > 3")
)


@pytest.fixture
def parse_once():
    original = Dialect.parse
    bqemulator_threads.parse_once()
    try:
        yield
    finally:
        Dialect.parse = original  # type: ignore[method-assign]


def test_the_text_is_long_enough_to_be_kept() -> None:
    assert len(WIDE) >= bqemulator_threads.CACHED_FROM


def test_a_second_parse_answers_an_equal_tree_that_is_not_the_first(parse_once) -> None:
    first = sqlglot.parse_one(WIDE, read="bigquery")
    second = sqlglot.parse_one(WIDE, read="bigquery")
    assert first == second
    assert first is not second
    assert second.sql(dialect="bigquery") == first.sql(dialect="bigquery")


def test_a_caller_that_changes_its_tree_changes_only_its_own(parse_once) -> None:
    first = sqlglot.parse_one(WIDE, read="bigquery")
    first.find(sqlglot.exp.Where).set("this", sqlglot.exp.false())  # a rewriter at work
    again = sqlglot.parse_one(WIDE, read="bigquery")
    assert "id > 3" in again.sql(dialect="bigquery")


def test_the_same_text_in_another_dialect_is_parsed_for_that_dialect(parse_once) -> None:
    text = WIDE.replace("`p.d.t`", "t")
    assert sqlglot.parse_one(text, read="bigquery") is not None
    duck = sqlglot.parse_one(text, read="duckdb")
    assert duck.sql(dialect="duckdb") == sqlglot.transpile(text, read="duckdb")[0]


def test_a_text_that_does_not_parse_fails_every_time(parse_once) -> None:
    broken = WIDE + " AND ("
    for _ in range(2):
        with pytest.raises(ParseError):
            sqlglot.parse_one(broken, read="bigquery")


def test_patching_twice_wraps_once(parse_once) -> None:
    patched = Dialect.parse
    bqemulator_threads.parse_once()
    assert Dialect.parse is patched


def test_the_parser_runs_once_per_text(parse_once, monkeypatch) -> None:
    from sqlglot.parser import Parser

    runs = []
    parse = Parser.parse
    monkeypatch.setattr(
        Parser, "parse", lambda self, *a, **k: runs.append(1) or parse(self, *a, **k)
    )
    text = WIDE.replace("id > 3", "id > 4")
    for _ in range(3):
        sqlglot.parse_one(text, read="bigquery")
    assert len(runs) == 1
    sqlglot.parse_one("SELECT 1", read="bigquery")  # short texts are parsed each time
    sqlglot.parse_one("SELECT 1", read="bigquery")
    assert len(runs) == 3
