"""The load checks' verdicts, decided once (core/load/checks.py)."""

from __future__ import annotations

from kbqe_dagster.core.load.checks import (
    ERROR,
    WARN,
    JobRows,
    no_quarantined_files,
    pending_files_fresh,
    rows_loaded,
)


def test_rows_loaded_passes_only_when_every_count_is_known_and_equal() -> None:
    ok, dup, unknown = (
        JobRows("a", "d.t", 5, 5, "job"),
        JobRows("b", "d.t", 5, 10, "job"),
        JobRows("c", "d.t", 5, None, "unavailable"),
    )
    assert (rows_loaded([ok]).passed, rows_loaded([ok]).severity) == (True, ERROR)
    assert (rows_loaded([ok, dup, unknown]).passed, rows_loaded([ok, dup]).severity) == (
        False,
        ERROR,
    )
    verdict = rows_loaded([ok, unknown])
    assert (verdict.passed, verdict.severity) == (False, WARN)
    assert "e.g. c" in verdict.description
    assert verdict.metadata["records_staged"] == 10 and verdict.metadata["rows_loaded"] == 5


def test_quarantine_names_the_tables_and_their_errors() -> None:
    verdict = no_quarantined_files(["s.b", "s.a"], {"s.b": "bad"})
    assert not verdict.passed and verdict.metadata["quarantined_tables"] == ["s.a", "s.b"]
    assert "kbqe load release" in verdict.description
    assert no_quarantined_files([]).passed


def test_freshness_warns_past_the_limit_only() -> None:
    assert pending_files_fresh(900, 3, 900).passed
    late = pending_files_fresh(901, 3, 900)
    assert (late.passed, late.severity) == (False, WARN)
    assert (
        late.description
        == "3 avro file(s) wait for a load; the oldest for 901s (over the 900s limit)"
    )
