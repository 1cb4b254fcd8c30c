"""A staging area on disk for the CLI tests, with every case the commands must get right.

Topics ``com.acme.events`` (dots) and ``com.acme`` (a prefix of the other: listing one by
prefix also lists the other's files). Scala-era files have the original names and EMPTY done
files; kbqe ranges have manifests. Avro files are real Avro containers (fastavro), so the
dead-letter command reads them.

    com.acme.events[0]  Scala: 0..99 orders schema 3 + 4 (both pending; schema 4's file is
                        quarantined in the state file), 100..199 loaded, 200..299 page_views
                        (in a pending load job)                                  → next 300
    com.acme.events[1]  kbqe manifest range 0..49: orders schema 3, orders schema 4, dead
                        letters; page_views at 50 without done file (in flight)  → next 50
    com.acme.events[2]  Scala: 0..9 and 20..29 loaded, hole 10..19               → next 10
    com.acme.events[3]  Scala: 0..9, 10..19, 20..29 all loaded                   → next 30
    com.acme[0]         Scala: 0..9 orders schema 3, pending                     → next 10
    README.txt, com.acme.events.x.avro: not staging names
"""

from __future__ import annotations

import io
import os
import time
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import fastavro

from kbqe_dagster.core.load.selection import PlannedLoadJob
from kbqe_dagster.core.load.state import (
    STATE_FILE,
    LoadState,
    encode_state,
    quarantine_job,
    record_planned,
)
from kbqe_dagster.core.protocol.commit import plan_range_commit
from kbqe_dagster.core.protocol.naming import AvroFileName, FileKey
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.dead_letter_record import DEAD_LETTER_SCHEMA, DeadLetter

T = "com.acme.events"
AGE_SECONDS = 3600  # every staged file was written an hour ago
CREATED = datetime(2024, 9, 13, 12, 0, tzinfo=UTC)

ORDERS_3_P0 = f"{T}.0.acme_sales.orders.3.0.avro"
ORDERS_4_P0 = f"{T}.0.acme_sales.orders.4.0.avro"  # quarantined
VIEWS_P0 = f"{T}.0.acme_web.page_views.5.200.avro"  # in a pending job
ORDERS_3_P1 = f"{T}.1.acme_sales.orders.3.0.avro"
ORDERS_4_P1 = f"{T}.1.acme_sales.orders.4.0.avro"
DEAD_P1 = f"{T}.1.kbqe_dead_letters.dead_letters.0.0.avro"
IN_FLIGHT_P1 = f"{T}.1.acme_web.page_views.5.50.avro"
PREFIX_TOPIC_ORDERS = "com.acme.0.acme_sales.orders.3.0.avro"
UNRECOGNIZED = ("README.txt", f"{T}.x.avro")

ORDER_SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [{"name": "orderId", "type": "string"}],
}


@dataclass(frozen=True)
class Area:
    root: Path
    now: datetime


def avro_bytes(schema: dict, records: list[dict]) -> bytes:
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), records)
    return out.getvalue()


def dead_letter_records() -> list[dict]:
    def letter(offset: int, reason: str, value: bytes | None, error: str) -> dict:
        return DeadLetter(
            reason=reason,
            error=error,
            topic=T,
            partition=1,
            offset=offset,
            kafka_timestamp_ms=1_726_230_000_000,
            schema_id=None,
            raw_key=b"bad",
            raw_value=value,
            headers=[("trace", b"x")],
            staged_at=CREATED,
        ).to_record()

    return [
        letter(3, "bad_magic", b"\x01\x00\x00\x00\x03body", "byte 0 is 0x01, not 0x00"),
        letter(7, "too_short", b"\x00\x00", "2 bytes, shorter than the 5-byte header"),
        letter(9, "bad_magic", b"plain text, not avro at all: hello world!", "byte 0 is 0x70"),
        letter(11, "tombstone", None, "the value is null"),
    ]


def build(root: Path) -> Area:
    files: dict[str, bytes] = {}
    orders = avro_bytes(ORDER_SCHEMA, [{"orderId": "o-1"}, {"orderId": "o-2"}])

    # Scala era: original names, empty done files.
    def scala(
        topic: str, partition: int, table: str, schema: int, first: int, last: int, with_avro: bool
    ) -> None:
        dataset, _, tbl = table.partition(".")
        stem = f"{topic}.{partition}.{dataset}.{tbl}.{schema}.{first}"
        files[f"{stem}.{last}.done"] = b""
        if with_avro:
            files[f"{stem}.avro"] = orders

    scala(T, 0, "acme_sales.orders", 3, 0, 99, True)
    scala(T, 0, "acme_sales.orders", 4, 0, 99, True)
    scala(T, 0, "acme_sales.orders", 3, 100, 199, False)
    scala(T, 0, "acme_web.page_views", 5, 200, 299, True)
    scala(T, 2, "acme_sales.orders", 3, 0, 9, False)
    scala(T, 2, "acme_sales.orders", 3, 20, 29, False)
    for first in (0, 10, 20):
        scala(T, 3, "acme_sales.orders", 3, first, first + 9, False)
    scala("com.acme", 0, "acme_sales.orders", 3, 0, 9, True)

    # kbqe era: one range, three files, one manifest in every done file.
    rng = OffsetRange(T, 1, 0, 50)
    staged = [
        (AvroFileName(FileKey(T, 1, "acme_sales", "orders", 3, 0)), 2),
        (AvroFileName(FileKey(T, 1, "acme_sales", "orders", 4, 0)), 2),
        (AvroFileName(FileKey(T, 1, "kbqe_dead_letters", "dead_letters", 0, 0)), 4),
    ]
    commit = plan_range_commit(rng, staged, dead_letters=4, created_at=CREATED)
    for done in commit.done_files:
        files[done.name] = commit.content
    files[ORDERS_3_P1] = orders
    files[ORDERS_4_P1] = orders
    files[DEAD_P1] = avro_bytes(DEAD_LETTER_SCHEMA, dead_letter_records())
    files[IN_FLIGHT_P1] = orders
    for name in UNRECOGNIZED:
        files[name] = b"not ours"

    root.mkdir(parents=True, exist_ok=True)
    written_at = time.time() - AGE_SECONDS
    for name, content in files.items():
        path = root / name
        path.write_bytes(content)
        os.utime(path, (written_at, written_at))
    write_state(root, state_with_pending_and_quarantine())
    return Area(root, datetime.now(UTC))


def state_with_pending_and_quarantine() -> LoadState:
    state = LoadState()
    views = PlannedLoadJob(
        "acme_web", "page_views", 5, (VIEWS_P0,), (f"{T}.0.acme_web.page_views.5.200.299.done",)
    )
    state = record_planned(state, views, "kbqe_acme_web_page_views_1", CREATED)
    orders4 = PlannedLoadJob(
        "acme_sales", "orders", 4, (ORDERS_4_P0,), (f"{T}.0.acme_sales.orders.4.0.99.done",)
    )
    state = record_planned(state, orders4, "kbqe_acme_sales_orders_1", CREATED)
    return quarantine_job(
        state,
        "kbqe_acme_sales_orders_1",
        CREATED + timedelta(hours=1),
        "Provided Schema does not match Table",
    )


def write_state(root: Path, state: LoadState) -> None:
    path = root / STATE_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(encode_state(state))
