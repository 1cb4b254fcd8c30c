"""Driver side of a stage run: make the staging area of one topic consistent, then plan.

Order matters. Roll forward first (a range whose first done file exists is committed: its
missing done files are created from the manifest), then delete orphans (avro files of
attempts that never reached a commit point), then recover offsets from the done files and
plan the ranges. A Storage Write intent without a done file (core/protocol/delivery.py) puts
its exact range first in its partition's plan, alone: restaged, its rows already in the
stream answer ``already_exists``.
Everything is derived from the listing of this topic's prefix. A topic Kafka
does not hold (not created yet, or deleted) plans nothing: its preparation says why
(:attr:`Preparation.missing`) and the run goes on with its other topics.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from kbqe_dagster.core.errors import CommitConflictError
from kbqe_dagster.core.protocol.commit import manifests_needed, plan_bootstrap, plan_cleanup
from kbqe_dagster.core.protocol.delivery import (
    open_intents,
    plan_with_deliveries,
    ranges_to_roll_forward,
)
from kbqe_dagster.core.protocol.naming import IntentFileName, of_topic, topic_prefix
from kbqe_dagster.core.protocol.offsets import (
    RangePlan,
    StartPolicy,
    Watermarks,
    plan_ranges,
    recover,
)
from kbqe_dagster.resources.kafka.clients import KafkaSettings, TopicMissing
from kbqe_dagster.resources.kafka.cluster import watermarks
from kbqe_dagster.resources.staging_store import StagingStore

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Preparation:
    rolled_forward: tuple[str, ...]
    orphans_deleted: tuple[str, ...]
    unrecognized: tuple[str, ...]
    plan: RangePlan
    missing: str | None = None
    """Why nothing was planned when Kafka does not hold the topic; None when it does."""
    open_intents: tuple[IntentFileName, ...] = ()
    """Storage Write intents without a done file: their ranges are restaged first, and their
    tables delivered as the intents say (core/protocol/delivery.py, ``pinned_tables``)."""


def topic_file_names(store: StagingStore, topic: str) -> tuple[list[str], list[str]]:
    """Staging names of exactly ``topic`` (a prefix listing of ``topic.`` also returns the
    files of ``topic.sub``, which are filtered out here), and names that are not ours."""
    return of_topic((f.name for f in store.list(topic_prefix(topic))), topic)


def clean_up(
    store: StagingStore, topic: str
) -> tuple[tuple[str, ...], tuple[str, ...], list[str], list[str]]:
    """Roll forward and delete orphans; returns (created done files, deleted avro files,
    the names after clean-up, unrecognized names)."""
    names, unrecognized = topic_file_names(store, topic)
    manifests = {name: store.read_bytes(name) for name in manifests_needed(names)}
    cleanup = plan_cleanup(names, manifests)
    created = []
    for done_name, content in cleanup.create_done:
        try:
            store.create_only(done_name, content)
        except CommitConflictError:
            log.warning("roll forward: %s was created meanwhile by another writer", done_name)
        created.append(done_name)
    for avro_name in cleanup.delete_avro:
        store.delete(avro_name)
        log.info("deleted orphan avro file %s (no commit point)", avro_name)
    if created or cleanup.delete_avro:
        names, unrecognized = topic_file_names(store, topic)
    return tuple(created), cleanup.delete_avro, names, unrecognized


def prepare_topic(
    store: StagingStore,
    kafka: KafkaSettings,
    topic: str,
    *,
    max_messages_per_run: int,
    max_messages_per_range: int,
    start_policy: StartPolicy,
    marks: Mapping[tuple[str, int], Watermarks] | None = None,
    one_range_per_partition: bool = False,
) -> Preparation:
    """``marks``: the topic's watermarks when the caller read them already (a grouped run
    reads every topic's in one request, ``resources.kafka.watermarks_of``);
    ``one_range_per_partition``: the topic may write a ``delivery: storage_write`` table."""
    created, deleted, names, unrecognized = clean_up(store, topic)
    if marks is None:
        try:
            marks = {
                (w.topic, w.partition): Watermarks(w.low, w.high) for w in watermarks(kafka, topic)
            }
        except TopicMissing as missing:
            log.warning("not staged: %s", missing)
            return Preparation(
                created, deleted, tuple(unrecognized), RangePlan((), ()), missing=str(missing)
            )
    plan = plan_ranges(
        recover(names),
        marks,
        max_messages_per_run=max_messages_per_run,
        max_messages_per_range=max_messages_per_range,
        start_policy=start_policy,
    )
    roll_forward = ranges_to_roll_forward(names)
    if roll_forward or one_range_per_partition:
        for rng in roll_forward:
            log.info("%s: an intent has no done file: restaging exactly this range first", rng)
        plan = plan_with_deliveries(
            plan, roll_forward, one_range_per_partition=one_range_per_partition
        )
    for (t, p), offset in plan.bootstrap_offsets.items():
        commit = plan_bootstrap(t, p, offset, created_at=datetime.now(UTC))
        for done in commit.done_files:
            try:
                store.create_only(done.name, commit.content)
            except CommitConflictError:
                pass  # an identical pin written by a concurrent planner is just as good
    for partition in plan.partitions:
        for warning in partition.warnings:
            log.warning("%s[%d]: %s", partition.topic, partition.partition, warning)
    return Preparation(
        created, deleted, tuple(unrecognized), plan, open_intents=open_intents(names)
    )
