"""Committing one staged offset range atomically, and cleaning up after crashes (DESIGN.md §3).

**Atomic commit of a multi-file range.** One range may write several avro files (tables ×
schema ids, dead letters). The stage task writes *all* avro files first, then the done files,
each created create-only. Every done file written by kbqe carries the same small JSON
manifest of the whole range::

    {"kbqe_manifest": 1, "topic": ..., "partition": ..., "first": ..., "last": ...,
     "files": [{"avro": name, "done": name, "records": n, "version": v, "days": {...},
                "hours": {...}}, ...],
     "dead_letters": n, "skipped": n, "created_at": iso-8601, "kafka_ts_max": ms}

so the *first* done file that exists is the commit point: a crash between two done files
leaves a committed range whose missing done files recovery creates from the manifest (roll
forward) — no record is lost (the avro files were all written before any done file) and none
is staged twice (the range is committed, the planner never re-stages it).

Done files of the original Scala project are **empty**: an empty done file is a self-standing
commit of its own avro file only.

**Pinned versions.** Each file entry records the ``version`` the staging store gave the avro
object when it was created (GCS generation; locally inode, size and mtime). The commit
therefore names exact objects, not just names: the load step loads a file only while its
current version is the pinned one (:func:`is_pinned`), so a late writer that re-creates a
committed name after the file was loaded and deleted (a zombie) cannot get it loaded twice.
Manifests written before versions were pinned, and the Scala project's empty done files, pin
nothing: their files load by name, as before. The field is optional, so the manifest format
stays version 1 and older readers ignore it.

**Kafka time reached.** The optional ``kafka_ts_max`` (epoch ms) is the Kafka time the range
reached (``resources.kafka.RangeReader.kafka_ts_max``), which completeness reads
(``core/completeness/decision.py``); with the per-file ``days`` it tells how far a partition got on
both clocks. Manifests without it (older releases, markers of ranges that read nothing) and
empty done files still parse: the time is then unknown.

**Hours.** A file of an HOUR-partitioned table (core/record/partitioning.py) also records its
records per event hour, ``"hours": {"2026-11-23T14": n}`` (UTC), next to ``days``; other
files have no ``hours``. The field is optional like ``version``: older done files parse, and
their files are reported per day.

**Storage Write.** A file of a table delivered through the Storage Write API
(core/protocol/delivery.py) is listed like any other, with ``"storage_write": {"stream": s,
"offset": o, "rows": n}`` (its rows are ``o..o+n-1`` of stream ``s``); its avro file never
exists in the staging area, so the load side never loads it and retention treats it as
loaded. Manifests without the field (every load file, older releases) parse as before.

**Markers.** A range with no staged file at all (only offset gaps, or only skipped messages)
still commits, so offsets advance: a done file with dataset ``_kbqe``, table ``range``, schema
id 0 and no avro file. A bootstrap marker (operator: "start partition p at offset N", N ≥ 1,
or the planner pinning a start) is dataset ``_kbqe``, table ``bootstrap``, schema 0,
first = last = N-1. Markers are never loaded. The destination allow-list must never admit
the ``_kbqe`` dataset.

**Crash leftovers.** Before staging a partition, avro files with no done file that are listed
in no manifest of a committed range are orphans (an attempt that crashed before its commit
point) and are deleted. Nothing that has a done file, and nothing listed in a manifest, is
deleted. A listed avro file whose done file is missing gets it (roll forward) — only while
the avro file exists: a missing avro file of a committed range was loaded and deleted, and a
done file for it would point at nothing. Run the cleanup on the driver before the range
tasks start: a per-task cleanup would delete a sibling task's files in flight.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.core.protocol.naming import (
    AvroFileName,
    DoneFileName,
    FileKey,
    ParsedListing,
    parse_listing,
    parse_name,
)
from kbqe_dagster.core.protocol.offsets import BOOTSTRAP_MARKER_TABLE, MARKER_DATASET, OffsetRange

RANGE_MARKER_TABLE = "range"
MARKER_SCHEMA_ID = 0
MANIFEST_VERSION = 1


# --- markers -------------------------------------------------------------------------------
def _key_of(name: DoneFileName | AvroFileName | FileKey | str) -> FileKey | None:
    if isinstance(name, FileKey):
        return name
    parsed = parse_name(name) if isinstance(name, str) else name
    return parsed.key if parsed is not None else None


def is_marker(name: DoneFileName | AvroFileName | FileKey | str) -> bool:
    """True for range and bootstrap markers (dataset ``_kbqe``): commits with no data."""
    key = _key_of(name)
    return key is not None and key.dataset == MARKER_DATASET


def is_bootstrap_marker(name: DoneFileName | AvroFileName | FileKey | str) -> bool:
    key = _key_of(name)
    return is_marker(name) and key is not None and key.table == BOOTSTRAP_MARKER_TABLE


def avro_file_name(rng: OffsetRange, dataset: str, table: str, schema_id: int) -> AvroFileName:
    """The name of the avro file of ``rng`` for one destination table and schema id."""
    return AvroFileName(FileKey(rng.topic, rng.partition, dataset, table, schema_id, rng.start))


def range_marker(rng: OffsetRange) -> DoneFileName:
    """The done file that commits ``rng`` when it staged no file."""
    key = FileKey(
        rng.topic, rng.partition, MARKER_DATASET, RANGE_MARKER_TABLE, MARKER_SCHEMA_ID, rng.start
    )
    return DoneFileName(key, rng.last)


def bootstrap_marker(topic: str, partition: int, next_offset: int) -> DoneFileName:
    """The done file that makes ``topic[partition]`` resume at ``next_offset`` (≥ 1)."""
    if next_offset < 1:
        raise ValueError(
            f"bootstrap offset for {topic}[{partition}] must be at least 1, got {next_offset}: "
            "a partition without done files already starts at its low watermark"
        )
    key = FileKey(
        topic,
        partition,
        MARKER_DATASET,
        BOOTSTRAP_MARKER_TABLE,
        MARKER_SCHEMA_ID,
        next_offset - 1,
    )
    return DoneFileName(key, next_offset - 1)


# --- manifest ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Delivered:
    """Where a file's rows went through the Storage Write API: rows ``offset`` ..
    ``offset + rows - 1`` of ``stream`` (rows the API refused are not counted)."""

    stream: str
    offset: int
    rows: int

    @property
    def next_offset(self) -> int:
        return self.offset + self.rows


@dataclass(frozen=True)
class StagedFile:
    """One avro file of a committed range, its done file and its record count; ``days``
    splits the count by event date (ISO date, count), so the load step can report one
    materialization per DAY partition without reading the file."""

    avro: str
    done: str
    records: int
    days: tuple[tuple[str, int], ...] = ()
    version: str | None = None  # the store's version of the avro object this commit pins
    hours: tuple[tuple[str, int], ...] = ()
    """Records per event hour (``YYYY-MM-DDTHH`` UTC), for an HOUR table's file; empty else."""
    delivered: Delivered | None = None
    """Set when the records went through the Storage Write API, not into an avro file."""


