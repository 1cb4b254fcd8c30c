"""Writing committed offset ranges into a staging store for the load tests: real Avro
container files with the enrichment columns, and done files carrying the range manifest
exactly as the stage task commits them (``core.commit.plan_range_commit``), optionally with
per-day counts, or empty like the original Scala project's."""

from __future__ import annotations

import io
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any

import fastavro

from kbqe_dagster.core.protocol.commit import plan_range_commit
from kbqe_dagster.core.protocol.naming import AvroFileName, FileKey
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.dead_letter_record import (
    DEAD_LETTER_SCHEMA,
    DEAD_LETTER_SCHEMA_ID,
    DeadLetter,
)
from kbqe_dagster.core.record.enrichment import EnrichmentConfig, extended_schema
from kbqe_dagster.resources.staging_store import StagingStore

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "com.acme.sales",
    "fields": [{"name": "orderId", "type": "string"}, {"name": "amountCents", "type": "long"}],
}
ORDER_V2 = {
    **ORDER_V1,
    "fields": ORDER_V1["fields"]
    + [{"name": "coupon", "type": ["null", "string"], "default": None}],
}
PAGE_VIEW = {
    "type": "record",
    "name": "PageView",
    "namespace": "com.acme.web",
    "fields": [{"name": "url", "type": "string"}, {"name": "durationMs", "type": "int"}],
}
ENRICHMENT = EnrichmentConfig()
EPOCH = datetime(2024, 9, 13, 12, tzinfo=UTC)


@dataclass(frozen=True)
class Table:
    dataset: str
    table: str
    schema_id: int
    writer_schema: dict = field(hash=False, compare=False)

    @property
    def file_schema(self) -> dict:
        if self.schema_id == DEAD_LETTER_SCHEMA_ID:
            return DEAD_LETTER_SCHEMA
        return extended_schema(self.writer_schema, ENRICHMENT)


def record(table: Table, topic: str, partition: int, offset: int, day: date) -> dict[str, Any]:
    """One record of ``table`` at (topic, partition, offset) with event date ``day``."""
    if table.schema_id == DEAD_LETTER_SCHEMA_ID:
        staged = datetime.combine(day, datetime.min.time(), tzinfo=UTC)
        return DeadLetter(
            "bad_magic",
            f"{topic}[{partition}] offset {offset}: bad magic",
            topic,
            partition,
            offset,
            None,
            None,
            b"key",
            b"\x01body",
            [],
            staged,
        ).to_record()
    body: dict[str, Any] = {}
    for f in table.writer_schema["fields"]:
        name = f["name"]
        body[name] = {
            "orderId": f"o-{offset}",
            "amountCents": offset * 10,
            "coupon": "WELCOME",
            "url": f"/p/{offset}",
            "durationMs": offset % 1000,
        }[name]
    return {
        **body,
        "_event_date": day,
        "_kafka_topic": topic,
        "_kafka_partition": partition,
        "_kafka_offset": offset,
        "_kafka_timestamp": EPOCH + timedelta(seconds=offset),
    }


@dataclass(frozen=True)
class StagedRange:
    avro: tuple[str, ...]
    done: tuple[str, ...]
    records: dict[str, int]
    days: dict[str, dict[str, int]]


def stage_range(
    store: StagingStore,
    topic: str,
    partition: int,
    first: int,
    last: int,
    placement: Sequence[tuple[Table, int, date]],
    *,
    with_days: bool = True,
    scala_done: bool = False,
    pin_versions: bool = True,
    hour_of: Any = None,
) -> StagedRange:
    """Commit ``[first, last]``: the offsets from ``first`` are given, in order, to the
    (table, count, day) groups of ``placement``; the rest of the range stays empty (gaps).
    Like the stage task, the manifest pins the version of each uploaded avro object, unless
    ``pin_versions`` is off (manifests written before versions were pinned). ``hour_of``
    (offset → hour of the day) also records per-hour counts, as for an HOUR table's file."""
    offsets = iter(range(first, last + 1))
    contents: dict[Table, list[dict]] = {}
    days: dict[str, Counter] = {}
    hours: dict[str, Counter] = {}
    for table, count, day in placement:
        rows = contents.setdefault(table, [])
        name = _avro_name(table, topic, partition, first)
        for _ in range(count):
            offset = next(offsets)
            rows.append(record(table, topic, partition, offset, day))
            days.setdefault(name.name, Counter())[day.isoformat()] += 1
            if hour_of is not None:
                hour = f"{day.isoformat()}T{hour_of(offset):02d}"
                hours.setdefault(name.name, Counter())[hour] += 1
    staged = []
    versions: dict[str, str] = {}
    for table, rows in contents.items():
        name = _avro_name(table, topic, partition, first)
        buffer = io.BytesIO()
        fastavro.writer(buffer, fastavro.parse_schema(table.file_schema), rows, codec="snappy")
        store.put_bytes(name.name, buffer.getvalue())
        (listed,) = store.list(name.name)
        if pin_versions and listed.version is not None:
            versions[name.name] = listed.version
        staged.append((name, len(rows)))
    commit = plan_range_commit(
        OffsetRange(topic, partition, first, last + 1),
        staged,
        created_at=datetime.now(UTC),
        versions=versions,
        hours={k: dict(v) for k, v in hours.items()},
    )
    content = commit.content
    if scala_done:
        content = b""
    elif with_days:
        doc = json.loads(content)
        for entry in doc["files"]:
            entry["days"] = dict(days[entry["avro"]])
        content = (json.dumps(doc, sort_keys=True) + "\n").encode()
    for done in commit.done_files:
        store.create_only(done.name, content)
    return StagedRange(
        tuple(name.name for name, _ in staged),
        tuple(d.name for d in commit.done_files),
        {name.name: n for name, n in staged},
        {k: dict(v) for k, v in days.items()},
    )


def _avro_name(table: Table, topic: str, partition: int, first: int) -> AvroFileName:
    return AvroFileName(
        FileKey(topic, partition, table.dataset, table.table, table.schema_id, first)
    )
