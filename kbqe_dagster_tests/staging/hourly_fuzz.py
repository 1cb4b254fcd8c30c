"""Seeded random stage scenarios with HOUR-partitioned tables, for the native kernel's
differential fuzz (docs/architecture.md, "Hourly tables").

Two sources of scenarios:

- :func:`with_hour_tables` turns any format's fuzz scenario into one whose pipeline also has a
  random ``tables:`` map: a whole dataset HOUR, one table HOUR, a dataset HOUR but for one DAY
  table, ... so one topic's records go to DAY and HOUR tables alike. The scenario's own draws
  are unchanged (its messages are those of the DAY fuzz of the same seed).
- :func:`hour_edge_scenario`: Avro records whose event times sit on and around hour and day
  boundaries, in every value kind the event time reads (ISO strings with offsets west and
  east of UTC, fractions and zone annotations; epochs of every unit as integers and floats;
  ``timestamp-millis``/``-micros``, ``date``), null or missing event times, and Kafka
  timestamps on the same boundaries for the fallback.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import date, timedelta
from typing import Any

import pytest

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.record.partitioning import Partitioning, TablesConfig, TableSettings
from kbqe_dagster.staging import native_kernel
from kbqe_dagster_tests.staging.avro_fuzz import encode, parse
from kbqe_dagster_tests.staging.kernel_equality import Msg
from kbqe_dagster_tests.staging.kernel_fuzz import random_pipeline

TOPIC = "fuzz.events"
needs_hour_kernel = pytest.mark.skipif(
    not hasattr(getattr(native_kernel.extension(), "StageKernel", None), "hourly_slot"),
    reason="the native stage kernel predates HOUR tables (make install rebuilds it)",
)
"""A fuzz with HOUR tables needs a kernel that stages them (``hourly_slot``)."""
HOUR, DAY = TableSettings(Partitioning.HOUR), TableSettings(Partitioning.DAY)
# Keys the fuzz pipelines' allow-list (kernel_fuzz.random_pipeline) makes writable.
TABLE_MAPS: list[dict[str, TableSettings]] = [
    {"acme_sales.*": HOUR},
    {"acme_sales.orders": HOUR},
    {"acme_sales.*": HOUR, "acme_sales.orders": DAY},
    {"acme_web.orders": HOUR},
    {"acme_sales.refunds": HOUR, "acme_web.orders": HOUR},
    {"fuzz.*": HOUR},
]


def hour_tables(rng: random.Random) -> TablesConfig:
    return TablesConfig(rng.choice(TABLE_MAPS))


def with_hour_tables(scenario: Callable[[int, int], Any]) -> Callable[[int, int], Any]:
    """``scenario`` with a random ``tables:`` map of HOUR (and DAY) tables in its pipeline,
    drawn from its own generator so the scenario's draws stay those of its DAY fuzz."""

    def hourly(seed: int, messages: int) -> Any:
        case = scenario(seed, messages)
        case.pipeline = replace(case.pipeline, tables=hour_tables(random.Random(~seed)))
        return case

    return hourly


# --- event times on the edges of hours and days ----------------------------------------------
EVENT_TYPES: list[Any] = [
    "string", "string", ["null", "string"], "long", ["null", "long"], "int", "double", "float",
    {"type": "long", "logicalType": "timestamp-millis"},
    {"type": "long", "logicalType": "timestamp-micros"},
    ["null", {"type": "long", "logicalType": "timestamp-millis"}],
    {"type": "int", "logicalType": "date"},
]  # fmt: skip
UNIT_SECONDS = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}
# Offsets as written, and their seconds east of UTC (None: naive).
OFFSETS: list[tuple[str, int | None]] = [
    ("Z", 0), ("+00:00", 0), ("-00:00", 0), ("+01:00", 3600), ("-05:30", -19800),
    ("+05:45", 20700), ("-00:30", -1800), ("+14:00", 50400), ("-12:00", -43200),
    ("+02:00:30", 7230), ("+0530", 19800), ("-03", -10800), ("", None), ("", None),
]  # fmt: skip
ANNOTATIONS = ["", "", "", "[Europe/Paris]", "[u-ca=iso8601]", "[America/St_Johns]"]


def edge_second(rng: random.Random) -> int:
    """An instant (seconds since 1970, UTC) on or next to an hour or a day boundary."""
    hour = rng.choice(
        [
            rng.randint(-500_000, 600_000),  # 1913..2038
            rng.randint(-24, 24),  # around 1970-01-01T00
            493_000 + rng.randint(-48, 48),  # 2026
            # 0001-01-01T00 and 9999-12-31T23 UTC, the first and last hours, and ~9955
            rng.choice([-17_259_888, 70_389_527, 70_000_000]),
        ]
    )
    day_edge = rng.random() < 0.4
    if day_edge:
        hour -= hour % 24
    return hour * 3600 + rng.choice([0, 0, -1, 1, 59, -60, 1800, -1800, 3599])


