"""Which staging area feeds a table with a topic: one per (table, topic), recorded on the table.

A topic-partition's next offset lives in the staging area's done files (DESIGN.md §3). A
second staging area (another ``KBQE_STAGING_URL``: a bucket prefix, a directory) has none
for the topic, so it stages the topic again from its start offset; loading its files into a
table the first one already fed puts every record in twice. Exactly once holds *per staging
area*; this module makes the one-area-per-(table, topic) rule visible and enforceable:

- after a load, the table carries a label per topic it was loaded from:
  ``kbqe-feed-<hash of the topic>`` = ``<readable staging area>-<hash of the staging area>``
  (BigQuery labels: lowercase letters, digits, ``_`` and ``-``, at most 63 characters, at
  most 64 labels per table; labels are table metadata: reading and writing them is free);
- before a load, a label of one of the job's topics naming another staging area refuses the
  job (:func:`feed_conflicts`), so the coordinator fails it and, after its retries,
  quarantines its files with a note naming the table, the topic and both staging areas.

Tables loaded before this guard carry no label: the first staging area to load them after
it claims them. Several topics of one table may come from different staging areas (a shared
dead-letter table of two deployments): the rule is per topic. A table already carrying 64
labels gets no new one: its topic goes unguarded and :func:`labels_to_add` says which.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

FEED_LABEL_PREFIX = "kbqe-feed-"
MAX_TABLE_LABELS = 64
"""BigQuery's limit of labels per resource."""
_LABEL_UNSAFE = re.compile(r"[^a-z0-9_-]+")
_VALUE_MAX = 63
_HASH_CHARS = 12


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:_HASH_CHARS]


def staging_area_id(url: str) -> str:
    """The staging area ``url`` as one name whoever spells it: ``gs://bucket/prefix`` without
    a trailing ``/``, a directory as an absolute normalized path."""
    if url.startswith("gs://"):
        return url.rstrip("/")
    return os.path.normpath(os.path.abspath(url))


def feed_label_key(topic: str) -> str:
    """The label of ``topic`` on a table it feeds (a hash: topics may hold dots and capitals,
    and may be longer than a label key)."""
    return FEED_LABEL_PREFIX + _digest(topic)


def feed_label_value(staging_url: str) -> str:
    """The staging area as a label value: readable (its URL lowercased, every other character
    a ``-``), and exact through the hash of the whole URL at its end."""
    area = staging_area_id(staging_url)
    readable = _LABEL_UNSAFE.sub("-", area.lower()).strip("-")
    room = _VALUE_MAX - _HASH_CHARS - 1
    return f"{readable[:room].rstrip('-')}-{_digest(area)}"


@dataclass(frozen=True)
class FeedConflict:
    """``table`` is fed with ``topic`` by the staging area ``theirs`` (a label value), not by
    this one, ``ours`` (its URL)."""

    table: str
    topic: str
    label: str
    theirs: str
    ours: str

    @property
    def message(self) -> str:
        return (
            f"table {self.table} is fed with topic {self.topic} from another staging area "
            f"(table label {self.label}={self.theirs}), not from this one, {self.ours} "
            f"({feed_label_value(self.ours)}). Offsets live in a staging area's done files, so "
            f"this staging area staged {self.topic} again from its start offset: loading its "
            "files would put those records in the table twice. Run the pipeline with the "
            "staging area that feeds the table (KBQE_STAGING_URL), or, if that one is retired "
            f"and this one was bootstrapped past its last offsets (`kbqe bootstrap`), remove "
            f"the label (`bq update --remove_label {self.label} {self.table}`) and release the "
            f"files (`kbqe load release --table {self.table}`); docs/runbook.md, 'A table fed from two staging "
            "areas'"
        )


def feed_conflicts(
    labels: Mapping[str, str] | None,
    table: str,
    topics: Iterable[str],
    staging_url: str,
) -> list[FeedConflict]:
    """The job's topics whose label on ``table`` names another staging area than
    ``staging_url``; none when the table does not exist (``labels`` None) or has no label."""
    if not labels:
        return []
    ours = feed_label_value(staging_url)
    conflicts = []
    for topic in sorted(set(topics)):
        key = feed_label_key(topic)
        theirs = labels.get(key)
        if theirs is not None and theirs != ours:
            conflicts.append(FeedConflict(table, topic, key, theirs, staging_area_id(staging_url)))
    return conflicts


def labels_to_add(
    labels: Mapping[str, str] | None, topics: Iterable[str], staging_url: str
) -> tuple[dict[str, str], list[str]]:
    """The labels a table loaded from ``topics`` lacks, and the topics left without one
    because the table reached BigQuery's 64 labels. A label of another staging area is
    never overwritten (:func:`feed_conflicts` refused that load)."""
    present = dict(labels or {})
    value = feed_label_value(staging_url)
    add: dict[str, str] = {}
    unguarded: list[str] = []
    for topic in sorted(set(topics)):
        key = feed_label_key(topic)
        if key in present or key in add:
            continue
        if len(present) + len(add) >= MAX_TABLE_LABELS:
            unguarded.append(topic)
            continue
        add[key] = value
    return add, unguarded
