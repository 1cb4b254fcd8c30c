"""Every statement kbqe runs on a table created with ``require_partition_filter: true`` filters
on its partition column (core/record/partition_filter.py has BigQuery's rule), and the keyed
MERGE reads only the partitions its changes touch.

The local emulator does not enforce the option (test_emulator_gap_require_partition_filter in
loading/test_table_options_on_emulators.py), so this contract is checked on the statements'
text: each is rendered in every variant, and every read of a partitioned table in it must have
a conjunct of its own WHERE on the partition column. A statement a new code path adds to one
of these builders is rendered here too; a new place that builds SQL changes the inventory at
the end of this file, which names how each place filters.
"""

from __future__ import annotations

import re
from datetime import date
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from kbqe_dagster.core.erasure.statements import (
    MatchColumn,
    PartitionRestriction,
    count_statements,
    delete_statement,
)
from kbqe_dagster.core.keyed.contract import DeleteMode
from kbqe_dagster.core.record.partition_filter import date_partitions, every_partition
from kbqe_dagster.delivery.tables import BigQueryTableKeeper, TableKeeperSettings
from kbqe_dagster.keyed.check_sql import check_sql
from kbqe_dagster.keyed.history_sql import history_sql
from kbqe_dagster.keyed.merge_sql import merge_sql, recompute_count_sql
from kbqe_dagster.keyed.rows_sql import MergeSpec
from kbqe_dagster.resources.bigquery.google_client import GoogleBigQueryLoads

CHANGELOG = "p.d.t_changelog"
DAY = "_event_date"

_CLAUSE_END = re.compile(r"(GROUP BY|QUALIFY|ORDER BY|LIMIT|HAVING|WINDOW|UNION|EXCEPT)\b")
_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NOT_ALIAS = {"WHERE", "LEFT", "JOIN", "ON", "GROUP", "QUALIFY", "ORDER", "LIMIT", "AS"}


def unfiltered_reads(sql: str, table: str, column: str) -> list[str]:
    """Each read of ``table`` in ``sql`` (``FROM `table` [alias]``, a DELETE's too) whose own
    WHERE has no top-level conjunct on ``column`` (of its alias, or unqualified): the reads
    BigQuery refuses on a table that requires a partition filter. Text around each."""
    ref = f"`{table}`"
    out = []
    for found in re.finditer(re.escape(f"FROM {ref}"), sql):
        rest = sql[found.end() :].lstrip()
        alias = ""
        word = _WORD.match(rest)
        if word and word.group().upper() not in _NOT_ALIAS:
            alias, rest = word.group(), rest[word.end() :].lstrip()
        if not rest.upper().startswith("WHERE"):
            out.append(sql[found.start() : found.start() + 120])
            continue
        conjuncts = _split(_where_clause(rest[len("WHERE") :]), " AND ")
        qualified = rf"(?:{re.escape(alias)}\.)?" if alias else ""
        on_column = re.compile(
            rf"^{qualified}`{re.escape(column)}`\s*(IS NOT NULL|IS NULL|IN\s*\(|IN UNNEST|"
            r"BETWEEN|>=|<=|=|>|<)"
        )
        # A conjunct filters when it compares the column, or is an OR of such comparisons
        # only (an OR with another column's test keeps that column's rows: no elimination).
        if not any(
            all(on_column.match(_unwrapped(d)) for d in _split(_unwrapped(c), " OR "))
            for c in conjuncts
        ):
            out.append(sql[found.start() : found.start() + 120])
    return out


def _where_clause(text: str) -> str:
    """The WHERE clause at the head of ``text``: up to the paren that closes its query, a
    clause keyword at its depth, or the end."""
    depth, quoted = 0, False
    for i, ch in enumerate(text):
        if ch == "'":
            quoted = not quoted
        elif quoted:
            continue
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                return text[:i]
        elif depth == 0 and _CLAUSE_END.match(text, i) and text[i - 1] == " ":
            return text[:i]
    return text


def _unwrapped(text: str) -> str:
    """``text`` without parens that enclose all of it."""
    text = text.strip()
    while text.startswith("(") and _closing(text) == len(text) - 1:
        text = text[1:-1].strip()
    return text


def _closing(text: str) -> int:
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0:
            return i
    return -1


