"""The table contract of ``delivery: storage_write`` is the batch path's, end to end on the
local stack (``kbqe run --until-idle`` against Kafka, the registry, fake GCS and the BigQuery
emulator with its Storage Write API):

- switching a table between ``load`` and ``storage_write`` happens at a range boundary, both
  ways, also mid-flight: files staged but not loaded yet when it switches to storage_write, a
  range half appended (an open intent) when it switches to load, and back to storage_write
  afterwards; every offset in the table exactly once;
- completeness reads the delivered position (a delivered range counts at its done file);
  ``no_duplicate_offsets`` queries a storage_write table like a loaded one;
- schema evolution: a newer schema's field is a new column before rows carrying it are
  appended (flat columns: the emulator loses appended rows of RECORD columns, see
  docs/architecture.md "BigQuery emulator");
- one topic feeding an HOUR-partitioned ``load`` table and an HOUR-partitioned
  ``storage_write`` table through the same transforms gives both the same columns and rows.

Each test has its own topic, staging prefix, datasets and Dagster instance.
"""

from __future__ import annotations

import json
import subprocess
from datetime import UTC, datetime, timedelta

import pytest

from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.demo.samples import ORDER_V1, ORDER_V2, SampleMessage, produce
from kbqe_dagster.resources.bigquery.google_client import GoogleBigQueryLoads
from kbqe_dagster_tests.kbqe_run import KBQE
from kbqe_dagster_tests.support.framing import avro_body
from kbqe_dagster_tests.support.storage_write_rig import NOW, PARTITIONS, Rig

pytestmark = [pytest.mark.integration, pytest.mark.slow]

OFFSET_COLUMNS = ("_kafka_topic", "_kafka_partition", "_kafka_offset")


@pytest.fixture
def rig(local_stack, local_endpoints, tmp_path):
    rig = Rig(local_endpoints, tmp_path)
    yield rig
    rig.remove()


# --- switching ---------------------------------------------------------------------------------
def test_switching_mid_flight_both_ways_loses_and_doubles_nothing(rig) -> None:
    rig.set_delivery("load")
    rig.produce(views=4, orders=8)
    staged_only = rig.kbqe_run(crash_at="load_before_submit:1")
    assert staged_only.returncode != 0, "killed before the first load job"
    pending = [n for n in rig.staging_names() if ".orders." in n and n.endswith(".avro")]
    assert pending, "orders staged as avro files, not loaded yet"

    # load -> storage_write while those files wait: they are loaded, the next ranges appended.
    rig.set_delivery("storage_write")
    rig.produce(views=3, orders=10)
    rig.until_idle()
    rig.assert_exactly_once()
    assert not [n for n in rig.staging_names() if n.endswith(".avro") and ".orders." in n]

    # storage_write -> load while a range is half appended (killed after its first request).
    rig.produce(views=2, orders=12)
    killed = rig.kbqe_run(crash_at="storage_write_appended:1")
    assert killed.returncode != 0, "the crash point was reached"
    names = rig.staging_names()
    assert [
        n for n in names if n.endswith(".intent") and n.replace(".intent", ".done") not in names
    ], "an open intent"
    rig.set_delivery("load")
    rig.until_idle()
    rig.assert_exactly_once()
    rig.produce(views=2, orders=6)
    rig.until_idle()
    rig.until_idle()
    rig.assert_exactly_once()

    # ... and back to storage_write: a new range continues no stale stream position.
    rig.set_delivery("storage_write")
    rig.produce(views=2, orders=9)
    rig.until_idle()
    rig.until_idle()
    rig.assert_exactly_once()
    assert not [
        n
        for n in rig.staging_names()
        if n.endswith(".intent") and n.replace(".intent", ".done") not in rig.staging_names()
    ]


# --- completeness and no_duplicate_offsets -------------------------------------------------------
def _completeness(rig: Rig) -> dict:
    done = subprocess.run(
        [KBQE, "completeness", "--json", "--table", f"{rig.sales}.orders"],
        env=rig.env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)["tables"][f"{rig.sales}.orders"]


def test_completeness_and_the_duplicate_check_read_a_storage_write_table(rig) -> None:
    rig.produce(views=0, orders=10)
    rig.until_idle()
    first = _completeness(rig)
    assert first["held_back_by"] == [] and first["partitions"] == PARTITIONS
    # Caught up now: complete up to now minus the default lateness (5 minutes).
    today = (datetime.now(UTC) - timedelta(minutes=5)).date()
    assert first["newest_complete"] == (today - timedelta(days=1)).isoformat()
    # Produced, not delivered yet: every partition with new messages holds the next day back
    # at its delivered position (the done files' ends), waiting for a stage.
    rig.produce(views=0, orders=6)
    behind = _completeness(rig)["held_back_by"]
    delivered = {p: o + 1 for p, o in _max_offsets(rig)}
    assert behind and all(
        h["loaded_offset"] == delivered[h["partition"]] and h["waiting_for"] == "stage"
        for h in behind
    )
    rig.until_idle()
    assert _completeness(rig)["held_back_by"] == []

    loads = GoogleBigQueryLoads(rig.client)
    since = NOW.date() - timedelta(days=7)
    clean = loads.duplicate_offsets(rig.sales, "orders", OFFSET_COLUMNS, "_event_date", since)
    assert clean.duplicates == ()
    rig.client.query_and_wait(  # one row twice, as a second delivery of it would leave it
        f"INSERT INTO `{rig.sales}.orders` SELECT * FROM `{rig.sales}.orders` "
        "WHERE _kafka_partition = 0 AND _kafka_offset = 0"
    )
    found = loads.duplicate_offsets(rig.sales, "orders", OFFSET_COLUMNS, "_event_date", since)
    assert found.duplicates == ((rig.topic, 0, 0, 2),)


