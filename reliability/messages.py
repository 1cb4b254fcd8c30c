"""What the suite produces, and the ledger of where every produced offset must end up.

Messages are drawn from a seeded ``random.Random``: orders (schema v1 and v2, which adds a
field, mixed in one table as real pipelines do) and page views, routed by their
``datasetName``/``tableName`` fields into this run's own datasets, plus bad input of every
kind the stage job dead-letters, each with the reason it must carry. The ledger maps each
``(partition, offset)`` Kafka assigned to what must be found there at the end: one row in one
table on one event date, or one dead letter with one reason.
"""

from __future__ import annotations

import io
import random
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta

from fastavro import parse_schema, schemaless_writer

from kbqe_dagster.core.reasons import Reason
from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.demo.samples import (
    ORDER_V1,
    ORDER_V2,
    PAGE_VIEW,
    PING,
    SampleMessage,
    placed_bad,
    placed_good,
)

# The schema ids the registry answers for kbqe_dagster.demo.samples.register_schemas.
SchemaIds = dict[str, int]
UNKNOWN_SCHEMA_ID = 999_999


@dataclass(frozen=True)
class Datasets:
    """This run's destination datasets (nothing else is in the allow-list)."""

    sales: str
    web: str
    dead: str

    @property
    def orders(self) -> tuple[str, str]:
        return (self.sales, "orders")

    @property
    def page_views(self) -> tuple[str, str]:
        return (self.web, "page_views")

    @property
    def orders_live(self) -> tuple[str, str]:
        """The ``delivery: storage_write`` table: orders appended through the Storage Write
        API (flat columns: the emulator loses rows of RECORD columns on that path)."""
        return (self.sales, "orders_live")


@dataclass
class Ledger:
    """``(partition, offset)`` → the message produced there (``expect_table`` None: bad
    input, dead-lettered with ``expect_reason``)."""

    placed: dict[tuple[int, int], SampleMessage] = field(default_factory=dict)
    step_of: dict[tuple[int, int], str] = field(default_factory=dict)
    """The suite step that produced each position, so an error points at its fault."""

    def add(self, placed: dict[tuple[int, int], SampleMessage], step: str) -> None:
        overlap = set(placed) & set(self.placed)
        if overlap:
            raise AssertionError(f"Kafka reused positions {sorted(overlap)[:3]}")
        self.placed.update(placed)
        self.step_of.update(dict.fromkeys(placed, step))

    @property
    def good(self) -> dict[tuple[int, int], SampleMessage]:
        return placed_good(self.placed)

    @property
    def bad(self) -> dict[tuple[int, int], SampleMessage]:
        return placed_bad(self.placed)

    def __len__(self) -> int:
        return len(self.placed)


def _body(schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), record)
    return out.getvalue()


def _order(
    rnd: random.Random, ids: SchemaIds, ds: Datasets, i: int, day: date, table: str = "orders"
) -> SampleMessage:
    record = {
        "datasetName": ds.sales,
        "tableName": table,
        "orderId": f"o-{i}",
        "customerId": rnd.randrange(10_000),
        "amountCents": rnd.randrange(100, 100_000),
        "currency": rnd.choice(["EUR", "USD"]),
        # Local time with an offset and a zone id: the event date is the local date.
        "eventTime": f"{day.isoformat()}T{rnd.randrange(24):02d}:{rnd.randrange(60):02d}"
        f":00.000+02:00[Europe/Paris]",
    }
    key = f"c-{record['customerId']}".encode()
    if rnd.random() < 0.5:
        return SampleMessage(
            key,
            encode_frame(ids["orders_v1"], _body(ORDER_V1, record)),
            (ds.sales, table),
            None,
            day.isoformat(),
        )
    # Same table: files of v1 arriving after a v2 load widened it load by name (NULL coupon);
    # appended, a range's v1 and v2 rows are two requests (a crash point between them).
    record = {**record, "coupon": f"c{i}"}
    return SampleMessage(
        key,
        encode_frame(ids["orders_v2"], _body(ORDER_V2, record)),
        (ds.sales, table),
        None,
        day.isoformat(),
    )


