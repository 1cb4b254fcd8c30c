"""Assets of a keyed destination ``D.T``: ``bigquery/D/T`` (current state) and
``bigquery/D/T_history`` (SCD type II view), downstream of the changelog ``bigquery/D/T_changelog``
that the load job materializes. Lineage: Kafka topic → staging → changelog → current/history."""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.keyed.contract import history_table
from kbqe_dagster.keyed.merge import Destination, keyed_destinations

KEYED_GROUP = "keyed"


def table_key(dataset: str, table: str) -> dg.AssetKey:
    return dg.AssetKey(["bigquery", dataset, table])


def current_key(dest: Destination) -> dg.AssetKey:
    return table_key(dest.dataset, dest.table)


def history_key(dest: Destination) -> dg.AssetKey:
    return table_key(dest.dataset, history_table(dest.table))


def keyed_specs(config: PipelineConfig) -> list[dg.AssetSpec]:
    specs = []
    for dest in keyed_destinations(config):
        keyed = dest.topic.keyed
        changelog = table_key(dest.dataset, dest.changelog)
        specs.append(
            dg.AssetSpec(
                key=current_key(dest),
                description=(
                    f"Current state of `{dest.name}`: one row per key ({', '.join(keyed.key) or 'the Kafka key'}), "
                    f"deletes {keyed.deletes.value}; kept by an idempotent MERGE of the changelog "
                    "rows new since the last merge (loaded, or appended through the Storage Write "
                    "API), every keyed.merge_every merge tick with new rows. Clustered by the key."
                ),
                deps=[changelog],
                group_name=KEYED_GROUP,
                kinds={"bigquery"},
                owners=["team:data-platform"],
                metadata={
                    "dataset": dest.dataset,
                    "table": dest.table,
                    "deletes": keyed.deletes.value,
                },
            )
        )
        if keyed.history:
            specs.append(
                dg.AssetSpec(
                    key=history_key(dest),
                    description=(
                        f"SCD type II history of `{dest.name}`: a view over the changelog, "
                        "one row per version with _valid_from, _valid_to, _is_current."
                    ),
                    deps=[changelog],
                    group_name=KEYED_GROUP,
                    kinds={"bigquery"},
                    owners=["team:data-platform"],
                )
            )
    return specs
