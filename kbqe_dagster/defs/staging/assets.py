"""``staging``: the staging area. Materialized by the stage job (one topic, or a group of
topics, per run: core/stage_runs/groups.py), observed by ``staging_observation_sensor`` (pending
files, bytes, oldest age, next offsets).

No ``from __future__ import annotations`` here: Dagster reads the config and resource
annotations of the asset function when it is decorated, and needs real types for that.
"""

from collections import Counter
from collections.abc import Iterable

import dagster as dg

from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.load.cost import storage_write_list_price
from kbqe_dagster.core.protocol.naming import STAGING_ASSET
from kbqe_dagster.defs.kafka.assets import topic_asset_key
from kbqe_dagster.defs.staging.claims import STAGE_LOOP_JOB, yielded_to_older_runs
from kbqe_dagster.defs.staging.tags import (  # noqa: F401 - the tags' long-standing home
    FROM_OFFSETS_TAG,
    GROUP_TAG,
    STAGE_TAG,
    TOPIC_TAG,
    TOPICS_TAG,
)
from kbqe_dagster.delivery.sink import delivery_sink
from kbqe_dagster.delivery.tables import TableKeeperSettings
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.configurable import (
    KafkaResource,
    PipelineResource,
    SchemaRegistryResource,
    StagingResource,
)
from kbqe_dagster.resources.kafka.clients import TopicMissing
from kbqe_dagster.resources.spark import LazySparkContextResource
from kbqe_dagster.stagers import stage_context
from kbqe_dagster.staging.job import StageSummary, run_stage_group
from kbqe_dagster.staging.stage_loop import loop_topics

STAGING_KEY = dg.AssetKey([STAGING_ASSET])
STAGING_GROUP = "staging"


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
                    "topics": dg.MetadataValue.json([]),
                    "by_topic": dg.MetadataValue.json({}),
                    "yielded": dg.MetadataValue.json(sorted(yielded)),
                }
            )
        ctx = stage_context(
            kafka=kafka.settings(),
            registry=schema_registry.settings(),
            staging=staging.location(),
            pipeline=pipeline_config,
            topic_name=pipeline_config.topic(names[0]).name,
            sink=storage_write_sink(pipeline_config, bigquery),
        )
        summaries = run_stage_group(pyspark.spark_context, ctx, names)
        # Here, not at the top: defs/bigquery/assets.py imports this module (STAGING_KEY).
        from kbqe_dagster.defs.bigquery.assets import Destinations
        from kbqe_dagster.defs.staging.deliveries import delivery_events

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
                **({"missing_topics": dg.MetadataValue.json(missing)} if missing else {}),
            }
        )

    return staging


