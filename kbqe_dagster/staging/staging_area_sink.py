"""The staging area as a sink: a range's records as Avro container files plus done files, and
the range commit protocol (DESIGN.md §3).

Files stream to the task's work directory (:class:`~kbqe_dagster.staging.open_file.OpenFile`),
so memory stays bounded whatever the range size. Commit: upload every avro file of the range
create-only, then create its done files create-only, each carrying the range manifest, which
pins the version of every uploaded object; the first done file created is the commit point.
An upload refused because the name is taken means another writer owns the range: this
attempt stops uncommitted. A crash before the commit point leaves only orphans (deleted by the
next run's preparation); a crash after it is rolled forward. A range that stages nothing
commits through its range marker, so the offsets still advance.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from kbqe_dagster.core.errors import CommitConflictError
from kbqe_dagster.core.protocol.commit import Delivered, avro_file_name, plan_range_commit
from kbqe_dagster.core.protocol.naming import AvroFileName
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.faults import crash_point
from kbqe_dagster.resources.staging_store import StagingStore
from kbqe_dagster.staging.open_file import OpenFile
from kbqe_dagster.staging.range_sink import RangeTally, SinkOutcome

log = logging.getLogger(__name__)


class StagingAreaSink:
    """Avro files + done files in the staging area (a :class:`~kbqe_dagster.staging.range_sink.RangeSink`)."""

    def __init__(self, rng: OffsetRange, workdir: Path, codec: str) -> None:
        self.rng = rng
        self.workdir = workdir
        self.codec = codec
        self.sync_marker: bytes | None = None
        """The files' Avro sync marker; None draws a random one per file (tests fix it)."""
        self.files: list[tuple[str, OpenFile]] = []  # (dataset, file), in the order opened

    def open(self, dataset: str, table: str, schema_id: int, schema: dict) -> OpenFile:
        name = avro_file_name(self.rng, dataset, table, schema_id)
        open_file = OpenFile(self.workdir, name, schema, self.codec, self.sync_marker)
        self.files.append((dataset, open_file))
        return open_file

    def opened(self, dataset: str, table: str, schema_id: int) -> OpenFile | None:
        """The file :meth:`open` made for this key, if any (a sink above may add records to it
        at commit: the dead letters of rows the Storage Write API refused)."""
        name = avro_file_name(self.rng, dataset, table, schema_id)
        return next((f for _, f in self.files if f.name == name), None)

    def commit(
        self,
        store: StagingStore,
        covered: OffsetRange,
        tally: RangeTally,
        *,
        delivered: Sequence[
            tuple[AvroFileName, int, Mapping[str, int], Mapping[str, int], Delivered]
        ] = (),
    ) -> SinkOutcome:
        """``delivered``: files a sink above sent through the Storage Write API instead of the
        staging area, (name, records, days, hours, where they went), listed in the manifest
        with no object uploaded."""
        staged = []
        versions: dict[str, str] = {}
        bytes_by_dataset: Counter[str] = Counter()
        for dataset, open_file in self.files:
            bytes_by_dataset[dataset] += open_file.close()
        for _, open_file in self.files:
            try:
                versions[open_file.name.name] = store.create_only_file(
                    open_file.path, open_file.name.name
                )
            except CommitConflictError as error:
                # Another writer's object holds this name: a concurrent writer of the same
                # range, or (after the range was loaded and its files deleted) a zombie's
                # re-upload. Either way this attempt does not own the range: it stops before
                # its commit point. What it uploaded is an orphan if nobody commits the range
                # (the next run deletes it) or a leftover under a committed name (the load
                # step deletes it, never loads it: the commit pins other versions).
                log.warning("%s: not committing: %s", covered, error)
                return SinkOutcome(None, (), dict(bytes_by_dataset), conflict=True)
            staged.append((open_file.name, open_file.records))
            crash_point("avro_uploaded")
        files = [f for _, f in self.files]
        days = {f.name.name: f.iso_days() for f in files}
        hours = {f.name.name: f.hour_keys() for f in files if f.hours}
        for name, records, file_days, file_hours, _ in delivered:
            staged.append((name, records))
            days[name.name] = dict(file_days)
            if file_hours:
                hours[name.name] = dict(file_hours)
        commit = plan_range_commit(
            covered,
            staged,
            dead_letters=tally.dead_letters,
            skipped=tally.skipped,
            created_at=tally.created_at,
            days=days,
            hours=hours,
            versions=versions,
            kafka_ts_max=tally.kafka_ts_max,
            delivered={name.name: where for name, _, _, _, where in delivered} or None,
        )
        conflict = False
        for done in commit.done_files:
            try:
                store.create_only(done.name, commit.content)
            except CommitConflictError:
                # Only the first done file can conflict: this writer is a zombie that lost
                # the race for the commit point. The winner's manifest pins the winner's
                # avro objects, so whatever this writer uploaded is never loaded.
                log.warning("%s: already committed by another writer; not committing", covered)
                conflict = True
                break
            crash_point("done_created")
        return SinkOutcome(
            covered.last,
            tuple((name.name, n) for name, n in staged),
            dict(bytes_by_dataset),
            conflict,
        )

    def abort(self) -> None:
        for _, open_file in self.files:
            open_file.close()
