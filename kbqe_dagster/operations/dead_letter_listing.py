"""``kbqe dead-letters``: the dead-letter records still in the staging area, with reasons.

Dead-letter files are staged like any table under the configured dead-letter dataset/table
(``PipelineConfig.dead_letter``) with schema id 0 (``core/record/dead_letter_record.py``). Only committed
files (with their done file) are read: an avro file without one is a stage run in flight or
a crash leftover that the next run deletes and redoes, so its records would show twice.
Files already loaded are gone from the staging area; query the dead-letter table for those.

Every matching record is counted per reason; ``limit`` bounds how many are returned, in
(topic, partition, offset) order. Raw keys and values are shown as short previews.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import fastavro

from kbqe_dagster.core.config.pipeline import DeadLetterDestination
from kbqe_dagster.core.errors import StagingError
from kbqe_dagster.core.protocol.naming import AvroFileName
from kbqe_dagster.operations.snapshot import take_snapshot
from kbqe_dagster.resources.staging_store import StagingStore

PREVIEW_BYTES = 32


@dataclass(frozen=True)
class BytesPreview:
    """The first bytes of a raw key or value: hex, and as text when they decode as UTF-8."""

    size: int
    hex: str
    text: str | None
    truncated: bool

    @classmethod
    def of(cls, raw: bytes | None) -> BytesPreview | None:
        if raw is None:
            return None
        head = raw[:PREVIEW_BYTES]
        truncated = len(raw) > PREVIEW_BYTES
        text: str | None
        try:
            text = head.decode("utf-8")
        except UnicodeDecodeError as exc:
            # A multi-byte character cut by the preview boundary is still text.
            cut = (
                truncated and exc.start >= len(head) - 3 and exc.reason == "unexpected end of data"
            )
            text = head[: exc.start].decode("utf-8") if cut else None
        if text is not None and not text.isprintable():
            text = None
        return cls(len(raw), head.hex(), text, truncated)

    def to_json(self) -> dict[str, Any]:
        return {"size": self.size, "hex": self.hex, "text": self.text, "truncated": self.truncated}


@dataclass(frozen=True)
class DeadLetterView:
    file: str
    reason: str
    error: str
    topic: str
    partition: int
    offset: int
    kafka_timestamp: datetime | None
    schema_id: int | None
    key: BytesPreview | None
    value: BytesPreview | None
    header_keys: tuple[str, ...]
    staged_at: datetime

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "reason": self.reason,
            "error": self.error,
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "kafka_timestamp": self.kafka_timestamp.isoformat() if self.kafka_timestamp else None,
            "schema_id": self.schema_id,
            "key": self.key.to_json() if self.key else None,
            "value": self.value.to_json() if self.value else None,
            "header_keys": list(self.header_keys),
            "staged_at": self.staged_at.isoformat(),
        }


@dataclass(frozen=True)
class DeadLetterReport:
    staging: str
    table: str
    files: tuple[str, ...]
    counts_by_reason: dict[str, int]
    """Every record that passed the topic filter, per reason (before ``reason``/``limit``)."""
    matching: int
    """Records that passed every filter (before ``limit``)."""
    records: tuple[DeadLetterView, ...]

    @property
    def truncated(self) -> bool:
        return self.matching > len(self.records)

    def to_json(self) -> dict[str, Any]:
        return {
            "staging": self.staging,
            "table": self.table,
            "files": list(self.files),
            "counts_by_reason": dict(self.counts_by_reason),
            "matching": self.matching,
            "truncated": self.truncated,
            "records": [r.to_json() for r in self.records],
        }


def dead_letters(
    store: StagingStore,
    destination: DeadLetterDestination,
    *,
    reason: str | None = None,
    topic: str | None = None,
    limit: int | None = None,
) -> DeadLetterReport:
    """Dead-letter records of the committed dead-letter files behind ``store``."""
    listing = take_snapshot(store).listing
    done_keys = {d.key for d in listing.done}
    files = tuple(
        a
        for a in listing.avro
        if a.key.table_id == (destination.dataset, destination.table)
        and a.key in done_keys
        and (topic is None or a.key.topic == topic)
    )
    counts: Counter[str] = Counter()
    matching = 0
    shown: list[DeadLetterView] = []
    for avro in files:
        for record in _records(store, avro):
            counts[record["reason"]] += 1
            if reason is not None and record["reason"] != reason:
                continue
            matching += 1
            if limit is None or len(shown) < limit:
                shown.append(_view(avro.name, record))
    return DeadLetterReport(
        staging=store.location.url,
        table=f"{destination.dataset}.{destination.table}",
        files=tuple(a.name for a in files),
        counts_by_reason=dict(sorted(counts.items())),
        matching=matching,
        records=tuple(shown),
    )


def _records(store: StagingStore, avro: AvroFileName) -> Iterator[dict[str, Any]]:
    data = store.read_bytes(avro.name)
    try:
        yield from fastavro.reader(io.BytesIO(data))
    except (ValueError, EOFError, KeyError, TypeError) as exc:
        raise StagingError(
            f"dead-letter file {store.uri(avro.name)} is not readable: {exc}"
        ) from exc


def _view(file: str, record: dict[str, Any]) -> DeadLetterView:
    return DeadLetterView(
        file=file,
        reason=record["reason"],
        error=record["error"],
        topic=record["topic"],
        partition=record["partition"],
        offset=record["offset"],
        kafka_timestamp=record.get("kafka_timestamp"),
        schema_id=record.get("schema_id"),
        key=BytesPreview.of(record.get("raw_key")),
        value=BytesPreview.of(record.get("raw_value")),
        header_keys=tuple(h["key"] for h in record.get("headers") or ()),
        staged_at=record["staged_at"],
    )
