"""One external asset per source topic: ``kafka/<topic>``. Kafka is not materialized by
Dagster; its state arrives as observations from ``kafka_backlog_sensor``. A topic found by
``topic_patterns`` after the definitions loaded is staged and observed all the same; its
asset appears at the next reload of the code location."""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.core.config.pipeline import PipelineConfig

KAFKA_GROUP = "kafka"


def topic_asset_key(topic: str) -> dg.AssetKey:
    return dg.AssetKey(["kafka", topic])


def topic_specs(config: PipelineConfig) -> list[dg.AssetSpec]:
    """One spec per topic of ``config``: listed, and (for a configuration discovered when the
    definitions loaded) found in Kafka by ``topic_patterns``."""
    return [
        dg.AssetSpec(
            key=topic_asset_key(topic.name),
            description=(
                f"Kafka topic `{topic.name}`: Confluent-framed Avro messages, staged by the "
                "stage job from explicit offset ranges. Observations carry end offsets, "
                "staged offsets and lag per partition, or `missing: true` and the reason "
                "while Kafka does not hold the topic."
                + (
                    f" Found in Kafka by the topic pattern `{topic.pattern}`."
                    if topic.pattern is not None
                    else ""
                )
            ),
            group_name=KAFKA_GROUP,
            kinds={"kafka"},
            owners=["team:data-platform"],
            metadata={
                "topic": topic.name,
                **({"topic_pattern": topic.pattern} if topic.pattern is not None else {}),
            },
        )
        for topic in config.topics
    ]