def _split(where: str, word: str) -> list[str]:
    """``where`` split at ``word`` (`` AND ``, `` OR ``) outside parens and quotes."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(where):
        if ch == "'":
            quoted = not quoted
        elif quoted:
            continue
        elif ch in "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0 and where.startswith(word, i):
            parts.append(where[start:i])
            start = i + len(word)
    parts.append(where[start:])
    return parts


def test_the_checker_finds_a_read_without_a_partition_predicate():
    """The checker itself: what it must refuse, and what it accepts."""
    bad = [
        f"SELECT * FROM `{CHANGELOG}`",
        f"SELECT * FROM `{CHANGELOG}` c WHERE c.`id` = 1",
        f"SELECT * FROM `{CHANGELOG}` WHERE (`{DAY}` = DATE '2026-11-28' OR `id` = 1)",
        f"SELECT * FROM (SELECT * FROM `{CHANGELOG}` WHERE `id` = 1) WHERE `{DAY}` IS NOT NULL",
        f"SELECT * FROM `{CHANGELOG}` c WHERE x.`{DAY}` >= DATE '2026-01-01'",
    ]
    good = [
        f"SELECT * FROM `{CHANGELOG}` WHERE `id` = 1 AND {every_partition(DAY)}",
        f"SELECT * FROM `{CHANGELOG}` c WHERE ({every_partition(DAY, 'c')}) ORDER BY 1",
        f"DELETE FROM `{CHANGELOG}` WHERE (`a` IN UNNEST(@s)) AND `{DAY}` IN UNNEST(@partitions)",
        f"SELECT 1 FROM (SELECT * FROM `{CHANGELOG}` WHERE "
        f"{date_partitions(DAY, ['2026-11-28'])}) x WHERE x.`id` = 1",
    ]
    assert all(unfiltered_reads(sql, CHANGELOG, DAY) for sql in bad)
    assert not any(unfiltered_reads(sql, CHANGELOG, DAY) for sql in good)


# --- the keyed statements ------------------------------------------------------------------------
def spec(**changes: Any) -> MergeSpec:
    base: dict[str, Any] = dict(
        target="p.d.t",
        changelog=CHANGELOG,
        key=("id",),
        row_columns=("id", "bio", "n"),
        deletes=DeleteMode.SOFT,
        unavailable_value="__debezium_unavailable_value",
        placeholders=(("bio", "string"),),
    )
    return MergeSpec(**{**base, **changes})


SPECS = [
    pytest.param(
        spec(
            deletes=deletes,
            deleted_keys="p.d.t_deleted_keys" if deletes is DeleteMode.HARD else None,
            truncates=truncates,
            kafka_order=kafka_order,
            changed_dates=dates,
        ),
        id=f"{deletes.value}-truncates={truncates}-kafka_order={kafka_order}-dates={bool(dates)}",
    )
    for deletes in DeleteMode
    for truncates in (False, True)
    for kafka_order in (False, True)
    for dates in (None, ("2026-11-27", "2026-11-28"))
]
RANGES = {0: [(0, 9)], 3: [(40, 49)]}
UNMERGED = {1: [(100, 199)]}


def keyed_statements(s: MergeSpec) -> list[str]:
    return [
        *merge_sql(s, RANGES, UNMERGED, recompute=True),
        *merge_sql(s, RANGES, None, recompute=False),
        recompute_count_sql(s, RANGES, UNMERGED),
        check_sql(s, UNMERGED),
        check_sql(s, UNMERGED, sample=("seed", 10)),
        history_sql(s, "p.d.t_history"),
    ]


@pytest.mark.parametrize("s", SPECS)
def test_every_read_of_a_keyed_changelog_filters_its_partitions(s: MergeSpec):
    for sql in keyed_statements(s):
        assert sql.count(f"`{CHANGELOG}`") > 0 or sql.startswith("MERGE `p.d.t_deleted_keys`")
        assert unfiltered_reads(sql, CHANGELOG, DAY) == [], sql


def test_a_changelog_partitioned_on_another_column_is_filtered_there():
    s = spec(date_column="placed_on", truncates=True)
    for sql in keyed_statements(s):
        assert unfiltered_reads(sql, CHANGELOG, "placed_on") == [], sql
        assert "`_event_date`" not in sql


@pytest.mark.parametrize("deletes", list(DeleteMode))
def test_a_merge_in_order_reads_only_the_partitions_its_changes_touch(deletes: DeleteMode):
    """The statements of a merge of new events in order (no key recomputed, no truncates)
    prune every read of the changelog to the new rows' event dates: billed for those
    partitions, not the changelog's whole history (docs/configuration.md has the figures)."""
    s = spec(
        deletes=deletes,
        deleted_keys="p.d.t_deleted_keys" if deletes is DeleteMode.HARD else None,
        changed_dates=("2026-11-28",),
    )
    pruned = "IN (DATE '2026-11-28')"
    for sql in [recompute_count_sql(s, RANGES), *merge_sql(s, RANGES, recompute=False)]:
        reads = sql.count(f"FROM `{CHANGELOG}`")
        assert reads > 0
        assert sql.count(pruned) == reads, sql


def test_without_known_dates_the_new_rows_are_read_in_every_partition():
    [fold, _] = merge_sql(spec(truncates=True), RANGES, recompute=False)
    assert "IN (DATE" not in fold
    assert every_partition(DAY, "c") in fold


# --- erasure ---------------------------------------------------------------------------------
COLUMNS = [MatchColumn("customer_id", "STRING")]


