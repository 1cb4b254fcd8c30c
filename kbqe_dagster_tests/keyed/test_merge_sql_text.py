"""The keyed SQL as text: which columns are compared with the unavailable-value placeholder and
how, and which statements a merge runs. What the SQL computes is tested on the emulator
(test_merge_on_emulator.py, test_merge_cdc_on_emulator.py)."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.keyed.contract import DeleteMode
from kbqe_dagster.keyed.merge_sql import (
    MergeSpec,
    PlaceholderKind,
    merge_sql,
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


def test_a_merge_runs_the_recomputation_then_the_truncate_then_the_delete_record():
    soft = merge_sql(spec(), {0: [(0, 9)]})
    assert [s.split()[0] for s in soft] == ["MERGE", "UPDATE"]
    hard = merge_sql(
        spec(deletes=DeleteMode.HARD, deleted_keys="p.d.t_deleted_keys"), {0: [(0, 9)]}
    )
    assert [s.split()[0] for s in hard] == ["MERGE", "DELETE", "MERGE"]
    plain = merge_sql(spec(truncates=False), {0: [(0, 9)]})
    assert len(plain) == 1 and "'t'" in plain[0]  # truncate rows are still no key's event


def test_the_rows_that_stay_unmerged_are_left_out_of_the_recomputation():
    [statement, _] = merge_sql(spec(), {0: [(0, 9)]}, {0: [(20, 29)]})
    assert "NOT ((`_kafka_partition` = 0 AND (`_kafka_offset` BETWEEN 20 AND 29)))" in statement
