"""``staging``: the staging area. Materialized by the stage job (one topic per run), observed
by ``staging_observation_sensor`` (pending files, bytes, oldest age, next offsets).

No ``from __future__ import annotations`` here: Dagster reads the config and resource
annotations of the asset function when it is decorated, and needs real types for that.
"""

from collections import Counter

import dagster as dg
from dagster_pyspark import LazyPySparkResource

from kbqe_dagster.core.naming import STAGING_ASSET
from kbqe_dagster.defs.kafka.assets import topic_asset_key
from kbqe_dagster.resources.configurable import (
    KafkaResource,
    PipelineResource,
    SchemaRegistryResource,
    StagingResource,
)
from kbqe_dagster.staging.job import StageSummary, run_stage
from kbqe_dagster.staging.task import StageContext

STAGING_KEY = dg.AssetKey([STAGING_ASSET])
STAGING_GROUP = "staging"
TOPIC_TAG = "kbqe/topic"
FROM_OFFSETS_TAG = "kbqe/from_offsets"


class StageConfig(dg.Config):
    topic: str


def staging_asset(topics: list[str]) -> dg.AssetsDefinition:
    @dg.asset(
        key=STAGING_KEY,
        deps=[topic_asset_key(t) for t in topics],
        group_name=STAGING_GROUP,
        kinds={"spark", "avro", "gcs"},
        owners=["team:data-platform"],
    )
    def staging(
        context: dg.AssetExecutionContext,
        config: StageConfig,
        pipeline: PipelineResource,
        kafka: KafkaResource,
        schema_registry: SchemaRegistryResource,
        staging: StagingResource,
        pyspark: LazyPySparkResource,
    ) -> dg.MaterializeResult:
        """Avro files and done files of Kafka offset ranges, awaiting BigQuery load jobs.

        Each run stages one topic: it rolls committed ranges forward, deletes crash leftovers,
        plans offset ranges from the done files and the high watermarks, and stages one range
        per Spark task. Done files are create-only, so a range commits exactly once.
        """
        pipeline_config = pipeline.load()
        topic = pipeline_config.topic(config.topic)
        ctx = StageContext(
            kafka=kafka.settings(),
            registry=schema_registry.settings(),
            staging=staging.location(),
            pipeline=pipeline_config,
            topic_name=topic.name,
        )
        summary = run_stage(
            pyspark.spark_session, ctx,
            max_messages_per_run=topic.staging.max_messages_per_run,
            max_messages_per_range=topic.staging.max_messages_per_range,
        )
        context.log.info(
            "%s: staged %d record(s) from %d message(s) in %d file(s), %s dead letter(s)",
            topic.name, summary.records, summary.messages, len(summary.files),
            sum(summary.dead_letters.values()),
        )
        return dg.MaterializeResult(metadata=stage_metadata(summary))

    return staging


def stage_metadata(summary: StageSummary) -> dict:
    prep = summary.preparation
    return {
        "topic": summary.topic,
        "dagster/row_count": summary.records,
        "messages": summary.messages,
        "bytes_written": summary.bytes_written,
        "bytes_written_by_dataset": dg.MetadataValue.json(_bytes_by_dataset(summary)),
        "files_written": len(summary.files),
        "ranges": dg.MetadataValue.json(list(summary.committed_ranges)),
        "dead_letters": sum(summary.dead_letters.values()),
        "dead_letters_by_reason": dg.MetadataValue.json(summary.dead_letters),
        "skipped_by_reason": dg.MetadataValue.json(summary.skipped),
        # Keyed topics count null values (Debezium's tombstones) instead of dead-lettering them.
        **({"tombstones": summary.tombstones} if summary.tombstones else {}),
        # The native kernel or the Python path (staging/native_kernel.py), and what the kernel
        # handed back to the Python path.
        "stage_path": summary.stage_path,
        "kafka_reader": summary.reader,
        **({"kernel_handbacks": dg.MetadataValue.json(summary.kernel_handbacks)}
           if summary.kernel_handbacks else {}),
        "orphans_deleted": len(prep.orphans_deleted),
        "rolled_forward": len(prep.rolled_forward),
        "unrecognized_files": len(prep.unrecognized),
        "lost_offsets": sum(p.lost_messages for p in prep.plan.partitions),
        "seconds": round(summary.seconds, 3),
    }


def _bytes_by_dataset(summary: StageSummary) -> dict[str, int]:
    """Avro bytes written per destination dataset (the exporter's ``kbqe_bytes_written``)."""
    total: Counter[str] = Counter()
    for result in summary.results:
        total.update(result.bytes_by_dataset)
    return dict(total)
