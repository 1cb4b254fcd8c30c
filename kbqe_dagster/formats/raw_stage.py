"""Raw archive topics (``format: raw``): every message staged as it came, never decoded
(core/formats/raw_archive.py owns the record and the rules).

Per message: the value's size against ``max_message_size`` (the one rule about the value),
then the row: the enrichment prefix (the pipeline's columns with the timestamp, key and
headers turned on: :meth:`RawRangeStager.file_enrichment`), the event hour for an HOUR table,
and the value as a nullable ``bytes`` body; routing (``static`` or ``function``, never on
content) and the date (the Kafka timestamp's) are the Avro path's own steps. A tombstone is a
row whose value is null; bytes that are not UTF-8, JSON or a Confluent frame are bytes.

The native kernel stages raw topics with a routine of its own (``RawKernel``, kernel/src/
raw.rs): :class:`RawNativeStaging` drives it through the append kernel's loop, for a static
destination, DAY or HOUR. It hands back what it is not certain about (a null or missing Kafka
timestamp, a date outside the event-time range, an oversized value, a header name that is not
UTF-8) to :meth:`RawRangeStager.add`, so the files are the Python path's byte for byte
(``kbqe_dagster_tests/formats/test_raw_stage.py`` compares them).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from kbqe_dagster.core.errors import OversizedMessageError
from kbqe_dagster.core.formats.raw_archive import (
    RAW_RECORD_NAME,
    RAW_SCHEMA_ID,
    RAW_VALUE_SCHEMA,
    encode_raw_value,
    raw_enrichment,
)
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.enrichment import EnrichmentConfig, extended_schema
from kbqe_dagster.core.record.event_time import epoch_day
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging
from kbqe_dagster.staging.stager import RangeStager

_NO_FIELDS: dict[str, Any] = {}  # routing and the date read no field of a raw record


class RawNativeStaging(NativeStaging):
    """The append kernel's loop (staging/native_kernel.py) over the raw kernel: nothing to
    teach it (no schema, no route by value), one file slot (the static destination)."""

    def __init__(self, stager: RawRangeStager, extension: Any) -> None:
        self.stager = stager
        destination = stager.static_destination
        assert destination is not None  # for_range's rule
        self.destination = destination
        self.hourly = stager.pipeline.tables.is_hourly(destination.dataset, destination.table)
        event = stager.topic.event_time
        enrichment = stager.enrichment
        self.kernel = extension.RawKernel(
            stager.rng.topic, stager.rng.partition, stager.max_size,
            epoch_day(event.min_date), epoch_day(event.max_date),
            enrichment.timestamp_column is not None, enrichment.key_column is not None,
            enrichment.headers_column is not None, self.hourly,
        )  # fmt: skip
        self.handbacks: Counter[str] = Counter()
        self.handed_back_records: Counter[str] = Counter()  # NativeStaging's; not counted here

    @classmethod
    def for_range(cls, stager: Any, extension: Any) -> RawNativeStaging | None:
        """The raw kernel's driver, or None: ``function`` routing (a Python function per
        message) and a static destination that is not allowed (each message's error names its
        offset) take the Python path, as does an extension built before the raw kernel."""
        if stager.static_destination is None or not hasattr(extension, "RawKernel"):
            return None
        return cls(stager, extension)

    def _teach(self, msg: Any, reason: str, unknown_route: Any) -> bool:
        return False  # a raw hand-back is the Python path's to judge, never something to learn

    def _drain(self) -> None:
        drained = self.kernel.drain()
        if drained is None:
            return
        records, ends, days, hours = drained
        destination = self.destination
        self.stager.open_file(
            destination.dataset, destination.table, RAW_SCHEMA_ID, self.stager.file_schema
        ).append_many(records, memoryview(ends).cast("Q"), days, hours if self.hourly else None)


class RawRangeStager(RangeStager):
    """Stages every message of a range as a raw row (see the module docstring)."""

    native_kernel = False  # the append kernel decodes Confluent frames: not this routine
    native_driver = RawNativeStaging

    def __init__(self, ctx: StageContext, rng: OffsetRange, workdir: Path) -> None:
        super().__init__(ctx, rng, workdir)
        self.file_schema = extended_schema(RAW_VALUE_SCHEMA, self.enrichment)

    def file_enrichment(self, enrichment: EnrichmentConfig) -> EnrichmentConfig:
        return raw_enrichment(enrichment)

    def stage(self, msg: Any) -> None:
        value = msg.value()
        if value is not None and len(value) > self.max_size:
            raise OversizedMessageError(
                f"{len(value)} bytes exceeds max_message_size {self.max_size}"
            )
        self.place(
            msg,
            _NO_FIELDS,
            encode_raw_value(value),
            RAW_SCHEMA_ID,
            self.file_schema,
            RAW_RECORD_NAME,
        )

    @staticmethod
    def framed_schema_id(value: bytes | None) -> int | None:
        return None  # a raw value's first bytes mean nothing to this topic
