"""The keyed SQL as text: which columns are compared with the unavailable-value placeholder and
how, and which statements a merge runs. What the SQL computes is tested on the emulator
(test_merge_on_emulator.py, test_merge_cdc_on_emulator.py)."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.keyed.contract import DeleteMode
from kbqe_dagster.keyed.merge_sql import merge_sql, recompute_count_sql
from kbqe_dagster.keyed.rows_sql import (
    MergeSpec,
    PlaceholderKind,
    placeholder_kind,
    placeholder_test,
)


def spec(**changes) -> MergeSpec:
    base = dict(
        target="p.d.t",
        changelog="p.d.t_changelog",
        key=("id",),
        row_columns=("id", "bio", "blob", "tags", "n"),
        deletes=DeleteMode.SOFT,
        unavailable_value="__debezium_unavailable_value",
        placeholders=(("bio", "string"), ("blob", "bytes"), ("tags", "strings")),
        truncates=True,
    )
    return MergeSpec(**{**base, **changes})


@pytest.mark.parametrize(
    ("field_type", "mode", "kind"),
    [
        ("STRING", "NULLABLE", PlaceholderKind.STRING),
        ("STRING", "REQUIRED", PlaceholderKind.STRING),
        ("STRING", "REPEATED", PlaceholderKind.STRINGS),
        ("BYTES", "NULLABLE", PlaceholderKind.BYTES),
        ("BYTES", "REPEATED", None),
        ("INTEGER", "NULLABLE", None),
        ("TIMESTAMP", "NULLABLE", None),
        ("RECORD", "NULLABLE", None),
        ("JSON", "NULLABLE", None),
    ],
)
def test_only_strings_bytes_and_arrays_of_strings_can_hold_the_placeholder(field_type, mode, kind):
    assert placeholder_kind(field_type, mode) == kind


def test_each_kind_is_compared_as_debezium_writes_it():
    s = spec()
    assert placeholder_test(s, "bio") == "IFNULL(`bio` = '__debezium_unavailable_value', FALSE)"
    assert placeholder_test(s, "blob") == (
        "IFNULL(`blob` = CAST('__debezium_unavailable_value' AS BYTES), FALSE)"
    )
    assert placeholder_test(s, "tags") == (
        "IFNULL(ARRAY_LENGTH(`tags`) = 1 AND `tags`[SAFE_OFFSET(0)] = "
        "'__debezium_unavailable_value', FALSE)"
    )
    assert placeholder_test(s, "n") is None


def test_without_a_placeholder_no_column_is_compared():
    assert placeholder_test(spec(unavailable_value=None), "bio") is None


def test_a_placeholder_with_quotes_is_a_valid_literal():
    assert placeholder_test(spec(unavailable_value="it's \\ here"), "bio") == (
        "IFNULL(`bio` = 'it\\'s \\\\ here', FALSE)"
    )


def test_a_merge_recomputes_then_folds_then_truncates_then_records_the_deletes():
    soft = merge_sql(spec(), {0: [(0, 9)]})
    assert [s.split()[0] for s in soft] == ["MERGE", "MERGE", "UPDATE"]
    hard = merge_sql(
        spec(deletes=DeleteMode.HARD, deleted_keys="p.d.t_deleted_keys"), {0: [(0, 9)]}
    )
    assert [s.split()[0] for s in hard] == ["MERGE", "MERGE", "DELETE", "MERGE"]
    plain = merge_sql(spec(truncates=False), {0: [(0, 9)]})
    assert len(plain) == 2 and all("'t'" in s for s in plain)  # truncates are no key's event


def test_without_a_key_to_recompute_the_merge_only_folds():
    assert [s.split()[0] for s in merge_sql(spec(), {0: [(0, 9)]}, recompute=False)] == [
        "MERGE",
        "UPDATE",
    ]


@pytest.mark.parametrize("deletes", [DeleteMode.SOFT, DeleteMode.HARD])
@pytest.mark.parametrize("truncates", [False, True])
def test_the_fold_and_its_question_read_the_changelog_only_in_the_ranges(deletes, truncates):
    """What BigQuery bills a merge in order: the new rows (clustered by partition and offset)
    and the table, never the changelog's row columns whole. Hard deletes with truncates also
    read the order and ``_op`` columns whole, for the latest truncate."""
    s = spec(deletes=deletes, deleted_keys="p.d.t_deleted_keys", truncates=truncates)
    ranges = {0: [(0, 9)], 3: [(40, 49)]}
    in_ranges = (
        "FROM `p.d.t_changelog` c WHERE ((`_kafka_partition` = 0 AND (`_kafka_offset` "
        "BETWEEN 0 AND 9)) OR (`_kafka_partition` = 3 AND (`_kafka_offset` BETWEEN 40 AND 49)))"
    )
    latest_truncate = (
        "(SELECT `_source_ts_ms`, `_kafka_partition`, `_kafka_offset`, TRUE AS _kbqe_present "
        "FROM `p.d.t_changelog` WHERE (NOT (FALSE)) AND `_op` = 't' AND "
        "(`_event_date` IS NOT NULL OR `_event_date` IS NULL) ORDER BY"
    )
    whole = int(deletes is DeleteMode.HARD and truncates)
    fold = merge_sql(s, ranges, recompute=False)[0]
    for sql in (fold, recompute_count_sql(s, ranges)):
        assert sql.count("`p.d.t_changelog`") == 1 + whole
        assert in_ranges in sql
        assert sql.count(latest_truncate) == whole


def test_the_rows_that_stay_unmerged_are_left_out_of_the_recomputation():
    [statement, *_] = merge_sql(spec(), {0: [(0, 9)]}, {0: [(20, 29)]})
    assert "NOT ((`_kafka_partition` = 0 AND (`_kafka_offset` BETWEEN 20 AND 29)))" in statement


def test_the_statements_grow_with_the_table_s_width_not_its_square():
    """The image test names every field: once per row, not once per field (BigQuery's query
    text is at most 1 MB; a 300-column Debezium table once needed 3)."""

    def size(width: int) -> int:
        columns = ("id", *(f"c{i}" for i in range(width)))
        return sum(map(len, merge_sql(spec(row_columns=columns, placeholders=()), {0: [(0, 9)]})))

    assert size(300) < 1_000_000
    assert size(200) / size(100) < 2.2


def test_a_table_topic_s_events_are_ordered_by_kafka_alone() -> None:
    """Keyed by its Kafka key, a key lives in one partition and its offsets order its versions:
    ``_source_ts_ms`` (the version's time) orders nothing, in the MERGE and the history."""
    from kbqe_dagster.keyed.history_sql import history_sql
    from kbqe_dagster.keyed.merge_sql import winners_sql

    ordered = spec(kafka_order=True, truncates=False, unavailable_value=None, placeholders=())
    assert ordered.order_columns == ("_kafka_partition", "_kafka_offset")
    assert spec().order_columns == ("_source_ts_ms", "_kafka_partition", "_kafka_offset")
    winners = winners_sql(ordered, {0: [(0, 9)]})
    assert "ORDER BY `_kafka_partition` DESC, `_kafka_offset` DESC" in winners
    statements = " ".join(merge_sql(ordered, {0: [(0, 9)]}))
    assert "ORDER BY `_source_ts_ms`" not in statements
    view = history_sql(ordered, "p.d.t_history")
    # Each event is a version of its own, valid from its time until the next offset's.
    assert "PARTITION BY `id`, `_kafka_partition`, `_kafka_offset` ORDER BY" in view
    assert "ORDER BY r.`_kafka_partition`, r.`_kafka_offset`) AS _next" in view
    assert "TIMESTAMP_MILLIS(`_source_ts_ms`) AS `_valid_from`" in view
