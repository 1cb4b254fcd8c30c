"""What BigQuery bills a keyed merge of new events in order, CALCULATED from its statements by
BigQuery's on-demand rule, before and after the MERGE read only the partitions its changes
touch (rows_sql.changed_partitions). The figures are the ones docs/configuration.md states;
nothing here runs on BigQuery (the emulator reports no bytes).

The rule (BigQuery pricing, on-demand): a query is billed for the bytes of the columns it
references in the partitions it scans, at least 10 MB (2^20-byte MB) per table referenced; a
DML statement also for every column of the table it modifies (an unpartitioned table: all of
it). Column sizes: INT64, TIMESTAMP, DATE 8 bytes; BOOL 1; NUMERIC 16; STRING 2 + its UTF-8
bytes. Clustering (the changelog by Kafka partition and offset) can cut the bytes billed below
this figure in both cases; a dry run reports this figure.

The example: a keyed topic (format avro, soft deletes) whose changelog holds 365 daily
partitions of 1,000,000 changes each, a current table of 10,000,000 keys, and a merge of new
changes that all fall on one event date.
"""

from __future__ import annotations

import re

from kbqe_dagster.core.keyed.contract import DeleteMode
from kbqe_dagster.keyed.merge_sql import merge_sql, recompute_count_sql
from kbqe_dagster.keyed.rows_sql import MergeSpec

MIN_PER_TABLE = 10 * 2**20
ROWS_PER_DAY = 1_000_000
DAYS = 365
KEYS = 10_000_000
ROW_FIELDS = {  # bytes per row: 100
    "id": 8,
    "name": 22,  # STRING of 20 characters
    "email": 32,
    "city": 14,
    "updated_at": 8,
    "balance": 16,
}
CHANGE_COLUMNS = {  # the current table's too: 28 bytes
    "_op": 3,
    "_source_ts_ms": 8,
    "_deleted": 1,
    "_kafka_partition": 8,
    "_kafka_offset": 8,
}
CHANGELOG_ONLY = {"_event_date": 8, "_kafka_topic": 2 + 24}
CHANGELOG = {**ROW_FIELDS, **CHANGE_COLUMNS, **CHANGELOG_ONLY}
CURRENT_ROW = sum(ROW_FIELDS.values()) + sum(CHANGE_COLUMNS.values())


def spec(dates: tuple[str, ...] | None) -> MergeSpec:
    return MergeSpec(
        target="p.shop.customers",
        changelog="p.shop.customers_changelog",
        key=("id",),
        row_columns=tuple(ROW_FIELDS),
        deletes=DeleteMode.SOFT,
        changed_dates=dates,
    )


def billed(sql: str, *, today: bool = False) -> int:
    """Bytes BigQuery bills ``sql`` by the rule (module docstring). ``today``: the statement as
    kbqe ran it before this change, which named no partition column."""
    named = set(re.findall(r"`(\w+)`", sql))
    columns = {c for c in CHANGELOG if c in named}
    if today:
        columns.discard("_event_date")
    days = re.search(r"`_event_date` IN \(([^)]*)\)", sql)
    scanned = DAYS if today or days is None else days.group(1).count("DATE '")
    changelog = max(MIN_PER_TABLE, ROWS_PER_DAY * scanned * sum(CHANGELOG[c] for c in columns))
    current = max(MIN_PER_TABLE, KEYS * CURRENT_ROW)  # read whole: SELECT * of the table
    modified = current if sql.startswith("MERGE") else 0  # a DML: every column it modifies
    return changelog + current + modified


def merge_bytes(dates: tuple[str, ...] | None, today: bool = False) -> int:
    """A merge of new events in order: the recompute question, then the fold."""
    s = spec(dates)
    ranges = {0: [(1_000, 1_999_999)]}
    statements = [recompute_count_sql(s, ranges), *merge_sql(s, ranges, recompute=False)]
    return sum(billed(sql, today=today) for sql in statements)


def test_the_example_merge_is_billed_for_one_day_of_the_changelog_not_its_year():
    today = merge_bytes(None, today=True)
    unknown_dates = merge_bytes(None)
    one_day = merge_bytes(("2026-11-28",))

    assert today == 97_280_000_000  # 2 x 365 days x 1M rows x 128 B + 3 x 1.28 GB
    assert unknown_dates == 103_120_000_000  # every partition, _event_date read too
    assert one_day == 4_112_000_000  # 2 x 1M rows x 136 B + 3 x 1.28 GB
    assert round(today / one_day, 1) == 23.7
    # On demand at $6.25 per TiB: per merge, and at one merge every 5 minutes for a day.
    assert round(today / 2**40 * 6.25, 3) == 0.553
    assert round(one_day / 2**40 * 6.25, 4) == 0.0234
    assert round(288 * today / 2**40 * 6.25) == 159
    assert round(288 * one_day / 2**40 * 6.25, 1) == 6.7