def _max_offsets(rig: Rig) -> list[tuple[int, int]]:
    return [
        (r["p"], r["o"])
        for r in rig.client.query_and_wait(
            f"SELECT _kafka_partition AS p, MAX(_kafka_offset) AS o FROM `{rig.sales}.orders` "
            "GROUP BY p"
        )
    ]


# --- schema evolution ------------------------------------------------------------------------
def _orders(rig: Rig, schema: dict, schema_id: int, count: int, coupon: bool) -> None:
    out = []
    for i in range(count):
        n = rig.produced["orders"] + i
        moment = NOW - timedelta(minutes=n)
        fields = {
            "datasetName": rig.sales,
            "tableName": "orders",
            "orderId": f"o-{n}",
            "customerId": n,
            "amountCents": 100 + n,
            "currency": "EUR",
            "eventTime": moment.isoformat(timespec="milliseconds"),
        }
        if coupon:
            fields["coupon"] = f"c-{n}"
        out.append(
            SampleMessage(
                None,
                encode_frame(schema_id, avro_body(schema, fields)),
                (rig.sales, "orders"),
                None,
                moment.date().isoformat(),
            )
        )
    produce(rig.endpoints.kafka_bootstrap, rig.topic, out, PARTITIONS)
    rig.produced["orders"] += count


def test_a_newer_schema_s_field_is_a_column_before_its_rows_are_appended(rig) -> None:
    _orders(rig, ORDER_V1, rig.ids["orders_v1"], 8, coupon=False)
    rig.until_idle()
    columns = [f.name for f in rig.client.get_table(f"{rig.sales}.orders").schema]
    assert "coupon" not in columns
    _orders(rig, ORDER_V2, rig.ids["orders_v2"], 8, coupon=True)
    rig.until_idle()
    _orders(rig, ORDER_V1, rig.ids["orders_v1"], 4, coupon=False)  # an older writer after it
    rig.until_idle()
    assert rig.counts(rig.sales, "orders") == (20, 20)
    columns = [f.name for f in rig.client.get_table(f"{rig.sales}.orders").schema]
    assert "coupon" in columns
    coupons = {
        r["id"]: r["coupon"]
        for r in rig.client.query_and_wait(
            f"SELECT orderId AS id, coupon FROM `{rig.sales}.orders`"
        )
    }
    assert coupons == {f"o-{n}": (f"c-{n}" if 8 <= n < 16 else None) for n in range(20)}


# --- HOUR partitioning and transforms: a load table and a storage_write table compared --------
class TwinRig(Rig):
    """One topic, two destinations taking every order through the same transforms: an HOUR
    table loaded and an HOUR table appended."""

    def pipeline(self, orders: str) -> dict:
        return {
            "version": 1,
            "topics": [
                {
                    "name": self.topic,
                    "event_time": {"fields": ["eventTime"]},
                    "transforms": [
                        {"add": "source", "value": "kbqe"},
                        {"rename": "customerId", "to": "customer"},
                        {"cast": "amountCents", "to": "string"},
                    ],
                    "destinations": [
                        {
                            "routing": {
                                "mode": "static",
                                "dataset": self.sales,
                                "table": "orders_loaded",
                            }
                        },
                        {
                            "routing": {
                                "mode": "static",
                                "dataset": self.sales,
                                "table": "orders_appended",
                            }
                        },
                    ],
                }
            ],
            "allowed_destinations": [
                f"{self.sales}.orders_loaded",
                f"{self.sales}.orders_appended",
            ],
            "tables": {
                f"{self.sales}.orders_loaded": {"partitioning": "hour"},
                f"{self.sales}.orders_appended": {"partitioning": "hour", "delivery": orders},
            },
            "dead_letter": {"dataset": self.dead, "table": "dead_letters"},
        }


@pytest.fixture
def twins(local_stack, local_endpoints, tmp_path):
    rig = TwinRig(local_endpoints, tmp_path)
    yield rig
    rig.remove()


def _rows(rig: Rig, table: str) -> list[dict]:
    return [
        dict(r.items())
        for r in rig.client.query_and_wait(
            f"SELECT * FROM `{rig.sales}.{table}` ORDER BY _kafka_partition, _kafka_offset"
        )
    ]


def test_an_hour_table_appended_equals_the_same_rows_loaded(twins) -> None:
    _orders(twins, ORDER_V1, twins.ids["orders_v1"], 90, coupon=False)  # 90 minutes: 2+ hours
    twins.until_idle()
    twins.until_idle()
    names = twins.staging_names()
    assert [n for n in names if ".orders_appended." in n and n.endswith(".done")]
    assert not [n for n in names if ".orders_appended." in n and n.endswith(".avro")]
    loaded, appended = _rows(twins, "orders_loaded"), _rows(twins, "orders_appended")
    assert len(loaded) == 90
    assert appended == loaded  # every column, the enrichment's included
    assert {r["source"] for r in appended} == {"kbqe"}
    assert all(isinstance(r["amountCents"], str) and "customer" in r for r in appended)
    hours = {r["_event_hour"] for r in appended}
    assert len(hours) >= 2 and all(h.minute == 0 and h.second == 0 for h in hours)

    def columns(table: str) -> list[tuple[str, str, str]]:
        return [
            (f.name, f.field_type, f.mode)
            for f in twins.client.get_table(f"{twins.sales}.{table}").schema
        ]

    assert columns("orders_appended") == columns("orders_loaded")
