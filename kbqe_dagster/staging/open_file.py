"""One avro file of a range being staged: the records of one (destination table, schema id)
streamed into an Avro container file in the task's work directory, with the event days (and,
for an HOUR table, hours) its records fall on, for the range manifest.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from kbqe_dagster.core.protocol.naming import AvroFileName
from kbqe_dagster.core.record.event_time import from_epoch_day
from kbqe_dagster.core.record.partitioning import hour_key
from kbqe_dagster.staging.avro_container import AvroContainerWriter


class OpenFile:
    """The container file of one (dataset, table, schema id) of a range, open for appends."""

    def __init__(self, directory: Path, name: AvroFileName, schema: dict, codec: str,
                 sync_marker: bytes | None = None) -> None:  # fmt: skip
        self.name = name
        self.path = directory / name.name
        # Open for the file's life across appends; close() closes it.
        self._handle = open(self.path, "wb")  # noqa: SIM115
        self.writer = AvroContainerWriter(
            self._handle, schema, codec=codec, sync_marker=sync_marker
        )
        # Event day (days since 1970, as encoded) → records, for the manifest; ISO dates are
        # made once per day at commit, not once per record.
        self.days: Counter[int] = Counter()
        # Event hour (hours since 1970 UTC) → records, for an HOUR table's file only.
        self.hours: Counter[int] = Counter()

    @property
    def records(self) -> int:
        return self.writer.records

    def append(self, prefix: bytes, body: bytes, day: int, hour: int | None = None) -> None:
        self.writer.append(prefix, body)
        self.days[day] += 1
        if hour is not None:
            self.hours[hour] += 1

    def append_many(self, records: bytes, ends: Any, days: list[tuple[int, int]],
                    hours: list[tuple[int, int]] | None = None) -> None:  # fmt: skip
        """Records staged by the native kernel: back to back, ``ends`` their end offsets,
        ``days`` (event day, records) pairs and, for an HOUR table, ``hours`` (event hour,
        records) pairs."""
        self.writer.append_many(records, ends)
        for day, n in days:
            self.days[day] += n
        for hour, n in hours or ():
            self.hours[hour] += n

    def iso_days(self) -> dict[str, int]:
        return {from_epoch_day(day).isoformat(): n for day, n in sorted(self.days.items())}

    def hour_keys(self) -> dict[str, int]:
        return {hour_key(hour): n for hour, n in sorted(self.hours.items())}

    def close(self) -> int:
        self.writer.close()
        self._handle.close()
        return self.path.stat().st_size