@dataclass(frozen=True)
class Manifest:
    """The content of every done file kbqe writes: the whole range, for roll forward."""

    topic: str
    partition: int
    first: int
    last: int
    files: tuple[StagedFile, ...]
    dead_letters: int
    skipped: int
    created_at: str
    kafka_ts_max: int | None = None
    """The Kafka time (epoch ms) the range reached; None: not recorded."""

    @property
    def records(self) -> int:
        return sum(f.records for f in self.files)

    def encode(self) -> bytes:
        doc = {
            "kbqe_manifest": MANIFEST_VERSION,
            "topic": self.topic,
            "partition": self.partition,
            "first": self.first,
            "last": self.last,
            "files": [_file_doc(f) for f in self.files],
            "dead_letters": self.dead_letters,
            "skipped": self.skipped,
            "created_at": self.created_at,
        }
        if self.kafka_ts_max is not None:
            doc["kafka_ts_max"] = self.kafka_ts_max
        return (json.dumps(doc, sort_keys=True, separators=(",", ":")) + "\n").encode()


def _file_doc(staged: StagedFile) -> dict[str, Any]:
    doc: dict[str, Any] = {"avro": staged.avro, "done": staged.done, "records": staged.records}
    if staged.days:
        doc["days"] = dict(staged.days)
    if staged.version is not None:
        doc["version"] = staged.version
    if staged.hours:
        doc["hours"] = dict(staged.hours)
    if staged.delivered is not None:
        d = staged.delivered
        doc["storage_write"] = {"stream": d.stream, "offset": d.offset, "rows": d.rows}
    return doc


