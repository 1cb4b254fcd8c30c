"""Reading a staging area once for a report: the flat listing (names, sizes, ages) parsed
into staging names, and the load state file next to it.

The listing is flat: files directly under the staging location. The state file lives under
``_kbqe/`` and is read on its own, never mistaken for a staging file.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime

from kbqe_dagster.core.load.state import LoadState
from kbqe_dagster.core.protocol.naming import ParsedListing, of_topic, parse_listing, topic_prefix
from kbqe_dagster.loading.state_file import StateFile
from kbqe_dagster.resources.staging_store import StagingStore, StoredFile


@dataclass(frozen=True)
class StagingSnapshot:
    """Every file directly under the staging location, by name, and their parsed names."""

    files: Mapping[str, StoredFile]
    listing: ParsedListing

    def size(self, name: str) -> int:
        return self.files[name].size

    def age_seconds(self, name: str, now: datetime) -> float:
        return max(0.0, (now - self.files[name].updated).total_seconds())


def take_snapshot(store: StagingStore, prefix: str = "") -> StagingSnapshot:
    files = {f.name: f for f in store.list(prefix)}
    return StagingSnapshot(files, parse_listing(files))


def topic_snapshot(store: StagingStore, topic: str) -> StagingSnapshot:
    """The files of exactly ``topic``: a ``topic.`` prefix also lists ``topic.sub``'s files
    (dots are legal in topic names), which are dropped here by parsing."""
    listed = {f.name: f for f in store.list(topic_prefix(topic))}
    ours, _ = of_topic(listed, topic)
    files = {name: listed[name] for name in ours}
    return StagingSnapshot(files, parse_listing(files))


def read_load_state(store: StagingStore) -> LoadState:
    """The load state of the staging area, read as the load coordinator reads it: empty when
    neither the state file nor its backup exists;
    :class:`~kbqe_dagster.core.errors.StateFileError` when it cannot be trusted."""
    return StateFile(store).read()