def _page_view(
    rnd: random.Random, ids: SchemaIds, ds: Datasets, i: int, day: date
) -> SampleMessage:
    moment = datetime.combine(day, time(rnd.randrange(24), rnd.randrange(60)), tzinfo=UTC)
    record = {
        "datasetName": ds.web,
        "tableName": "page_views",
        "url": f"/p/{i}",
        "sessionId": f"s-{rnd.randrange(5_000)}",
        "durationMs": rnd.randrange(60_000),
        "occurredAt": moment,
    }
    value = encode_frame(ids["page_views"], _body(PAGE_VIEW, record))
    return SampleMessage(None, value, ds.page_views, None, day.isoformat())


def bad_message(rnd: random.Random, ids: SchemaIds, ds: Datasets) -> SampleMessage:
    """One bad message of a randomly chosen kind, with the reason it must be dead-lettered
    with (routing fields name this run's datasets, so the first check that fails is the
    one the kind is about)."""
    order = {
        "datasetName": ds.sales,
        "tableName": "orders",
        "orderId": "bad",
        "customerId": 1,
        "amountCents": 1,
        "currency": "EUR",
        "eventTime": "2024-09-13T14:36:45.123+02:00[Europe/Paris]",
    }
    body = _body(ORDER_V1, order)
    v1 = ids["orders_v1"]
    kinds = [
        (lambda: b"\x01" + body, Reason.BAD_MAGIC),
        (lambda: b"\x00\x00", Reason.TOO_SHORT),
        (lambda: encode_frame(UNKNOWN_SCHEMA_ID, body), Reason.UNKNOWN_SCHEMA_ID),
        (lambda: encode_frame(ids["json"], b'{"x": "y"}'), Reason.NON_AVRO_SCHEMA),
        (lambda: encode_frame(v1, body + b"\x00trailing"), Reason.BODY_DECODE_ERROR),
        (lambda: encode_frame(v1, body[: len(body) // 2]), Reason.BODY_DECODE_ERROR),
        (lambda: None, Reason.TOMBSTONE),
        (
            lambda: encode_frame(
                ids["pings"],
                _body(PING, {"datasetName": ds.web, "tableName": "pings", "note": "no time"}),
            ),
            Reason.MISSING_EVENT_TIME,
        ),
        (
            lambda: encode_frame(v1, _body(ORDER_V1, {**order, "eventTime": "not a time"})),
            Reason.INVALID_EVENT_TIME,
        ),
        (lambda: encode_frame(v1, _body(ORDER_V1, {**order, "tableName": ""})), Reason.UNROUTABLE),
        (
            lambda: encode_frame(v1, _body(ORDER_V1, {**order, "datasetName": "secret_hr"})),
            Reason.DESTINATION_NOT_ALLOWED,
        ),
    ]
    make, reason = rnd.choice(kinds)
    return SampleMessage(b"bad", make(), None, str(reason))


def batch(
    rnd: random.Random,
    ids: SchemaIds,
    ds: Datasets,
    count: int,
    today: date,
    bad_ratio: float = 0.03,
    orders_table: str = "orders",
) -> list[SampleMessage]:
    """``count`` messages: good ones over the last five event days, and bad ones (about
    ``bad_ratio`` of them, at least one) mixed in at random positions; orders go to
    ``orders_table`` of the sales dataset."""
    out: list[SampleMessage] = []
    for _i in range(count):
        if rnd.random() < bad_ratio:
            out.append(bad_message(rnd, ids, ds))
            continue
        day = today - timedelta(days=rnd.randrange(5))
        if rnd.random() < 0.5:
            out.append(_order(rnd, ids, ds, rnd.randrange(10**9), day, orders_table))
        else:
            out.append(_page_view(rnd, ids, ds, rnd.randrange(10**9), day))
    if all(m.expect_table is not None for m in out):
        out[rnd.randrange(len(out))] = bad_message(rnd, ids, ds)
    return out
