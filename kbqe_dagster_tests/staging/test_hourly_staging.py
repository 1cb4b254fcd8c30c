"""Staging into HOUR-partitioned tables: their records carry the event hour column and their
manifests count records per hour; DAY tables' files in the same range are unchanged. The
native kernel stages HOUR tables' records itself, into the same bytes as the Python path (a
kernel built before it could leaves topics that may write an HOUR table to the Python path)."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime
from types import SimpleNamespace
from typing import Any

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stager_class
from kbqe_dagster.staging import native_kernel
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging
from kbqe_dagster_tests.staging.kernel_equality import Msg, assert_same, stage

SCHEMA = {
    "type": "record",
    "name": "Click",
    "namespace": "acme",
    "fields": [
        {"name": "eventTime", "type": "string"},
        {"name": "datasetName", "type": "string"},
        {"name": "tableName", "type": "string"},
    ],
}
UTC = UTC


def _pipeline(tables: dict[str, Any], **topic: Any):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": "clicks",
                    "routing": {"mode": "fields"},
                    "event_time": {"fields": ["eventTime"]},
                    **topic,
                }
            ],
            "allowed_destinations": ["acme_web.*", "acme_sales.orders"],
            "tables": tables,
        },
        source="test",
    )


def _message(offset: int, when: str, table: str) -> Msg:
    body = io.BytesIO()
    fastavro.schemaless_writer(
        body,
        fastavro.parse_schema(SCHEMA),
        {"eventTime": when, "datasetName": "acme_web", "tableName": table},
    )
    return Msg("clicks", 0, offset, b"\x00" + (9).to_bytes(4, "big") + body.getvalue())


MESSAGES = [
    _message(0, "2026-11-23T14:59:59.999+00:00", "clicks"),
    _message(1, "2026-11-23T16:05:00+01:00", "clicks"),  # 15:05 UTC
    _message(2, "2026-11-23T23:30:00-05:00", "clicks"),  # 2026-11-24T04:30 UTC
    _message(3, "2026-11-23T14:10:00Z", "page_views"),  # a DAY table
    _message(4, "not a time", "clicks"),  # a dead letter
]


def _records(data: bytes) -> list[dict]:
    return list(fastavro.reader(io.BytesIO(data)))


def test_an_hour_table_s_records_carry_their_utc_event_hour(tmp_path) -> None:
    staged = stage(
        tmp_path,
        _pipeline({"acme_web.clicks": {"partitioning": "hour"}}),
        "clicks",
        {9: SCHEMA},
        MESSAGES,
        native=False,
    )
    files = staged.files
    clicks = _records(files["clicks.0.acme_web.clicks.9.0.avro"])
    assert [r["_event_hour"] for r in clicks] == [
        datetime(2026, 11, 23, 14, tzinfo=UTC),
        datetime(2026, 11, 23, 15, tzinfo=UTC),
        datetime(2026, 11, 24, 4, tzinfo=UTC),
    ]
    # The event date keeps its own rule (local by default): the hour does not change it.
    assert [str(r["_event_date"]) for r in clicks] == ["2026-11-23"] * 3
    views = _records(files["clicks.0.acme_web.page_views.9.0.avro"])
    assert "_event_hour" not in views[0]

    manifest = json.loads(files["clicks.0.acme_web.clicks.9.0.4.done"])
    by_file = {f["avro"]: f for f in manifest["files"]}
    assert by_file["clicks.0.acme_web.clicks.9.0.avro"]["hours"] == {
        "2026-11-23T14": 1,
        "2026-11-23T15": 1,
        "2026-11-24T04": 1,
    }
    assert "hours" not in by_file["clicks.0.acme_web.page_views.9.0.avro"]
    assert staged.result is not None and staged.result.dead_letters == {"invalid_event_time": 1}


def test_without_hour_tables_the_files_are_what_they_were(tmp_path) -> None:
    staged = stage(tmp_path, _pipeline({}), "clicks", {9: SCHEMA}, MESSAGES, native=False)
    clicks = _records(staged.files["clicks.0.acme_web.clicks.9.0.avro"])
    assert "_event_hour" not in clicks[0]
    assert b'"hours"' not in staged.files["clicks.0.acme_web.clicks.9.0.4.done"]


def _driver(tmp_path, config) -> NativeStaging | None:
    ctx = StageContext(
        KafkaSettings("127.0.0.1:9"),
        RegistrySettings("http://127.0.0.1:9"),
        StagingLocation(str(tmp_path)),
        config,
        "clicks",
        native_kernel=True,
    )
    stager = stager_class(ctx)(ctx, OffsetRange("clicks", 0, 0, 10), tmp_path)
    return NativeStaging.for_stager(stager)


def _stand_in_kernel(monkeypatch: pytest.MonkeyPatch, *, hourly: bool) -> None:
    """A stand-in extension: which path a stager takes is decided before the kernel runs.
    ``hourly``: whether its kernel writes the event hour column (``hourly_slot``)."""

    class StageKernel:
        def __init__(self, *args: Any) -> None:
            self.messages = 0

    if hourly:
        StageKernel.hourly_slot = lambda self, slot: None  # type: ignore[attr-defined]
    monkeypatch.setattr(native_kernel, "_extension", SimpleNamespace(StageKernel=StageKernel))


ROUTED_HOUR = {"acme_sales.orders": {"partitioning": "hour"}}
STATIC_WEB_CLICKS = {"routing": {"mode": "static", "dataset": "acme_web", "table": "clicks"}}


def test_a_kernel_that_writes_the_event_hour_takes_topics_that_write_hour_tables(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_in_kernel(monkeypatch, hourly=True)
    assert _driver(tmp_path, _pipeline({})) is not None
    assert _driver(tmp_path, _pipeline(ROUTED_HOUR)) is not None
    hour_static = _pipeline({"acme_web.*": {"partitioning": "hour"}}, **STATIC_WEB_CLICKS)
    assert _driver(tmp_path, hour_static) is not None


def test_a_kernel_built_before_hour_tables_leaves_them_to_the_python_path(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _stand_in_kernel(monkeypatch, hourly=False)
    assert _driver(tmp_path, _pipeline({})) is not None
    # Routed per record: any HOUR table of the file may be its destination.
    assert _driver(tmp_path, _pipeline(ROUTED_HOUR)) is None
    # A static DAY table, whatever other tables are.
    assert _driver(tmp_path, _pipeline(ROUTED_HOUR, **STATIC_WEB_CLICKS)) is not None
    hour_static = _pipeline({"acme_web.*": {"partitioning": "hour"}}, **STATIC_WEB_CLICKS)
    assert _driver(tmp_path, hour_static) is None


# --- the native kernel on HOUR tables --------------------------------------------------------
needs_kernel = pytest.mark.skipif(
    not native_kernel.kernel_built()
    or not hasattr(getattr(native_kernel.extension(), "StageKernel", None), "hourly_slot"),
    reason="the native stage kernel is not built, or built before it wrote HOUR tables",
)


def _both_paths(tmp_path, config, messages) -> tuple[Any, Any]:
    python = stage(tmp_path, config, "clicks", {9: SCHEMA}, messages, native=False)
    native = stage(tmp_path, config, "clicks", {9: SCHEMA}, messages, native=True, batch_size=2)
    assert_same(python, native)
    return python, native


@needs_kernel
def test_the_kernel_writes_an_hour_table_s_event_hour_and_hours_as_the_python_path(tmp_path):
    python, native = _both_paths(
        tmp_path, _pipeline({"acme_web.clicks": {"partitioning": "hour"}}), MESSAGES
    )
    # All but the dead letter staged by the kernel: the HOUR table's three and the DAY one.
    assert native.kernel_messages == 4 and native.handbacks == {"event_time_uncertain": 1}
    clicks = _records(native.files["clicks.0.acme_web.clicks.9.0.avro"])
    assert [r["_event_hour"].hour for r in clicks] == [14, 15, 4]
    assert "_event_hour" not in _records(native.files["clicks.0.acme_web.page_views.9.0.avro"])[0]


@needs_kernel
@pytest.mark.parametrize("date_rule", ["local", "utc"])
def test_a_naive_time_placed_by_a_zone_id_is_handed_back_for_an_hour_table_only(
    tmp_path, date_rule
):
    """Its hour needs the zone (the Python path's zoneinfo): under ``local`` the DAY table's
    record is the kernel's (the date as written), the HOUR table's the Python path's."""
    zoned = "2026-11-23T00:30:00[Europe/Paris]"  # 2026-11-22T23:30 UTC
    messages = [_message(0, zoned, "clicks"), _message(1, zoned, "page_views")]
    config = _pipeline(
        {"acme_web.clicks": {"partitioning": "hour"}},
        event_time={"fields": ["eventTime"], "date_rule": date_rule},
    )
    python, native = _both_paths(tmp_path, config, messages)
    assert native.kernel_messages == (1 if date_rule == "local" else 0)
    clicks = _records(native.files["clicks.0.acme_web.clicks.9.0.avro"])
    assert clicks[0]["_event_hour"] == datetime(2026, 11, 22, 23, tzinfo=UTC)


@needs_kernel
@pytest.mark.parametrize(
    ("when", "hour_key"),
    [
        ("2026-11-23T23:59:59.999999-00:30", "2026-11-24T00"),  # west of UTC: the next day
        ("2026-11-24T00:00:00+00:30", "2026-11-23T23"),  # east of UTC: the day before
        ("2026-11-23T14:00:00,5+02:00:30", "2026-11-23T11"),  # an offset with seconds
        ("2026-11-23", "2026-11-23T00"),  # a date alone: 00:00 UTC
        ("1969-12-31T23:59:59Z", "1969-12-31T23"),  # before 1970: floored, not truncated
    ],
)
def test_the_kernel_reads_the_utc_hour_across_day_boundaries(tmp_path, when, hour_key):
    config = _pipeline({"acme_web.clicks": {"partitioning": "hour"}})
    python, native = _both_paths(tmp_path, config, [_message(0, when, "clicks")])
    assert native.kernel_messages == 1
    manifest = json.loads(native.files["clicks.0.acme_web.clicks.9.0.0.done"])
    assert manifest["files"][0]["hours"] == {hour_key: 1}


@needs_kernel
def test_an_hour_table_whose_schema_has_the_hour_column_already_stays_the_python_path_s(
    tmp_path,
):
    """``with_event_hour`` refuses a record field named like the column: the kernel is never
    given that table's slot, and every message gets the Python path's verdict."""
    schema = {**SCHEMA, "fields": [*SCHEMA["fields"], {"name": "_event_hour", "type": "long"}]}
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), {
        "eventTime": "2026-11-23T14:00:00Z", "datasetName": "acme_web", "tableName": "clicks",
        "_event_hour": 1,
    })  # fmt: skip
    messages = [Msg("clicks", 0, 0, b"\x00" + (9).to_bytes(4, "big") + body.getvalue())]
    config = _pipeline({"acme_web.clicks": {"partitioning": "hour"}})
    python = stage(tmp_path, config, "clicks", {9: schema}, messages, native=False)
    native = stage(tmp_path, config, "clicks", {9: schema}, messages, native=True)
    assert_same(python, native)
    assert native.kernel_messages == 0 and python.result.dead_letters


@needs_kernel
def test_an_hour_past_9999_is_a_dead_letter_of_the_hour_table_on_both_paths(tmp_path):
    """``9999-12-31T23:30-05:00`` is dated 9999-12-31 as written (``local``) but its UTC hour
    is in the year 10000: no partition key, no TIMESTAMP. It used to fail the range at commit
    (found by the JSON kernel's fuzz with HOUR tables); it is now the HOUR table's
    ``invalid_event_time`` (the kernel hands it back) and a DAY table's record as before."""
    late = "9999-12-31T23:30:00-05:00"
    messages = [_message(0, late, "clicks"), _message(1, late, "page_views")]
    config = _pipeline({"acme_web.clicks": {"partitioning": "hour"}})
    python, native = _both_paths(tmp_path, config, messages)
    assert python.result.dead_letters == {"invalid_event_time": 1}
    assert native.kernel_messages == 1 and native.handbacks == {"event_time_uncertain": 1}
    assert "clicks.0.acme_web.page_views.9.0.avro" in native.files