def _delivered(doc: Any) -> Delivered | None:
    if doc is None:
        return None
    doc = _typed(doc, dict)
    return Delivered(
        _typed(doc["stream"], str), _typed(doc["offset"], int), _typed(doc["rows"], int)
    )


def parse_manifest(content: bytes, done_name: str) -> Manifest | None:
    """The manifest in done file ``done_name``; ``None`` for an empty (Scala-era) done file.

    Raises :class:`StagingError` when the content is not a manifest of this done file's range.
    """
    if not content.strip():
        return None
    done = parse_name(done_name)
    if not isinstance(done, DoneFileName):
        raise StagingError(f"{done_name!r} is not a done file name")
    try:
        doc = json.loads(content)
        manifest = _manifest_from(doc)
    except (ValueError, TypeError, KeyError, AttributeError) as exc:
        raise StagingError(f"done file {done_name} holds no readable manifest: {exc}") from exc
    problem = _manifest_problem(manifest, done)
    if problem:
        raise StagingError(f"done file {done_name}: manifest {problem}")
    return manifest


def _manifest_from(doc: Any) -> Manifest:
    if not isinstance(doc, dict) or "kbqe_manifest" not in doc:
        raise ValueError("not a kbqe manifest object")
    if doc["kbqe_manifest"] != MANIFEST_VERSION:
        raise ValueError(
            f"manifest version {doc['kbqe_manifest']!r}; this kbqe_dagster reads version "
            f"{MANIFEST_VERSION} (written by a newer release?)"
        )
    files = tuple(
        StagedFile(
            _typed(f["avro"], str),
            _typed(f["done"], str),
            _typed(f["records"], int),
            tuple(
                sorted(
                    (_typed(d, str), _typed(n, int))
                    for d, n in _typed(f.get("days", {}), dict).items()
                )
            ),
            _typed(f["version"], str) if "version" in f else None,
            tuple(
                sorted(
                    (_typed(h, str), _typed(n, int))
                    for h, n in _typed(f.get("hours", {}), dict).items()
                )
            ),
            _delivered(f.get("storage_write")),
        )
        for f in _typed(doc["files"], list)
    )
    return Manifest(
        topic=_typed(doc["topic"], str),
        partition=_typed(doc["partition"], int),
        first=_typed(doc["first"], int),
        last=_typed(doc["last"], int),
        files=files,
        dead_letters=_typed(doc["dead_letters"], int),
        skipped=_typed(doc["skipped"], int),
        created_at=_typed(doc["created_at"], str),
        kafka_ts_max=(
            _typed(doc["kafka_ts_max"], int) if doc.get("kafka_ts_max") is not None else None
        ),
    )


def _typed(value: Any, kind: type) -> Any:
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"expected {kind.__name__}, got {value!r}")
    return value


def _manifest_problem(manifest: Manifest, done: DoneFileName) -> str | None:
    key = done.key
    if (manifest.topic, manifest.partition, manifest.first, manifest.last) != (
        key.topic,
        key.partition,
        key.first_offset,
        done.last_offset,
    ):
        return (
            f"describes {manifest.topic}[{manifest.partition}] "
            f"{manifest.first}..{manifest.last}, not this file's range"
        )
    for staged in manifest.files:
        avro, listed_done = parse_name(staged.avro), parse_name(staged.done)
        if (
            not isinstance(avro, AvroFileName)
            or not isinstance(listed_done, DoneFileName)
            or listed_done != avro.done(done.last_offset)
        ):
            return f"lists {staged.avro!r}/{staged.done!r}, which is not a file of this range"
    if not is_marker(done) and done.name not in {f.done for f in manifest.files}:
        return "does not list this done file"
    return None