@pytest.mark.parametrize(
    "restriction",
    [
        None,
        PartitionRestriction(DAY, "day", ("2026-11-28",)),
        PartitionRestriction(DAY, "between", ("2026-11-27", "2026-11-28")),
    ],
)
def test_the_erasure_statements_of_a_table_that_requires_a_filter_have_one(restriction):
    statements = [
        delete_statement("d.orders", COLUMNS, ["c-1"], restriction, required_column=DAY),
        *count_statements("d.orders", COLUMNS, ["c-1"], restriction, required_column=DAY),
    ]
    for statement in statements:
        assert statement is not None
        assert unfiltered_reads(statement.sql, "d.orders", DAY) == [], statement.sql


def test_an_erasure_of_a_table_that_requires_no_filter_is_unchanged():
    statement = delete_statement("d.orders", COLUMNS, ["c-1"])
    assert statement is not None
    assert statement.sql == "DELETE FROM `d.orders` WHERE (`customer_id` IN UNNEST(@subjects_0))"


# --- the storage_write sink's offsets question, the duplicate-offset check -------------------
class _Recording:
    project = "p"

    def __init__(self) -> None:
        self.sql: list[str] = []

    def query_and_wait(self, sql: str) -> list[Any]:
        self.sql.append(sql)
        return []

    def query(self, sql: str, **_: Any) -> Any:
        self.sql.append(sql)
        return SimpleNamespace(result=lambda **_: [], total_bytes_processed=0)


def test_the_offsets_question_of_a_storage_write_table_filters_its_partitions():
    client = _Recording()
    loads = SimpleNamespace(project="p", client=client)
    keeper = BigQueryTableKeeper(loads, TableKeeperSettings("p"))
    columns = ("_topic", "_kafka_partition", "_kafka_offset")
    keeper.offsets_present("d", "t", columns, "orders", 0, 10, 19, required_column=DAY)
    keeper.offsets_present("d", "t", columns, "orders", 0, 10, 19)
    [required, plain] = client.sql
    assert unfiltered_reads(required, "p.d.t", DAY) == []
    assert unfiltered_reads(plain, "p.d.t", DAY) != []  # unchanged where not required


@pytest.mark.parametrize("hourly", [False, True])
def test_the_duplicate_offset_check_reads_a_window_of_partitions(hourly: bool):
    client = _Recording()
    loads = GoogleBigQueryLoads(client)
    column = "_event_hour" if hourly else DAY
    columns = ("_topic", "_kafka_partition", "_kafka_offset")
    loads.duplicate_offsets("d", "t", columns, column, date(2026, 11, 1), timestamp_column=hourly)
    [sql] = client.sql
    assert unfiltered_reads(sql, "p.d.t", column) == []


# --- every place that builds SQL ---------------------------------------------------------------
INVENTORY = {
    # path: (statement literals, how each filters on the partition column)
    "core/erasure/statements.py": (
        2,
        "DELETE and its counts: the restriction, else every partition",
    ),
    "delivery/tables.py": (1, "offsets question: every partition when the table requires it"),
    "keyed/check_sql.py": (11, "changelog: every partition; current table: not partitioned"),
    "keyed/history_sql.py": (4, "view over the changelog: every partition"),
    "keyed/merge_sql.py": (12, "new rows: their dates; history: every partition"),
    "keyed/rows_sql.py": (5, "changelog reads: their dates, else every partition"),
    "keyed/merge.py": (1, "ALTER TABLE ADD COLUMN of a current table: DDL, no read"),
    "resources/bigquery/google_client.py": (1, "duplicate offsets: the partitions since a day"),
    "resources/bigquery/erasure_tables.py": (
        3,
        "the audit table (not partitioned); an emulator probe",
    ),
    "resources/bigquery/emulator.py": (6, "emulator only (does not enforce the option)"),
    "defs/keyed/jobs.py": (1, "a description, not SQL"),
    "defs/keyed/schedules.py": (1, "a description, not SQL"),
    "localstack/bigquery.py": (1, "DuckDB's catalogue, not BigQuery"),
}
"""Demo scripts (kbqe_dagster/demo/) read demo tables and are left out."""

_STATEMENT = re.compile(
    r"""(?<![A-Za-z_])[fr]{0,2}["'](?:\(|\s)*(SELECT|MERGE|DELETE FROM|UPDATE|INSERT INTO|"""
    r"""CREATE OR REPLACE VIEW|ALTER TABLE|CREATE TABLE)\b"""
)


def test_every_place_that_builds_sql_is_in_the_inventory():
    """A new statement (or a new place building one) fails here until its partition filter
    is thought about: add it to a rendering test above, then to the inventory."""
    package = Path(__file__).resolve().parents[1] / "kbqe_dagster"
    found = {}
    for path in sorted(package.rglob("*.py")):
        relative = path.relative_to(package).as_posix()
        if relative.startswith("demo/"):
            continue
        count = len(_STATEMENT.findall(path.read_text()))
        if count:
            found[relative] = count
    assert found == {path: count for path, (count, _) in INVENTORY.items()}
