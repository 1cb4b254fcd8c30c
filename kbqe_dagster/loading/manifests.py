"""What the done files say about the avro files of a load job: record counts, records per
event date when the stage side recorded them, and the object version each commit pinned.

Every done file kbqe writes carries the manifest of its whole range (``core/protocol/commit.py``), so
one read per range serves all of its files. Done files of the original Scala project are
empty: their files have no known count. Reads run in a small thread pool (they are GETs).

Per-day counts are read from an optional ``days`` object in a manifest's file entry
(``{"avro": ..., "records": 12, "days": {"2024-09-13": 7, "2024-09-14": 5}}``), which
``core.commit.Manifest`` does not model yet; without it a load is reported for its table as
a whole instead of per DAY partition. Files of HOUR tables also carry ``hours``
(``{"2026-11-23T14": 7}``), read the same way, reported per HOUR partition.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.core.protocol.commit import parse_manifest
from kbqe_dagster.core.protocol.naming import DoneFileName, parse_name
from kbqe_dagster.resources.staging_store import StagingStore

log = logging.getLogger(__name__)

READ_THREADS = 16


@dataclass(frozen=True)
class FileFacts:
    """What is known of one staged avro file; ``None``: not recorded anywhere."""

    records: int | None = None
    days: Mapping[str, int] | None = None
    version: str | None = None  # the object version the commit pinned; None: pins nothing
    hours: Mapping[str, int] | None = None
    """Records per event hour (``YYYY-MM-DDTHH``), for an HOUR table's file; None: not recorded."""


def read_file_facts(store: StagingStore, done_files: Iterable[str]) -> dict[str, FileFacts]:
    """Facts per avro name for the files of ``done_files``; files whose range's done file is
    empty, missing or unreadable are absent from the result."""
    one_per_range: dict[tuple[str, int, int], str] = {}
    for name in done_files:
        done = parse_name(name)
        if isinstance(done, DoneFileName):
            one_per_range.setdefault((done.key.topic, done.key.partition, done.first_offset), name)
    names = sorted(one_per_range.values())
    if not names:
        return {}
    facts: dict[str, FileFacts] = {}
    facts.update(_facts_of(store, names[0]))  # builds the store's client before the threads
    with ThreadPoolExecutor(max_workers=min(READ_THREADS, len(names))) as pool:
        for found in pool.map(lambda n: _facts_of(store, n), names[1:]):
            facts.update(found)
    return facts


def _facts_of(store: StagingStore, done_name: str) -> dict[str, FileFacts]:
    try:
        content = store.read_bytes(done_name)
        manifest = parse_manifest(content, done_name)
    except StagingError as error:
        log.warning("no record counts from done file %s: %s", done_name, error)
        return {}
    if manifest is None:
        return {}
    days = _days_by_avro(content)
    hours = _days_by_avro(content, "hours")
    return {
        f.avro: FileFacts(f.records, days.get(f.avro), f.version, hours.get(f.avro))
        for f in manifest.files
    }


def _days_by_avro(content: bytes, field: str = "days") -> dict[str, dict[str, int]]:
    """The optional per-day (``field`` "hours": per-hour) counts of each file entry; entries
    that do not add up to their ``records`` are ignored rather than trusted."""
    try:
        entries = json.loads(content).get("files", [])
    except (ValueError, AttributeError):
        return {}
    out: dict[str, dict[str, int]] = {}
    for entry in entries:
        days = entry.get(field) if isinstance(entry, dict) else None
        if not isinstance(days, dict):
            continue
        if all(isinstance(k, str) and type(v) is int and v >= 0 for k, v in days.items()) and (
            sum(days.values()) == entry.get("records")
        ):
            out[entry["avro"]] = {k: v for k, v in days.items() if v}
    return out
