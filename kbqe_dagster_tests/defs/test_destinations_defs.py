"""A topic with several destinations in Dagster: every destination table is a
``bigquery/<dataset>/<table>`` asset downstream of ``staging``, itself downstream of the
topic, and the load side reports each table's loads on its own asset."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from kbqe_dagster.core.config.pipeline import load_pipeline_config
from kbqe_dagster.definitions import build_definitions
from kbqe_dagster.defs.keys import Destinations

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "destinations.yaml"


def test_every_destination_is_a_table_asset_with_lineage_from_the_topic() -> None:
    defs = build_definitions(str(EXAMPLE), env="local")
    specs = {s.key.to_user_string(): s for s in defs.resolve_all_asset_specs()}
    tables = {k for k in specs if k.startswith("bigquery/")}
    assert tables == {
        "bigquery/fix/executions",
        "bigquery/fix/fills_by_symbol",
        "bigquery/kbqe_dead_letters/dead_letters",
    }
    for key in ("bigquery/fix/executions", "bigquery/fix/fills_by_symbol"):
        assert isinstance(specs[key].partitions_def, dg.DailyPartitionsDefinition)
        assert {d.asset_key for d in specs[key].deps} == {dg.AssetKey(["staging"])}
    graph = defs.resolve_asset_graph()
    staging = graph.get(dg.AssetKey(["staging"]))
    assert dg.AssetKey(["kafka", "fix.executions"]) in staging.parent_keys


def test_loads_into_each_destination_are_reported_on_its_own_asset() -> None:
    destinations = Destinations.from_config(load_pipeline_config(EXAMPLE))
    assert destinations.asset_key("fix", "fills_by_symbol") == dg.AssetKey(
        ["bigquery", "fix", "fills_by_symbol"]
    )
    assert destinations.partition_key("fix", "executions", "2024-09-13") == "2024-09-13"


def test_the_fix_example_shows_its_fills_table_next_to_the_tables_per_message_type() -> None:
    defs = build_definitions(str(REPO / "examples" / "fix" / "pipeline.yaml"), env="local")
    tables = {
        s.key.to_user_string()
        for s in defs.resolve_all_asset_specs()
        if s.key.path[0] == "bigquery"
    }
    assert tables == {
        "bigquery/fix/new_order_single",
        "bigquery/fix/execution_report",
        "bigquery/fix/fills_by_symbol",
        "bigquery/fix_dead_letters/dead_letters",
    }
