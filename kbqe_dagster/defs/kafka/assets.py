"""One external asset per source topic: ``kafka/<topic>``. Kafka is not materialized by
Dagster; its state arrives as observations from ``kafka_lag_sensor``."""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.core.config import PipelineConfig

KAFKA_GROUP = "kafka"


def topic_asset_key(topic: str) -> dg.AssetKey:
    return dg.AssetKey(["kafka", topic])


def topic_specs(config: PipelineConfig) -> list[dg.AssetSpec]:
    return [
        dg.AssetSpec(
            key=topic_asset_key(topic.name),
            description=(
                f"Kafka topic `{topic.name}`: Confluent-framed Avro messages, staged by the "
                "stage job from explicit offset ranges. Observations carry end offsets, "
                "staged offsets and lag per partition."
            ),
            group_name=KAFKA_GROUP,
            kinds={"kafka"},
            owners=["team:data-platform"],
            metadata={"topic": topic.name},
        )
        for topic in config.topics
    ]
