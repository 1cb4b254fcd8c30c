"""The merge job: every keyed destination's MERGE, in the load pool (one at a time with the
load coordinator, which writes the load state the merge reads)."""

# No ``from __future__ import annotations``: dagster reads the config class from the annotation.
from collections.abc import Iterator
from datetime import date

import dagster as dg
from pydantic import Field

from kbqe_dagster.defs.bigquery.jobs import LOAD_POOL
from kbqe_dagster.defs.keyed.assets import table_key
from kbqe_dagster.defs.keyed.checks import check_evaluations, merger_from
from kbqe_dagster.faults import crash_point
from kbqe_dagster.keyed.merge import MERGE_JOB, MERGE_OP, check_keyed_tables, merge_keyed_tables
from kbqe_dagster.loading.state_file import StateFile
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.configurable import (
    KafkaResource,
    PipelineResource,
    SchemaRegistryResource,
    StagingResource,
)


class MergeRunConfig(dg.Config):
    force: bool = Field(
        default=False,
        description="Merge whatever is new now, whatever keyed.merge_every says "
        "(kbqe run --until-idle does).",
    )


@dg.op(name=MERGE_OP, pool=LOAD_POOL, out={}, tags={"kbqe/step": "merge"})
def merge_keyed_tables_op(
    context: dg.OpExecutionContext,
    config: MergeRunConfig,
    pipeline: PipelineResource,
    staging: StagingResource,
    bigquery: BigQueryResource,
    schema_registry: SchemaRegistryResource,
    kafka: KafkaResource,
) -> Iterator[dg.AssetMaterialization | dg.AssetCheckEvaluation]:
    pipeline_config = pipeline.load()
    store = staging.store()
    merger = merger_from(pipeline_config, bigquery, schema_registry, kafka)
    load_state = StateFile(store).read()
    results = merge_keyed_tables(
        pipeline_config,
        merger,
        store,
        load_state,
        force=config.force,
        crash=crash_point,
    )
    for result in results:
        dataset, table = result.table.split(".", 1)
        yield dg.AssetMaterialization(
            asset_key=table_key(dataset, table),
            metadata={
                "keys_merged": result.keys_merged,
                "keys_recomputed_from_history": result.keys_recomputed,
                "merge_bytes_processed": result.bytes_processed,
                "load_jobs_merged": result.jobs,
                "delivered_ranges_merged": dg.MetadataValue.json(
                    [
                        {"partition": p, "first": a, "last": b}
                        for p, spans in sorted(result.delivered.items())
                        for a, b in spans
                    ]
                ),
                "statements": result.statements,
            },
        )
        if result.history:
            h_dataset, h_table = result.history.split(".")[-2:]
            yield dg.AssetMaterialization(
                asset_key=table_key(h_dataset, h_table),
                metadata={"view": result.history},
            )
    context.log.info("merged %d keyed table(s)", len(results))
    merged = [r.table for r in results]
    if merged:  # the checks of what just changed, against the merge state just written
        for check in check_keyed_tables(
            pipeline_config, merger, store, load_state, seed=date.today().isoformat(), tables=merged
        ):
            yield from check_evaluations(check)


@dg.job(
    name=MERGE_JOB,
    description="MERGE the new changelog rows (loaded or delivered) into each keyed table.",
)
def merge_keyed_tables_job() -> None:
    merge_keyed_tables_op()
