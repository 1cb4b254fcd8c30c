"""Schema evolution through the load coordinator, against the fake BigQuery client that
refuses what BigQuery refuses (a file lacking a REQUIRED column's field, a field of another
type, an illegal tables.patch) where the local emulator accepts anything
(``test_emulator_gap_required_mode_not_enforced``): before each load job the table takes its
files' schema (loading/evolution.py), so a deleted required field relaxes its column instead
of failing the job, and a type change is refused before any job, naming table and column."""

from __future__ import annotations

import json
from datetime import date

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster_tests.loading.conftest import TOPIC
from kbqe_dagster_tests.loading.staged import ORDER_V1, Table, stage_range

DAY = date(2024, 9, 13)
COUPON = {"name": "coupon", "type": ["null", "string"], "default": None}
DURATION = {"name": "durationMs", "type": ["null", "int"], "default": None}
BASE = {**ORDER_V1, "fields": [*ORDER_V1["fields"], COUPON]}  # orderId, amountCents required
ADDED = {**BASE, "fields": [*BASE["fields"], DURATION]}
NO_REQUIRED = {**ADDED, "fields": [f for f in ADDED["fields"] if f["name"] != "amountCents"]}
NO_OPTIONAL = {**NO_REQUIRED, "fields": [f for f in NO_REQUIRED["fields"] if f is not COUPON]}
VERSIONS = [Table("acme_sales", "orders", 31 + i, s) for i, s in
            enumerate([BASE, ADDED, NO_REQUIRED, NO_OPTIONAL])]  # fmt: skip


def _modes(bq) -> dict[str, str]:
    return {f.name: f.mode for f in bq.get_table("p.acme_sales.orders").schema}


def test_add_delete_required_delete_optional_loads_every_row_once_and_quarantines_nothing(
    store, bq, make_coordinator
) -> None:
    for i, version in enumerate(VERSIONS):
        stage_range(store, TOPIC, 0, 3 * i, 3 * i + 2, [(version, 3, DAY)])
        report = make_coordinator().run_cycle()
        assert (len(report.completed), report.quarantined, report.retried) == (1, [], [])

    assert make_coordinator().run_cycle().planned == [], "run twice: nothing left to do"
    rows = sorted(bq.rows("acme_sales", "orders"), key=lambda r: r["_kafka_offset"])
    assert [r["_kafka_offset"] for r in rows] == list(range(12)), "every row exactly once"
    assert [(r["amountCents"], r["coupon"], r["durationMs"]) for r in rows] == [
        *[(o * 10, "WELCOME", None) for o in range(3)],  # before the field was added
        *[(o * 10, "WELCOME", o) for o in range(3, 6)],
        *[(None, "WELCOME", o) for o in range(6, 9)],  # the required field deleted
        *[(None, None, o) for o in range(9, 12)],  # the optional field deleted
    ]
    modes = _modes(bq)
    assert (modes["orderId"], modes["amountCents"], modes["coupon"]) == (
        "REQUIRED",
        "NULLABLE",
        "NULLABLE",
    )
    assert [
        [c["mode"] for c in update if c["name"] == "amountCents"] for update in bq.schema_updates
    ] == [["REQUIRED"], ["NULLABLE"]], (  # fmt: skip
        "one update added durationMs, one relaxed amountCents; none for the optional field"
    )


def test_a_changed_type_is_refused_before_any_job_naming_table_column_and_what_to_do(
    store, bq, make_coordinator
) -> None:
    stage_range(store, TOPIC, 0, 0, 2, [(VERSIONS[0], 3, DAY)])
    make_coordinator().run_cycle()
    inserts = list(bq.inserts)
    as_double = {
        **BASE,
        "fields": [
            {**f, "type": "double"} if f["name"] == "amountCents" else f for f in BASE["fields"]
        ],
    }
    stage_range(store, TOPIC, 0, 3, 5, [(Table("acme_sales", "orders", 40, as_double), 3, DAY)])

    report = make_coordinator().run_cycle()

    assert bq.inserts == inserts, "no load job for a schema the table cannot take"
    [quarantined] = report.quarantined
    note = json.loads(store.read_bytes(quarantined.note))
    assert note["error"].startswith(
        "table acme_sales.orders: column amountCents is INTEGER and a newer schema makes it "
        "FLOAT; BigQuery never changes a column's type. Route that schema to a new table"
    )
    assert _modes(bq)["amountCents"] == "REQUIRED" and len(bq.rows("acme_sales", "orders")) == 3


def test_a_table_configured_all_columns_nullable_is_created_with_only_nullable_columns(
    store, bq, make_coordinator
) -> None:
    config = parse_pipeline_config(
        {
            "version": 1,
            "topics": [{"name": TOPIC, "event_time": {"fields": ["eventTime"]}}],
            "allowed_destinations": ["acme_sales.*"],
            "tables": {"acme_sales.*": {"all_columns_nullable": True}},
        }
    )
    stage_range(store, TOPIC, 0, 0, 2, [(VERSIONS[0], 3, DAY)])
    make_coordinator(config).run_cycle()
    stage_range(store, TOPIC, 0, 3, 5, [(VERSIONS[2], 3, DAY)])  # amountCents deleted

    report = make_coordinator(config).run_cycle()

    assert len(report.completed) == 1 and set(_modes(bq).values()) == {"NULLABLE"}
    assert [c["name"] for u in bq.schema_updates for c in u] == [
        *[f.name for f in bq.get_table("p.acme_sales.orders").schema]
    ], "one update: durationMs added, nothing to relax"