@dataclass(frozen=True)
class RangeCommit:
    """What the stage task writes after all avro files of a range: ``done_files`` in order,
    each create-only with ``content``. The first one that is created commits the range."""

    manifest: Manifest
    content: bytes
    done_files: tuple[DoneFileName, ...]


def plan_range_commit(
    rng: OffsetRange,
    staged: Sequence[tuple[AvroFileName, int]],
    *,
    dead_letters: int = 0,
    skipped: int = 0,
    created_at: datetime,
    days: Mapping[str, Mapping[str, int]] | None = None,
    versions: Mapping[str, str] | None = None,
    kafka_ts_max: int | None = None,
    hours: Mapping[str, Mapping[str, int]] | None = None,
    delivered: Mapping[str, Delivered] | None = None,
) -> RangeCommit:
    """The commit of ``rng`` given its avro files and their record counts (``days``: avro
    name → event date → records, optional; ``versions``: avro name → the store's version of
    the uploaded object, pinned by the commit; ``kafka_ts_max``: the Kafka time the range
    reached, epoch ms; ``hours``: avro name → event hour → records, for HOUR tables' files;
    ``delivered``: avro name → where its records went through the Storage Write API, for the
    files of storage_write tables, which are never uploaded).

    With no staged file, the range commits through its range marker.
    """
    if created_at.tzinfo is None:
        raise ValueError("created_at must be timezone-aware")
    avros = [avro for avro, _ in staged]
    if len(set(avros)) != len(avros):
        raise ValueError(f"range {rng}: the same avro file is listed twice")
    for avro in avros:
        if (avro.key.topic_partition, avro.key.first_offset) != (rng.topic_partition, rng.start):
            raise ValueError(f"{avro.name} is not a file of range {rng}")
        if is_marker(avro):
            raise ValueError(f"{avro.name}: the {MARKER_DATASET} dataset is reserved for markers")
    days = days or {}
    versions = versions or {}
    hours = hours or {}
    delivered = delivered or {}
    files = tuple(
        StagedFile(
            avro.name,
            avro.done(rng.last).name,
            records,
            tuple(sorted(days.get(avro.name, {}).items())),
            versions.get(avro.name),
            tuple(sorted(hours.get(avro.name, {}).items())),
            delivered.get(avro.name),
        )
        for avro, records in sorted(staged)
    )
    done_files = tuple(avro.done(rng.last) for avro, _ in sorted(staged)) or (range_marker(rng),)
    manifest = Manifest(
        rng.topic,
        rng.partition,
        rng.start,
        rng.last,
        files,
        dead_letters,
        skipped,
        created_at.isoformat(),
        kafka_ts_max,
    )
    return RangeCommit(manifest, manifest.encode(), done_files)


def plan_bootstrap(
    topic: str, partition: int, next_offset: int, *, created_at: datetime
) -> RangeCommit:
    """The bootstrap marker that makes ``topic[partition]`` resume at ``next_offset``."""
    marker = bootstrap_marker(topic, partition, next_offset)
    if created_at.tzinfo is None:
        raise ValueError("created_at must be timezone-aware")
    manifest = Manifest(
        topic,
        partition,
        marker.first_offset,
        marker.last_offset,
        (),
        0,
        0,
        created_at.isoformat(),
    )
    return RangeCommit(manifest, manifest.encode(), (marker,))


def is_pinned(pinned: str | None, current: str | None) -> bool:
    """Whether the object now under a committed name is the one its commit pinned.

    ``pinned`` is ``None`` for commits that pin nothing (the Scala project's empty done
    files, manifests from before versions): those load by name. Otherwise only the exact
    version loads; any other object under the name (``current`` differs, or the store did
    not say) is a leftover of a late writer.
    """
    return pinned is None or pinned == current


