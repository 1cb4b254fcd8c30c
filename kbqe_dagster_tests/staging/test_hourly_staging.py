"""Staging into HOUR-partitioned tables: their records carry the event hour column and their
manifests count records per hour; DAY tables' files in the same range are unchanged; topics
that may write an HOUR table take the Python path, never the native kernel."""

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
from kbqe_dagster.stagers import stager_class
from kbqe_dagster.staging import native_kernel
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging
from kbqe_dagster_tests.staging.kernel_equality import Msg, stage

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


def test_topics_that_may_write_an_hour_table_never_take_the_native_kernel(
    tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A stand-in extension: which path a stager takes is decided before the kernel runs.
    monkeypatch.setattr(
        native_kernel,
        "_extension",
        SimpleNamespace(StageKernel=lambda *args: SimpleNamespace(messages=0)),
    )
    assert _driver(tmp_path, _pipeline({})) is not None
    # Routed per record: any HOUR table of the file may be its destination.
    assert _driver(tmp_path, _pipeline({"acme_sales.orders": {"partitioning": "hour"}})) is None
    static_day = {"routing": {"mode": "static", "dataset": "acme_web", "table": "clicks"}}
    assert (
        _driver(tmp_path, _pipeline({"acme_sales.orders": {"partitioning": "hour"}}, **static_day))
        is not None
    )
    assert (
        _driver(tmp_path, _pipeline({"acme_web.*": {"partitioning": "hour"}}, **static_day)) is None
    )