def _stage_loop(
    context, config, pipeline_config, names, kafka, schema_registry, staging, pyspark, bigquery
) -> dg.MaterializeResult:
    # Here, not at the top: defs/staging/loop_run.py imports this module (group_metadata).
    from kbqe_dagster.defs.staging.loop_run import stage_loop

    if not names:
        context.log.info("stage loop: no topic may write a delivery: storage_write table")
        return dg.MaterializeResult(
            metadata={
                "topics": dg.MetadataValue.json([]),
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
        sink=storage_write_sink(pipeline_config, bigquery),
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


def storage_write_sink(pipeline_config, bigquery: BigQueryResource):
    """The stage context's sink: the delivery sink when any table may be delivered by
    storage_write (kbqe_dagster/delivery/), else None (the staging area's own)."""
    load = pipeline_config.load
    return delivery_sink(
        pipeline_config,
        bigquery.storage_write_settings() if bigquery.project else None,
        TableKeeperSettings.of(bigquery, load.partition_expiration_days, load.create_datasets),
    )


def stage_metadata(summary: StageSummary) -> dict:
    prep = summary.preparation
    return {
        "topic": summary.topic,
        "dagster/row_count": summary.records,
        "messages": summary.messages,
        "bytes_written": summary.bytes_written,
        "bytes_written_by_dataset": dg.MetadataValue.json(_bytes_by_dataset(summary)),
        "storage_write_by_table": dg.MetadataValue.json(appended_by_table([summary])),
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
        **(
            {"kernel_handbacks": dg.MetadataValue.json(summary.kernel_handbacks)}
            if summary.kernel_handbacks
            else {}
        ),
        "orphans_deleted": len(prep.orphans_deleted),
        "rolled_forward": len(prep.rolled_forward),
        "unrecognized_files": len(prep.unrecognized),
        "lost_offsets": sum(p.lost_messages for p in prep.plan.partitions),
        "seconds": round(summary.seconds, 3),
    }


def topic_totals(summary: StageSummary) -> dict:
    """One topic's share of a run, plain values under :func:`stage_metadata`'s key names (the
    metrics fold a grouped run's topics one by one: observability/event_totals.py)."""
    return {
        "dagster/row_count": summary.records,
        "messages": summary.messages,
        "bytes_written": summary.bytes_written,
        "bytes_written_by_dataset": _bytes_by_dataset(summary),
        "storage_write_by_table": appended_by_table([summary]),
        "files_written": len(summary.files),
        "ranges": list(summary.committed_ranges),
        "dead_letters": sum(summary.dead_letters.values()),
        "dead_letters_by_reason": summary.dead_letters,
        "skipped_by_reason": summary.skipped,
        # Keyed topics count null values; append topics dead-letter or skip them (as above).
        **({"tombstones": summary.tombstones} if summary.tombstones else {}),
        "orphans_deleted": len(summary.preparation.orphans_deleted),
        "seconds": round(summary.seconds, 3),
    }


def group_metadata(names: tuple[str, ...], summaries: tuple[StageSummary, ...]) -> dict:
    """A single topic's :func:`stage_metadata` as ever; for a group the same keys summed over
    its topics, plus ``topics`` and ``by_topic`` (what ``kbqe run --until-idle`` reports per
    topic)."""
    by_topic = dg.MetadataValue.json({s.topic: topic_totals(s) for s in summaries})
    if len(names) == 1 and len(summaries) == 1:
        return {
            **stage_metadata(summaries[0]),
            "topics": dg.MetadataValue.json(list(names)),
            "by_topic": by_topic,
        }
    dead: Counter[str] = Counter()
    skipped: Counter[str] = Counter()
    written: Counter[str] = Counter()
    for s in summaries:
        dead.update(s.dead_letters)
        skipped.update(s.skipped)
        written.update(_bytes_by_dataset(s))
    tombstones = sum(s.tombstones for s in summaries)
    return {
        "topics": dg.MetadataValue.json(list(names)),
        "dagster/row_count": sum(s.records for s in summaries),
        "messages": sum(s.messages for s in summaries),
        "bytes_written": sum(s.bytes_written for s in summaries),
        "bytes_written_by_dataset": dg.MetadataValue.json(dict(written)),
        "storage_write_by_table": dg.MetadataValue.json(appended_by_table(summaries)),
        "files_written": sum(len(s.files) for s in summaries),
        "ranges": dg.MetadataValue.json([r for s in summaries for r in s.committed_ranges]),
        "dead_letters": sum(dead.values()),
        "dead_letters_by_reason": dg.MetadataValue.json(dict(dead)),
        "skipped_by_reason": dg.MetadataValue.json(dict(skipped)),
        **({"tombstones": tombstones} if tombstones else {}),
        "stage_path": "+".join(
            sorted(
                {p for s in summaries for p in s.stage_path.split("+") if p != "none"}, reverse=True
            )
        )
        or "none",
        "orphans_deleted": sum(len(s.preparation.orphans_deleted) for s in summaries),
        "rolled_forward": sum(len(s.preparation.rolled_forward) for s in summaries),
        "unrecognized_files": sum(len(s.preparation.unrecognized) for s in summaries),
        "lost_offsets": sum(
            p.lost_messages for s in summaries for p in s.preparation.plan.partitions
        ),
        "seconds": round(max((s.seconds for s in summaries), default=0.0), 3),
        "by_topic": by_topic,
    }


def _bytes_by_dataset(summary: StageSummary) -> dict[str, int]:
    """Avro bytes written per destination dataset (the exporter's ``kbqe_bytes_written``)."""
    total: Counter[str] = Counter()
    for result in summary.results:
        total.update(result.bytes_by_dataset)
    return dict(total)


def appended_by_table(summaries: Iterable[StageSummary]) -> dict[str, dict]:
    """Per ``dataset.table`` delivered through the Storage Write API by these stage summaries'
    committed ranges: rows and bytes appended, and their list price in USD before the free
    tier (core/load/cost.py); empty for a run of load tables only."""
    rows: Counter[str] = Counter()
    appended: Counter[str] = Counter()
    for summary in summaries:
        for result in summary.results:
            if result.committed_last is None:
                continue
            for d in result.delivered:
                rows[f"{d.dataset}.{d.table}"] += d.rows
                appended[f"{d.dataset}.{d.table}"] += d.bytes
    return {
        table: {
            "rows": rows[table],
            "bytes": appended[table],
            "list_price_usd": round(storage_write_list_price(appended[table]), 6),
        }
        for table in sorted(appended)
    }