def records_by_avro(manifests: Iterable[Manifest]) -> dict[str, int]:
    """Record counts per avro file name, as committed in manifests."""
    return {f.avro: f.records for m in manifests for f in m.files}


# --- crash leftovers -----------------------------------------------------------------------
RangeId = tuple[str, int, int]  # topic, partition, first offset


@dataclass(frozen=True)
class CleanupPlan:
    """Before staging: create ``create_done`` (create-only, roll forward), then delete
    ``delete_avro`` (orphans of attempts that never reached their commit point)."""

    create_done: tuple[tuple[str, bytes], ...]
    delete_avro: tuple[str, ...]

    @property
    def orphan_count(self) -> int:
        return len(self.delete_avro)


def _uncommitted_avro(
    names: Iterable[str] | ParsedListing,
) -> tuple[list[AvroFileName], dict[RangeId, list[DoneFileName]]]:
    """Avro files without their done file, and the done files of every range."""
    listing = names if isinstance(names, ParsedListing) else parse_listing(names)
    done_keys = {d.key for d in listing.done}
    by_range: dict[RangeId, list[DoneFileName]] = {}
    for done in listing.done:
        range_id = (done.key.topic, done.key.partition, done.first_offset)
        by_range.setdefault(range_id, []).append(done)
    lonely = [a for a in listing.avro if a.key not in done_keys]
    return lonely, by_range


def manifests_needed(names: Iterable[str] | ParsedListing) -> tuple[str, ...]:
    """The done files whose content :func:`plan_cleanup` needs: those of committed ranges
    that have an avro file without its done file (rare: only after a crash)."""
    lonely, by_range = _uncommitted_avro(names)
    needed = {
        done.name
        for avro in lonely
        for done in by_range.get((avro.key.topic, avro.key.partition, avro.key.first_offset), [])
    }
    return tuple(sorted(needed))


def plan_cleanup(
    names: Iterable[str] | ParsedListing, manifests: Mapping[str, bytes]
) -> CleanupPlan:
    """Roll forward committed ranges and list orphans among ``names`` (one partition's or
    one topic's listing). ``manifests`` maps the names from :func:`manifests_needed` to
    their content."""
    lonely, by_range = _uncommitted_avro(names)
    create: dict[str, bytes] = {}
    delete: list[str] = []
    for avro in lonely:
        range_id = (avro.key.topic, avro.key.partition, avro.key.first_offset)
        listed = _listed_in_manifests(by_range.get(range_id, []), manifests, avro.name)
        if avro.name in listed:
            done_name, content = listed[avro.name]
            create[done_name] = content
        else:
            delete.append(avro.name)
    return CleanupPlan(tuple(sorted(create.items())), tuple(sorted(delete)))


def _listed_in_manifests(
    range_done: list[DoneFileName], manifests: Mapping[str, bytes], lonely_avro: str
) -> dict[str, tuple[str, bytes]]:
    """avro name → (its done name, manifest bytes) over all manifests of one range."""
    listed: dict[str, tuple[str, bytes]] = {}
    for done in range_done:
        if done.name not in manifests:
            raise StagingError(
                f"cleanup needs the content of done file {done.name} "
                "(read every file manifests_needed() names)"
            )
        content = manifests[done.name]
        try:
            manifest = parse_manifest(content, done.name)
        except StagingError as exc:
            raise StagingError(
                f"{exc}. Avro file {lonely_avro} has no done file and only this manifest says "
                "whether it was committed: staging of the partition stops until an operator "
                "creates its done file (it belongs to the range) or deletes it (it does not)"
            ) from exc
        for staged in manifest.files if manifest else ():
            previous = listed.get(staged.avro)
            if previous and previous[0] != staged.done:
                raise StagingError(
                    f"avro file {staged.avro} is committed by two ranges ({previous[0]} and "
                    f"{staged.done}): two writers staged the same offsets; resolve by hand"
                )
            listed[staged.avro] = (staged.done, content)
    return listed
