"""Lag per topic-partition: Kafka's high watermark against the next offset the done files
give (``staging/backlog.py``, the same figure the stage sensor launches runs on).

Read-only, like the sensor, and with the sensor's bounded cost: every topic's lag from one
staging listing and one watermark read (``fleet_backlog``), whatever the number of topics. A
topic that cannot be read (deleted, no permission) is reported as not readable and the others
still are; only when no configured topic can be read is the whole source down.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.resources.kafka.clients import KafkaReadError, KafkaSettings
from kbqe_dagster.resources.kafka.cluster import discover_topics
from kbqe_dagster.resources.staging_store import StagingStore
from kbqe_dagster.staging.backlog import TopicBacklog, fleet_backlog


@dataclass(frozen=True)
class LagView:
    topics: tuple[TopicBacklog, ...]
    unreadable: dict[str, str] = field(default_factory=dict)
    """Topic → why it could not be read (redacted)."""


class NoTopicReadable(Exception):
    """Not a single configured topic could be read: Kafka itself is the problem."""


def read_lag(
    store: StagingStore,
    kafka: KafkaSettings,
    pipeline: PipelineConfig,
    redact: Callable[[object], str] = str,
) -> LagView:
    readable, unreadable = [], {}
    try:
        pipeline = discover_topics(pipeline, kafka)  # the topics patterns take, at this scrape
    except KafkaReadError as error:
        raise NoTopicReadable(redact(f"listing topics: {error}")) from error
    try:
        found = fleet_backlog(
            store,
            kafka,
            {t.name: t.staging.start_offset for t in pipeline.topics},
            oldest_wanted=lambda backlog: False,
        )
    except Exception as error:  # noqa: BLE001 - the one read of every topic failed: Kafka's
        found = {t.name: error for t in pipeline.topics}
    for topic in pipeline.topics:
        backlog = found[topic.name]
        if isinstance(backlog, TopicBacklog):
            readable.append(backlog)
        else:
            unreadable[topic.name] = redact(f"{type(backlog).__name__}: {backlog}")
    if unreadable and not readable:
        raise NoTopicReadable("; ".join(f"{t}: {e}" for t, e in sorted(unreadable.items())))
    return LagView(tuple(readable), unreadable)
