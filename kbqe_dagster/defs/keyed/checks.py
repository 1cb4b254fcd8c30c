"""Asset checks of the keyed current tables (verdicts: core/keyed/checks.py), runnable on their
own; the merge job evaluates them after each merge too."""

# No ``from __future__ import annotations``: dagster checks the context's annotation.
from collections.abc import Iterator
from datetime import date

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.formats.connect_json_avro import connect_key_fields
from kbqe_dagster.core.keyed.checks import KeyedCheck, check_names, keyed_verdicts
from kbqe_dagster.defs.keyed.assets import table_key
from kbqe_dagster.defs.verdicts import verdict_evaluation, verdict_result
from kbqe_dagster.keyed.merge import KeyedMerger, check_keyed_tables, keyed_destinations
from kbqe_dagster.loading.state_file import StateFile
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.configurable import (
    KafkaResource,
    PipelineResource,
    SchemaRegistryResource,
    StagingResource,
)
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.kafka.cluster import latest_key
from kbqe_dagster.resources.schema_registry import (
    RegistrySettings,
    RegistryUnavailableError,
    key_schema_fields,
)

CHECKS_OP = "keyed_table_checks"


def keyed_check_specs(config: PipelineConfig) -> list[dg.AssetCheckSpec]:
    return [
        dg.AssetCheckSpec(name, asset=table_key(d.dataset, d.table))
        for d in keyed_destinations(config)
        for name in check_names(d.topic.keyed.deletes)
    ]


def merger_from(
    pipeline_config: PipelineConfig,
    bigquery: BigQueryResource,
    schema_registry: SchemaRegistryResource,
    kafka: KafkaResource,
) -> KeyedMerger:
    registry, kafka_settings = schema_registry.settings(), kafka.settings()
    return KeyedMerger(
        bigquery.loads(),
        key_fields=lambda topic: kafka_key_fields(registry, kafka_settings, topic),
        enrichment=pipeline_config.enrichment,
        table_options=lambda dataset, table: pipeline_config.table_layout(dataset, table).options,
        partition_column=lambda dataset, table: (
            pipeline_config.table_layout(dataset, table).partition_column
        ),
    )


def kafka_key_fields(
    registry: RegistrySettings, kafka: KafkaSettings, topic: str
) -> tuple[str, ...]:
    """The fields of a keyed topic's Kafka key: its registry key schema (``<topic>-key``, the
    Avro converter's), else the embedded schema of the topic's latest key (JsonConverter's,
    ``schemas.enable=true``); the registry's error when neither has one."""
    try:
        return key_schema_fields(registry, topic)
    except RegistryUnavailableError as error:
        fields = connect_key_fields(latest_key(kafka, topic))
        if fields:
            return fields
        raise RegistryUnavailableError(
            f"{error}; nor is the topic's latest Kafka key JSON with an embedded schema "
            "(JsonConverter, schemas.enable=true)"
        ) from error


def check_evaluations(check: KeyedCheck) -> Iterator[dg.AssetCheckEvaluation]:
    dataset, table = check.table.split(".", 1)
    for verdict in keyed_verdicts(check):
        yield verdict_evaluation(table_key(dataset, table), verdict)


def keyed_checks(config: PipelineConfig) -> list[dg.AssetChecksDefinition]:
    specs = keyed_check_specs(config)
    if not specs:
        return []

    @dg.multi_asset_check(specs=specs, can_subset=True, name=CHECKS_OP)
    def keyed_table_checks(
        context: dg.AssetCheckExecutionContext,
        pipeline: PipelineResource,
        staging: StagingResource,
        bigquery: BigQueryResource,
        schema_registry: SchemaRegistryResource,
        kafka: KafkaResource,
    ) -> Iterator[dg.AssetCheckResult]:
        pipeline_config = pipeline.load()
        store = staging.store()
        selected = context.selected_asset_check_keys
        tables = {".".join(k.asset_key.path[1:]) for k in selected}
        merger = merger_from(pipeline_config, bigquery, schema_registry, kafka)
        for check in check_keyed_tables(
            pipeline_config,
            merger,
            store,
            StateFile(store).read(),
            seed=date.today().isoformat(),
            tables=tables,
        ):
            dataset, table = check.table.split(".", 1)
            key = table_key(dataset, table)
            for verdict in keyed_verdicts(check):
                if dg.AssetCheckKey(key, verdict.name) in selected:
                    yield verdict_result(key, verdict)

    return [keyed_table_checks]
