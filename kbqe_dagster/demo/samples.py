"""Sample events for topic ``com.acme.events`` (see ``examples/pipeline.yaml``).

Two tables (``acme_sales.orders``, ``acme_web.page_views``), a schema evolution (orders v2
adds an optional ``coupon`` field, BACKWARD compatible) and one message of every bad-input
kind, each with the reason the stage job must give it. Deterministic for a seed, so a test
knows exactly which offset must end where.

``kbqe demo`` adds clicks (:func:`click_messages`, ``acme_web.clicks``): the table
``examples/pipeline.yaml`` delivers through the Storage Write API. Flat columns only: the
local emulator loses the rows of RECORD columns appended through that API.
"""

from __future__ import annotations

import io
import json
import random
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone

from fastavro import parse_schema, schemaless_writer

from kbqe_dagster.core.reasons import Reason
from kbqe_dagster.core.record.wire import encode_frame

DEMO_TOPIC = "com.acme.events"

ORDER_V1 = {
    "type": "record",
    "name": "Order",
    "namespace": "com.acme.sales",
    "fields": [
        {"name": "datasetName", "type": "string"},
        {"name": "tableName", "type": "string"},
        {"name": "orderId", "type": "string"},
        {"name": "customerId", "type": "long"},
        {"name": "amountCents", "type": "long"},
        {"name": "currency", "type": "string"},
        {"name": "eventTime", "type": "string"},
    ],
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
    "fields": [
        {"name": "datasetName", "type": "string"},
        {"name": "tableName", "type": "string"},
        {"name": "url", "type": "string"},
        {"name": "sessionId", "type": "string"},
        {"name": "durationMs", "type": "int"},
        {"name": "occurredAt", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
CLICK = {
    "type": "record",
    "name": "Click",
    "namespace": "com.acme.web",
    "fields": [
        {"name": "datasetName", "type": "string"},
        {"name": "tableName", "type": "string"},
        {"name": "sessionId", "type": "string"},
        {"name": "element", "type": "string"},
        {"name": "x", "type": "int"},
        {"name": "y", "type": "int"},
        {"name": "occurredAt", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
CLICK_SUBJECT = f"{DEMO_TOPIC}-com.acme.web.Click"
# A record without any event-time field: its messages are dead-lettered (missing_event_time).
PING = {
    "type": "record",
    "name": "Ping",
    "namespace": "com.acme.web",
    "fields": [
        {"name": "datasetName", "type": "string"},
        {"name": "tableName", "type": "string"},
        {"name": "note", "type": ["null", "string"], "default": None},
    ],
}
# A JSON schema registered beside the Avro ones: a message framed with its id is bad input.
JSON_SCHEMA = json.dumps({"type": "object", "properties": {"x": {"type": "string"}}})

SUBJECTS = {
    "orders_v1": (f"{DEMO_TOPIC}-com.acme.sales.Order", ORDER_V1),
    "orders_v2": (f"{DEMO_TOPIC}-com.acme.sales.Order", ORDER_V2),
    "page_views": (f"{DEMO_TOPIC}-com.acme.web.PageView", PAGE_VIEW),
    "pings": (f"{DEMO_TOPIC}-com.acme.web.Ping", PING),
}


@dataclass(frozen=True)
class SampleMessage:
    key: bytes | None
    value: bytes | None
    expect_table: tuple[str, str] | None  # where it must land, or None for bad input
    expect_reason: str | None  # the dead-letter reason for bad input
    event_date: str | None = None  # ISO date for good messages


Placement = dict[tuple[int, int], "SampleMessage"]  # (partition, offset) → what was produced there


def placed_good(placed: Placement) -> Placement:
    """The placed messages that must land in a table."""
    return {where: m for where, m in placed.items() if m.expect_table is not None}


def placed_bad(placed: Placement) -> Placement:
    """The placed messages that must be dead-lettered."""
    return {where: m for where, m in placed.items() if m.expect_table is None}


def register_schemas(registry_url: str, auth: str | None = None) -> dict[str, int]:
    """Register the demo schemas (idempotent); returns name → schema id, ``json`` included."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    conf = {"url": registry_url}
    if auth:
        conf["basic.auth.user.info"] = auth
    client = SchemaRegistryClient(conf)
    ids = {
        name: client.register_schema(subject, Schema(json.dumps(schema), "AVRO"))
        for name, (subject, schema) in SUBJECTS.items()
    }
    ids["json"] = client.register_schema(f"{DEMO_TOPIC}-json-value", Schema(JSON_SCHEMA, "JSON"))
    return ids


def register_click_schema(registry_url: str, auth: str | None = None) -> int:
    """Register the clicks' schema (idempotent); its id. Apart from :func:`register_schemas`
    so that only ``kbqe demo``, which produces clicks, registers it."""
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    conf = {"url": registry_url, **({"basic.auth.user.info": auth} if auth else {})}
    return SchemaRegistryClient(conf).register_schema(
        CLICK_SUBJECT, Schema(json.dumps(CLICK), "AVRO")
    )


def click_messages(count: int, click_id: int, seed: int = 7) -> list[SampleMessage]:
    """``count`` clicks for ``acme_web.clicks`` (schema id ``click_id``), event times over
    the same 5 days as :func:`sample_messages`."""
    rnd = random.Random(seed)
    base = datetime(2024, 9, 13, 12, 0, tzinfo=UTC)
    out = []
    for _i in range(count):
        moment = base - timedelta(minutes=rnd.randrange(5 * 24 * 60))
        record = {
            "datasetName": "acme_web",
            "tableName": "clicks",
            "sessionId": f"s-{rnd.randrange(5_000)}",
            "element": rnd.choice(["buy", "search", "menu", "logo"]),
            "x": rnd.randrange(1920),
            "y": rnd.randrange(1080),
            "occurredAt": moment,
        }
        out.append(
            SampleMessage(
                None,
                encode_frame(click_id, _encode(CLICK, record)),
                ("acme_web", "clicks"),
                None,
                moment.date().isoformat(),
            )
        )
    return out


def _encode(schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), record)
    return out.getvalue()


def sample_messages(count: int, ids: dict[str, int], seed: int = 7) -> list[SampleMessage]:
    """``count`` good messages (orders v1/v2 and page views mixed) followed by one message of
    every bad-input kind. Event times spread over the last 5 days."""
    rnd = random.Random(seed)
    base = datetime(2024, 9, 13, 12, 0, tzinfo=UTC)
    out: list[SampleMessage] = []
    for i in range(count):
        moment = base - timedelta(minutes=rnd.randrange(5 * 24 * 60))
        kind = rnd.random()
        if kind < 0.5:
            out.append(_page_view(i, moment, ids, rnd))
        else:
            out.append(_order(i, moment, ids, rnd, v2=kind > 0.75))
    out.extend(bad_messages(ids))
    return out


def _order(
    i: int, moment: datetime, ids: dict[str, int], rnd: random.Random, v2: bool
) -> SampleMessage:
    # Written with an explicit offset ("+02:00[Europe/Paris]"): the local date rule applies.
    local = moment.astimezone(timezone(timedelta(hours=2)))
    record = {
        "datasetName": "acme_sales",
        "tableName": "orders",
        "orderId": f"o-{i}",
        "customerId": rnd.randrange(10_000),
        "amountCents": rnd.randrange(100, 100_000),
        "currency": rnd.choice(["EUR", "USD"]),
        "eventTime": local.isoformat(timespec="milliseconds") + "[Europe/Paris]",
    }
    schema, schema_id = (ORDER_V1, ids["orders_v1"])
    if v2:
        record["coupon"] = rnd.choice([None, "WELCOME10"])
        schema, schema_id = (ORDER_V2, ids["orders_v2"])
    value = encode_frame(schema_id, _encode(schema, record))
    return SampleMessage(
        f"c-{record['customerId']}".encode(),
        value,
        ("acme_sales", "orders"),
        None,
        local.date().isoformat(),
    )


def _page_view(i: int, moment: datetime, ids: dict[str, int], rnd: random.Random) -> SampleMessage:
    record = {
        "datasetName": "acme_web",
        "tableName": "page_views",
        "url": f"/p/{rnd.randrange(500)}",
        "sessionId": f"s-{rnd.randrange(5_000)}",
        "durationMs": rnd.randrange(60_000),
        "occurredAt": moment,
    }
    value = encode_frame(ids["page_views"], _encode(PAGE_VIEW, record))
    return SampleMessage(None, value, ("acme_web", "page_views"), None, moment.date().isoformat())


def bad_messages(ids: dict[str, int]) -> list[SampleMessage]:
    """One message per bad-input kind, with the reason it must be dead-lettered with."""
    good = {
        "datasetName": "acme_sales",
        "tableName": "orders",
        "orderId": "bad",
        "customerId": 1,
        "amountCents": 1,
        "currency": "EUR",
        "eventTime": "2024-09-13T14:36:45.123+02:00[Europe/Paris]",
    }
    body = _encode(ORDER_V1, good)
    v1 = ids["orders_v1"]

    def bad(value: bytes | None, reason: Reason) -> SampleMessage:
        return SampleMessage(b"bad", value, None, str(reason))

    return [
        bad(b"\x01" + body, Reason.BAD_MAGIC),
        bad(b"\x00\x00", Reason.TOO_SHORT),
        bad(encode_frame(999_999, body), Reason.UNKNOWN_SCHEMA_ID),
        bad(encode_frame(ids["json"], b'{"x": "y"}'), Reason.NON_AVRO_SCHEMA),
        bad(encode_frame(v1, body + b"\x00trailing"), Reason.BODY_DECODE_ERROR),
        bad(encode_frame(v1, body[: len(body) // 2]), Reason.BODY_DECODE_ERROR),
        bad(None, Reason.TOMBSTONE),
        bad(
            encode_frame(
                ids["pings"],
                _encode(PING, {"datasetName": "acme_web", "tableName": "pings", "note": "no time"}),
            ),
            Reason.MISSING_EVENT_TIME,
        ),
        bad(
            encode_frame(v1, _encode(ORDER_V1, {**good, "eventTime": "not a time"})),
            Reason.INVALID_EVENT_TIME,
        ),
        bad(encode_frame(ids["page_views"], b""), Reason.BODY_DECODE_ERROR),  # empty body
        bad(encode_frame(v1, _encode(ORDER_V1, {**good, "tableName": ""})), Reason.UNROUTABLE),
        bad(
            encode_frame(v1, _encode(ORDER_V1, {**good, "datasetName": "secret_hr"})),
            Reason.DESTINATION_NOT_ALLOWED,
        ),
    ]


def produce(
    bootstrap: str,
    topic: str,
    messages: list[SampleMessage],
    partitions: int,
    client_config: dict | None = None,
    only_partitions: Sequence[int] | None = None,
) -> dict[tuple[int, int], SampleMessage]:
    """Produce ``messages`` round-robin over ``partitions`` (or over ``only_partitions``:
    e.g. one lagging producer's partition) with an idempotent producer, and return what
    landed at each (partition, offset)."""
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "linger.ms": 20,
            **(client_config or {}),
        }
    )
    placed: dict[tuple[int, int], SampleMessage] = {}
    errors: list[str] = []

    def delivered(err, msg, sample=None):
        if err is not None:
            errors.append(str(err))
        else:
            placed[(msg.partition(), msg.offset())] = sample

    for i, sample in enumerate(messages):
        while True:
            try:
                partition = (
                    only_partitions[i % len(only_partitions)] if only_partitions else i % partitions
                )
                producer.produce(
                    topic,
                    value=sample.value,
                    key=sample.key,
                    partition=partition,
                    on_delivery=lambda err, msg, s=sample: delivered(err, msg, s),
                )
                break
            except BufferError:
                producer.poll(0.5)
        producer.poll(0)
    producer.flush(60)
    if errors or len(placed) != len(messages):
        raise RuntimeError(f"produced {len(placed)} of {len(messages)} messages: {errors[:3]}")
    return placed
