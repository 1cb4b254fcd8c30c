"""MONTH, YEAR and unpartitioned tables and a ``partition_column``: the setting and what
``kbqe config check`` refuses, the layout kbqe creates, the refusal of a table partitioned
otherwise, and the arithmetic of month and year partitions (keys, ends, completeness)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from typing import Any

import pytest

from kbqe_dagster.core.completeness.decision import (
    PartitionProgress,
    Unit,
    table_completeness,
    unit_of,
)
from kbqe_dagster.core.completeness.state import late_records
from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.record.partition_spec import (
    PartitionSpec,
    partition_column_problem,
    partitioning_refusal,
)
from kbqe_dagster.core.record.partitioning import Partitioning

MONTH, YEAR = Unit(Partitioning.MONTH), Unit(Partitioning.YEAR)
ORDER_SCHEMA = {
    "type": "record",
    "name": "Order",
    "fields": [
        {"name": "orderId", "type": "string"},
        {"name": "placedAt", "type": {"type": "long", "logicalType": "timestamp-millis"}},
        {"name": "shipDate", "type": ["null", {"type": "int", "logicalType": "date"}]},
        {"name": "amount", "type": "double"},
    ],
}


def _raw(tables: dict[str, Any], *, keyed: bool = False) -> dict[str, Any]:
    topics: list[dict[str, Any]] = [
        {"name": "clicks", "event_time": {"fields": ["ts"]}},
        {
            "name": "orders",
            "format": "json",
            "schema": ORDER_SCHEMA,
            "routing": {"mode": "static", "dataset": "acme_sales", "table": "orders"},
            "event_time": {"fields": ["placedAt"]},
        },
    ]
    if keyed:
        topics.append(
            {
                "name": "customers",
                "format": "debezium",
                "keyed": {},
                "routing": {"mode": "static", "dataset": "shop", "table": "customers"},
                "event_time": {"kafka_timestamp_fallback": True},
            }
        )
    return {
        "version": 1,
        "topics": topics,
        "allowed_destinations": ["acme_web.*", "shop.*"],
        "tables": tables,
    }


def _problems(raw: dict[str, Any]) -> str:
    with pytest.raises(ConfigError) as raised:
        parse_pipeline_config(raw, source="test.yaml")
    return str(raised.value)


# --- the setting and its layout ----------------------------------------------------------------
@pytest.mark.parametrize(
    "settings, partitioning, column, spec",
    [
        ({"partitioning": "month"}, "month", "_event_date", PartitionSpec("MONTH", "_event_date")),
        ({"partitioning": "year"}, "year", "_event_date", PartitionSpec("YEAR", "_event_date")),
        ({"partitioning": "none"}, "none", "_event_date", PartitionSpec(None)),
        ({"partition_column": "placedAt"}, "day", "placedAt", PartitionSpec("DAY", "placedAt")),
        (
            {"partitioning": "hour", "partition_column": "placedAt"},
            "hour",
            "placedAt",
            PartitionSpec("HOUR", "placedAt"),
        ),
        (
            {"partitioning": "month", "partition_column": "shipDate"},
            "month",
            "shipDate",
            PartitionSpec("MONTH", "shipDate"),
        ),
    ],
)  # fmt: skip
def test_a_table_is_partitioned_by_its_unit_on_its_column(
    settings: dict[str, Any], partitioning: str, column: str, spec: PartitionSpec
) -> None:
    config = parse_pipeline_config(_raw({"acme_sales.orders": settings}), source="test.yaml")

    layout = config.table_layout("acme_sales", "orders")

    assert (str(layout.partitioning), layout.partition_column) == (partitioning, column)
    assert layout.partition_spec == spec
    # The Dagster partitions and the checks still go by the event date (hour).
    event = "_event_hour" if partitioning == "hour" else "_event_date"
    assert layout.time_column == event
    assert layout.user_partition_column is (column != event)


def test_a_dataset_wildcard_sets_the_unit_of_its_tables_and_an_exact_key_wins() -> None:
    raw = _raw({"acme_web.*": {"partitioning": "year"}, "acme_web.views": {"partitioning": "none"}})
    config = parse_pipeline_config(raw, source="test.yaml")

    assert config.partitioning("acme_web", "clicks") is Partitioning.YEAR
    assert config.partitioning("acme_web", "views") is Partitioning.NONE
    assert config.partitioning("acme_sales", "orders") is Partitioning.DAY


@pytest.mark.parametrize(
    "tables, expected",
    [
        ({"acme_web.clicks": {"partitioning": "none", "partition_column": "ts"}},
         "tables.acme_web.clicks.partition_column: 'ts' with partitioning none: an "
         "unpartitioned table has no partition column"),
        ({"acme_web.clicks": {"partitioning": "none", "partition_expiration_days": 30}},
         "tables.acme_web.clicks.partition_expiration_days: partitioning none: an unpartitioned "
         "table has no partitions to expire"),
        ({"acme_web.clicks": {"partitioning": "none", "require_partition_filter": True}},
         "tables.acme_web.clicks.require_partition_filter: not with partitioning none"),
        ({"acme_web.clicks": {"partition_column": "ts", "require_partition_filter": True}},
         "tables.acme_web.clicks.require_partition_filter: not with partitioning none (no "
         "partition to filter on) nor, yet, with a partition_column"),
        ({"acme_sales.orders": {"partition_column": "orderId"}},
         "tables.acme_sales.orders.partition_column: acme_sales.orders: partition column "
         "'orderId' is STRING; BigQuery partitions only on DATE, DATETIME, TIMESTAMP"),
        ({"acme_sales.orders": {"partitioning": "month", "partition_column": "placed_at"}},
         "tables.acme_sales.orders.partition_column: acme_sales.orders: partition column "
         "'placed_at' is not a column (columns: _event_date, "),
        ({"acme_sales.orders": {"partitioning": "hour", "partition_column": "shipDate"}},
         "acme_sales.orders: partition column 'shipDate' is DATE; BigQuery partitions by HOUR "
         "only on DATETIME, TIMESTAMP"),
        ({"acme_web.*": {"partition_column": "_kafka_offset"}},
         "tables.acme_web.*.partition_column: acme_web.*: partition column '_kafka_offset' is "
         "INTEGER"),
        ({"acme_web.clicks": {"partition_column": "ts-1"}},
         "tables.acme_web.clicks.partition_column: column 'ts-1' is not a top-level column name"),
        ({"kbqe_dead_letters.dead_letters": {"partitioning": "month"}},
         "tables.kbqe_dead_letters.dead_letters.partitioning: the dead-letter table is "
         "DAY-partitioned on its staging date"),
        ({"kbqe_dead_letters.dead_letters": {"partition_column": "staged_at"}},
         "tables.kbqe_dead_letters.dead_letters.partition_column: the dead-letter table is "
         "DAY-partitioned"),
    ],
)  # fmt: skip
def test_config_check_refuses_what_it_can_decide_naming_table_and_column(
    tables: dict[str, Any], expected: str
) -> None:
    message = _problems(_raw(tables))

    assert expected in message and "1 problem(s)" in message


def test_a_registry_topics_column_is_left_to_the_first_load() -> None:
    # clicks has no declared schema: only its first file says whether "ts" is a TIMESTAMP.
    config = parse_pipeline_config(
        _raw({"acme_web.clicks": {"partition_column": "ts"}}), source="test.yaml"
    )

    assert config.table_layout("acme_web", "clicks").partition_column == "ts"


@pytest.mark.parametrize("settings", [{"partitioning": "none"}, {"partition_column": "ts"}])
def test_keyed_tables_stay_day_partitioned_on_the_event_date(settings: dict[str, Any]) -> None:
    message = _problems(_raw({"shop.*": settings}, keyed=True))

    assert "covers the tables of keyed topic 'customers': keyed tables are DAY-partitioned" in (
        message
    )


# --- columns and refusals ----------------------------------------------------------------------
COLUMNS = {
    "placedAt": ("TIMESTAMP", "NULLABLE"),
    "localTime": ("DATETIME", "NULLABLE"),
    "shipDate": ("DATE", "NULLABLE"),
    "tags": ("TIMESTAMP", "REPEATED"),
}


@pytest.mark.parametrize(
    "column, hourly, expected",
    [
        ("placedAt", False, None),
        ("localtime", True, None),  # BigQuery column names ignore case
        ("shipDate", False, None),
        ("shipDate", True, "t.o: partition column 'shipDate' is DATE; BigQuery partitions by "
                           "HOUR only on DATETIME, TIMESTAMP"),
        ("tags", False, "t.o: partition column 'tags' is repeated (an array)"),
        ("missing", False, "t.o: partition column 'missing' is not a column (columns: placedAt, "
                           "localTime, shipDate, tags)"),
    ],
)  # fmt: skip
def test_a_partition_column_must_be_a_date_timestamp_or_datetime(
    column: str, hourly: bool, expected: str | None
) -> None:
    assert partition_column_problem(column, COLUMNS, hourly, "t.o") == expected


@pytest.mark.parametrize(
    "current, wanted",
    [
        (PartitionSpec("DAY", "_event_date"), PartitionSpec("DAY", "_event_date")),
        (PartitionSpec("MONTH", "PlacedAt"), PartitionSpec("MONTH", "placedAt")),
        (PartitionSpec(None), PartitionSpec(None)),
    ],
)
def test_a_table_partitioned_as_configured_is_not_refused(
    current: PartitionSpec, wanted: PartitionSpec
) -> None:
    assert partitioning_refusal("acme_sales.orders", current, wanted) is None


@pytest.mark.parametrize(
    "current, wanted, what",
    [
        (PartitionSpec("DAY", "_event_date"), PartitionSpec("MONTH", "_event_date"),
         "acme_sales.orders is DAY partitions on column _event_date, the configuration asks "
         "MONTH partitions on column _event_date"),
        (PartitionSpec("DAY", "_event_date"), PartitionSpec("DAY", "placedAt"),
         "acme_sales.orders is DAY partitions on column _event_date, the configuration asks "
         "DAY partitions on column placedAt"),
        (PartitionSpec(None), PartitionSpec("YEAR", "_event_date"),
         "acme_sales.orders is not partitioned, the configuration asks YEAR partitions on "
         "column _event_date"),
        (PartitionSpec("HOUR", "_event_hour"), PartitionSpec(None),
         "acme_sales.orders is HOUR partitions on column _event_hour, the configuration asks "
         "not partitioned"),
    ],
)  # fmt: skip
def test_a_partitioning_change_is_refused_naming_the_table_both_sides_and_what_to_do(
    current: PartitionSpec, wanted: PartitionSpec, what: str
) -> None:
    message = partitioning_refusal("acme_sales.orders", current, wanted)

    assert message is not None and message.startswith(what)
    assert "BigQuery cannot change an existing table's partitioning" in message
    assert "restore the table's partitioning under tables.acme_sales.orders" in message
    assert "CREATE TABLE ... PARTITION BY ... AS SELECT * FROM acme_sales.orders" in message
    assert "The files stay staged" in message
    assert "kbqe load release --table acme_sales.orders --yes" in message


# --- month and year arithmetic -----------------------------------------------------------------
def at(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(
    "unit, period, key, end, following, before",
    [
        (MONTH, date(2026, 11, 1), "2026-11-01", "2026-12-01", date(2026, 12, 1),
         date(2026, 10, 1)),
        (MONTH, date(2026, 12, 1), "2026-12-01", "2027-01-01", date(2027, 1, 1),
         date(2026, 11, 1)),
        (MONTH, date(2026, 1, 1), "2026-01-01", "2026-02-01", date(2026, 2, 1),
         date(2025, 12, 1)),
        (YEAR, date(2026, 1, 1), "2026-01-01", "2027-01-01", date(2027, 1, 1),
         date(2025, 1, 1)),
    ],
)  # fmt: skip
def test_months_and_years_are_keyed_by_their_first_day(
    unit: Unit, period: date, key: str, end: str, following: date, before: date
) -> None:
    assert unit.key(period) == key and unit.parse(key) == period
    assert unit.end(period) == at(end)
    assert (unit.next(period), unit.previous(period)) == (following, before)
    assert unit.is_start(period) and not unit.is_start(period + timedelta(days=1))


@pytest.mark.parametrize(
    "unit, instant, newest",
    [
        (MONTH, "2026-11-29T03:00", date(2026, 10, 1)),
        (MONTH, "2026-12-01T00:00", date(2026, 11, 1)),  # November ends at this instant
        (MONTH, "2026-11-30T23:59", date(2026, 10, 1)),  # its last day has not ended
        (YEAR, "2026-12-31T23:59", date(2025, 1, 1)),
        (YEAR, "2027-01-01T00:00", date(2026, 1, 1)),
        (Unit(Partitioning.NONE), "2026-11-29T03:00", date(2026, 11, 28)),  # per table: days
    ],
)  # fmt: skip
def test_a_month_or_year_has_ended_when_its_last_day_has(
    unit: Unit, instant: str, newest: date
) -> None:
    assert unit.newest_ending_by(at(instant)) == newest


def test_a_month_is_complete_when_its_last_day_is() -> None:
    def verdict(unit: Unit, kafka_time: str) -> date | None:
        observed = at("2026-12-05T00:00")
        progress = PartitionProgress("t", 0, 50, 100, observed, kafka_time=at(kafka_time))
        return table_completeness("d.t", [progress], unit).newest_complete  # type: ignore[return-value]

    # Kafka time reached Nov 30 23:00: the day before is complete, November is not.
    assert verdict(unit_of(Partitioning.DAY), "2026-11-30T23:00") == date(2026, 11, 29)
    assert verdict(MONTH, "2026-11-30T23:00") == date(2026, 10, 1)
    # Past Nov 30 plus the lateness (5 minutes): Nov 30 is complete, and so is November.
    assert verdict(unit_of(Partitioning.DAY), "2026-12-01T00:06") == date(2026, 11, 30)
    assert verdict(MONTH, "2026-12-01T00:06") == date(2026, 11, 1)
    assert verdict(YEAR, "2026-12-01T00:06") == date(2025, 1, 1)


def test_day_counts_add_up_to_months_and_years_and_late_records_count_per_period() -> None:
    days = {"2026-10-31": 2, "2026-11-01": 3, "2026-11-30": 4, "2027-01-02": 1}

    assert MONTH.rollup(days) == {"2026-10-01": 2, "2026-11-01": 7, "2027-01-01": 1}
    assert YEAR.rollup(days) == {"2026-01-01": 9, "2027-01-01": 1}
    assert Unit(Partitioning.NONE).rollup(days) == days
    # November declared complete: its records loaded since are late, December's are not.
    assert late_records(MONTH.rollup(days), date(2026, 11, 1), MONTH) == {
        "2026-10-01": 2,
        "2026-11-01": 7,
    }


@pytest.mark.parametrize(
    "unit, newest, day, covered",
    [
        (MONTH, date(2026, 11, 1), date(2026, 11, 30), True),
        (MONTH, date(2026, 10, 1), date(2026, 11, 2), False),
        (YEAR, date(2026, 1, 1), date(2026, 12, 31), True),
        (YEAR, None, date(2026, 1, 1), False),
    ],
)  # fmt: skip
def test_a_day_is_covered_when_its_month_or_year_is_complete(
    unit: Unit, newest: date | None, day: date, covered: bool
) -> None:
    assert unit.covers_day(newest, day) is covered
