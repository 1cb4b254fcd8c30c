"""Reading a staging area once for a report: the flat listing (names, sizes, ages) parsed
into staging names, and the load state file next to it.

The listing is flat: files directly under the staging location. The state file lives under
``_kbqe/`` and is read on its own, never mistaken for a staging file.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Mapping

from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.core.load_state import STATE_BACKUP, STATE_FILE, LoadState, read_state
from kbqe_dagster.core.naming import ParsedListing, parse_listing, parse_name
from kbqe_dagster.resources.staging_store import StagingStore, StoredFile

STATE_DIR = STATE_FILE.rpartition("/")[0] + "/"


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
    files = {
        f.name: f
        for f in store.list(topic + ".")
        if (parsed := parse_name(f.name)) is not None and parsed.key.topic == topic
    }
    return StagingSnapshot(files, parse_listing(files))


def read_load_state(store: StagingStore) -> LoadState:
    """The load state of the staging area: empty when neither the state file nor its backup
    exists; :class:`~kbqe_dagster.core.errors.StateFileError` when it cannot be trusted."""
    present = {f.name for f in store.list(STATE_DIR)}
    current = _read_if(store, STATE_FILE, present)
    backup = _read_if(store, STATE_BACKUP, present)
    return read_state(current, backup)


def _read_if(store: StagingStore, name: str, present: set[str]) -> bytes | None:
    if name not in present:
        return None
    try:
        return store.read_bytes(name)
    except StagingError:  # replaced by the load coordinator between the listing and the read
        return None