def edge_iso(rng: random.Random, instant: int) -> str:
    """``instant`` written in a random offset (or naive), with a fraction and annotations."""
    written, offset = rng.choice(OFFSETS)
    local = instant + (offset or 0)
    days, second = divmod(local, 86_400)
    try:
        day = date(1970, 1, 1) + timedelta(days=days)
    except OverflowError:
        return "0001-01-01T00:00:00Z"
    text = day.isoformat()
    if rng.random() < 0.1:
        return text + rng.choice(ANNOTATIONS)  # a date alone: 00:00, naive
    text += rng.choice("TT ")
    text += f"{second // 3600:02d}:{second % 3600 // 60:02d}"
    if rng.random() < 0.9:
        text += f":{second % 60:02d}"
        if rng.random() < 0.5:
            text += rng.choice(".,") + "".join(
                rng.choice("09") for _ in range(rng.choice([1, 3, 6, 9]))
            )
    return text + written + rng.choice(ANNOTATIONS)


def edge_value(rng: random.Random, t: Any, unit: str) -> Any:
    """An event-time value of Avro type ``t`` near a boundary (epochs in ``unit``)."""
    if isinstance(t, list):
        if rng.random() < 0.2:
            return None
        t = t[1]
    instant = edge_second(rng)
    kind = t if isinstance(t, str) else t["logicalType"]
    if kind == "string":
        return edge_iso(rng, instant)
    scale = UNIT_SECONDS["s" if unit == "auto" else unit]
    if kind in ("long", "int"):
        value = instant * scale + rng.choice([0, 0, -1, 1])
        bits = 31 if kind == "int" else 63
        return max(-(2**bits), min(2**bits - 1, value))
    if kind in ("double", "float"):
        return instant * scale + rng.choice([0.0, -1e-6, 1e-6, 0.5, -0.5, -1e-3])
    if kind == "timestamp-millis":
        return instant * 1000 + rng.choice([0, -1, 1, 999])
    if kind == "timestamp-micros":
        return instant * 1_000_000 + rng.choice([0, -1, 1, 999_999])
    return instant // 86_400  # date


@dataclass
class Scenario:
    pipeline: PipelineConfig
    schemas: dict[int, dict]
    messages: list[Msg]
    adversarial: bool = False


def hour_edge_scenario(seed: int, messages: int) -> Scenario:
    rng = random.Random(seed)
    schemas: dict[int, dict] = {}
    for version in range(rng.randint(1, 2)):
        fields = [
            {"name": "datasetName", "type": "string"},
            {"name": "tableName", "type": "string"},
            {"name": "eventTime", "type": rng.choice(EVENT_TYPES)},
            {"name": "amount", "type": "double"},
        ]
        rng.shuffle(fields)
        schemas[7 + version] = {"type": "record", "name": f"Edge{version}", "namespace": "fuzz",
                                "fields": fields}  # fmt: skip
    routing = rng.choice(["fields", "fields", "static", "schema_name"])
    event_fields = rng.choice([["eventTime"], ["missing", "eventTime"]])
    topic: dict[str, Any] = {"name": TOPIC}
    pipeline = random_pipeline(rng, topic, event_fields, routing, size_chance=0.0,
                               source=f"hour edge fuzz seed {seed}")  # fmt: skip
    pipeline = replace(pipeline, tables=hour_tables(rng))
    unit = topic["event_time"]["epoch_unit"]
    parsed = {sid: parse(schema) for sid, schema in schemas.items()}
    out = []
    start = rng.choice([0, 1_000_000])
    for i in range(messages):
        sid = rng.choice(list(schemas))
        record = {
            "datasetName": rng.choice(["acme_sales"] * 4 + ["acme_web", "fuzz", "other"]),
            "tableName": rng.choice(["orders", "orders", "refunds", "page_views"]),
            "amount": rng.random(),
        }
        event_type = next(f["type"] for f in schemas[sid]["fields"] if f["name"] == "eventTime")
        record["eventTime"] = edge_value(rng, event_type, unit)
        value = b"\x00" + sid.to_bytes(4, "big") + encode(parsed[sid][0], record)
        ts = edge_second(rng) * 1000 + rng.choice([0, -1, 1, 999])
        timestamp = rng.choice([(1, ts), (1, ts), (2, ts), (0, -1), (1, -5)])
        key = rng.choice([None, b"k%d" % i])
        headers = rng.choice([None, [("h", b"v")]])
        out.append(Msg(TOPIC, 0, start + i, value, key, headers, timestamp))
    return Scenario(pipeline, schemas, out)
