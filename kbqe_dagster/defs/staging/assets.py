"""``staging``: the staging area. Materialized by the stage job (one topic, or a group of
topics, per run: core/stage_runs/groups.py), observed by ``staging_observation_sensor`` (pending
files, bytes, oldest age, next offsets).

No ``from __future__ import annotations`` here: Dagster reads the config and resource
annotations of the asset function when it is decorated, and needs real types for that.
"""

import dagster as dg

from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.stage_runs import report_keys as stage_report
from kbqe_dagster.defs.kafka.assets import topic_asset_key
from kbqe_dagster.defs.keys import STAGING_GROUP, STAGING_KEY, Destinations
from kbqe_dagster.defs.staging.claims import STAGE_LOOP_JOB, yielded_to_older_runs
from kbqe_dagster.defs.staging.deliveries import delivery_events
from kbqe_dagster.defs.staging.loop_run import stage_loop
from kbqe_dagster.defs.staging.metadata import group_metadata
from kbqe_dagster.delivery.sink import stage_run_sink
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.configurable import (
    KafkaResource,
    PipelineResource,
    SchemaRegistryResource,
    StagingResource,
)
from kbqe_dagster.resources.kafka.clients import TopicMissing
from kbqe_dagster.resources.spark import LazySparkContextResource
from kbqe_dagster.stager_registry import stage_context
from kbqe_dagster.staging.job import run_stage_group
from kbqe_dagster.staging.stage_loop import loop_topics


class StageConfig(dg.Config):
    """The topics of one stage run. ``topic`` is the single topic of the run config written
    before grouped runs existed (still accepted, by hand or by script); ``topics`` the
    topics of a grouped run. Either or both; at least one topic in all (but a loop run:
    none named means every topic that may write a storage_write table)."""

    topic: str = ""
    topics: list[str] = []
    loop: bool = False
    """Stage the topics round after round until the run is stopped (defs/staging/loop_run.py);
    what ``stage_loop_job`` runs (it loops whatever this says)."""
    max_run_s: float = 3600.0
    """A loop run ends by itself after this many seconds (its sensor relaunches it)."""
    report_every_s: float = 30.0
    """A loop run reports its rounds' deliveries and lag to Dagster this often."""

    def names(self) -> tuple[str, ...]:
        names = tuple(dict.fromkeys(([self.topic] if self.topic else []) + list(self.topics)))
        if not names:
            raise ConfigError(
                "stage_job run config names no topic: set ops.staging.config."
                "topic or ops.staging.config.topics"
            )
        return names


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
        pyspark: LazySparkContextResource,
        bigquery: BigQueryResource,
    ) -> dg.MaterializeResult:
        """Avro files and done files of Kafka offset ranges, awaiting BigQuery load jobs.

        Each run stages one topic or a group of small topics: per topic it rolls committed
        ranges forward, deletes crash leftovers, plans offset ranges from the done files and
        the high watermarks; then it stages one range per Spark task, every topic's ranges in
        one Spark job. Done files are create-only, so a range commits exactly once. Tables
        with ``delivery: storage_write`` get their rows appended through the BigQuery Storage
        Write API as each range commits, reported on their ``bigquery/...`` assets; the
        topics that feed them are staged by ``stage_loop_job``: one run staging them round
        after round, every ``staging.loop_interval``.
        """
        pipeline_config = pipeline.load()
        looping = config.loop or context.job_name == STAGE_LOOP_JOB
        if looping and not (config.topic or config.topics):
            names = tuple(loop_topics(pipeline_config))
        else:
            names = config.names()
        if looping:
            return _stage_loop(
                context,
                config,
                pipeline_config,
                names,
                kafka,
                schema_registry,
                staging,
                pyspark,
                bigquery,
            )
        # One run prepares a topic at a time (its preparation deletes uploads without a done
        # file): the topics an older run in flight holds are left to it.
        yielded = yielded_to_older_runs(context.instance, context.run.run_id, names)
        if yielded:
            context.log.warning(
                "left to an older stage run in flight: %s", ", ".join(sorted(yielded))
            )
            names = tuple(n for n in names if n not in yielded)
        if not names:
            return dg.MaterializeResult(
                metadata={
                    stage_report.TOPICS: dg.MetadataValue.json([]),
                    stage_report.BY_TOPIC: dg.MetadataValue.json({}),
                    stage_report.YIELDED: dg.MetadataValue.json(sorted(yielded)),
                }
            )
        ctx = stage_context(
            kafka=kafka.settings(),
            registry=schema_registry.settings(),
            staging=staging.location(),
            pipeline=pipeline_config,
            topic_name=pipeline_config.topic(names[0]).name,
            sink=stage_run_sink(pipeline_config, bigquery),
        )
        summaries = run_stage_group(pyspark.spark_context, ctx, names)
        for event in delivery_events(summaries, Destinations.from_config(pipeline_config)):
            context.log_event(event)
        for summary in summaries:
            context.log.info(
                "%s: staged %d record(s) from %d message(s) in %d file(s), %s dead letter(s)",
                summary.topic,
                summary.records,
                summary.messages,
                len(summary.files),
                sum(summary.dead_letters.values()),
            )
        # A topic without a summary is one Kafka does not hold (deleted since the tick).
        missing = sorted(set(names) - {s.topic for s in summaries})
        for topic in missing:
            context.log.warning("not staged: %s", TopicMissing(topic))
        return dg.MaterializeResult(
            metadata={
                **group_metadata(names, summaries),
                **(
                    {stage_report.MISSING_TOPICS: dg.MetadataValue.json(missing)} if missing else {}
                ),
            }
        )

    return staging


def _stage_loop(
    context, config, pipeline_config, names, kafka, schema_registry, staging, pyspark, bigquery
) -> dg.MaterializeResult:
    if not names:
        context.log.info("stage loop: no topic may write a delivery: storage_write table")
        return dg.MaterializeResult(
            metadata={
                stage_report.TOPICS: dg.MetadataValue.json([]),
                "rounds": 0,
                "idle_rounds": 0,
                "stopped_because": "no_topics",
            }
        )
    ctx = stage_context(
        kafka=kafka.settings(),
        registry=schema_registry.settings(),
        staging=staging.location(),
        pipeline=pipeline_config,
        topic_name=pipeline_config.topic(names[0]).name if names else "",
        sink=stage_run_sink(pipeline_config, bigquery),
    )
    return stage_loop(
        context,
        pipeline_config,
        names,
        ctx,
        pyspark.spark_context,
        max_run_s=config.max_run_s,
        report_every_s=config.report_every_s,
    )
