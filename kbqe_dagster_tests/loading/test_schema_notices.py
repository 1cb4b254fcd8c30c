"""Schema and table notices: a table created by a load, columns added by a newer schema,
columns relaxed; each noticed once, remembered in the staging area across processes; posted
to a webhook that may be slow, failing or absent without holding the load back."""

from __future__ import annotations

import json
import threading
import time
from datetime import date, timedelta
from http.server import BaseHTTPRequestHandler, HTTPServer

import pytest

from kbqe_dagster.core.config.sections import NotificationSettings
from kbqe_dagster.core.load.notices import (
    KNOWN_SCHEMAS_FILE,
    Column,
    NoticeKind,
    decode_known,
    schema_notices,
)
from kbqe_dagster.resources.webhook import post_notices
from kbqe_dagster_tests.loading.conftest import ORDERS_V1, ORDERS_V2, TOPIC
from kbqe_dagster_tests.loading.staged import stage_range

DAY = date(2024, 9, 12)
A, B = Column("a", "STRING", "REQUIRED"), Column("b", "INTEGER")


def test_a_known_table_notices_added_and_relaxed_columns_and_nothing_else() -> None:
    relaxed_a = Column("a", "STRING", "NULLABLE")
    notices = schema_notices("d.t", [A], [relaxed_a, B])
    assert [(n.kind, n.columns) for n in notices] == [
        (NoticeKind.COLUMNS_ADDED, ("b",)),
        (NoticeKind.COLUMNS_RELAXED, ("a",)),
    ]
    assert schema_notices("d.t", [A, B], [A, B]) == []
    assert notices[0].to_json()["text"] == "kbqe: table d.t gained column(s) b"


def test_an_unknown_table_is_created_or_adopted_silently() -> None:
    [created] = schema_notices("d.t", None, [A, B], created=True, job_id="j1")
    assert created.kind is NoticeKind.TABLE_CREATED and created.columns == ("a", "b")
    assert created.to_json()["before"] is None and created.to_json()["job_id"] == "j1"
    assert schema_notices("d.t", None, [A, B], created=False) == []


def test_the_load_notices_a_created_table_then_its_new_column_once(store, make_coordinator) -> None:
    stage_range(store, TOPIC, 0, 0, 3, [(ORDERS_V1, 4, DAY)])
    first = make_coordinator().run_cycle()
    assert [(n.table, n.kind) for n in first.notices] == [
        ("acme_sales.orders", NoticeKind.TABLE_CREATED)
    ]
    stage_range(store, TOPIC, 0, 4, 7, [(ORDERS_V2, 4, DAY)])
    second = make_coordinator().run_cycle()  # a new process: the schemas are remembered
    assert [(n.kind, n.columns) for n in second.notices] == [
        (NoticeKind.COLUMNS_ADDED, ("coupon",))
    ]
    stage_range(store, TOPIC, 0, 8, 11, [(ORDERS_V2, 4, DAY)])
    assert make_coordinator().run_cycle().notices == []
    known = decode_known(store.read_bytes(KNOWN_SCHEMAS_FILE))
    assert "coupon" in [c.name for c in known["acme_sales.orders"]]


class _Receiver(BaseHTTPRequestHandler):
    answers: list[int] = []
    received: list[dict] = []

    def do_POST(self) -> None:  # noqa: N802 (the stdlib's name)
        body = self.rfile.read(int(self.headers["Content-Length"]))
        status = self.answers.pop(0) if self.answers else 200
        if status == 200:
            self.received.append(json.loads(body))
        self.send_response(status)
        self.end_headers()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def receiver():
    _Receiver.answers, _Receiver.received = [], []
    server = HTTPServer(("127.0.0.1", 0), _Receiver)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/hook", _Receiver
    server.shutdown()
    server.server_close()


NOTICE = schema_notices("d.t", [A], [A, B])


def test_each_notice_is_posted_as_json_with_a_text_field(receiver) -> None:
    url, handler = receiver
    assert post_notices(NotificationSettings(webhook_url=url), NOTICE) == 1
    [document] = handler.received
    assert document["text"] == "kbqe: table d.t gained column(s) b"
    assert document["kind"] == "columns_added" and document["after"][1]["name"] == "b"


def test_a_failing_receiver_is_retried_and_a_refusing_one_is_not(receiver) -> None:
    url, handler = receiver
    handler.answers = [503, 503]
    settings = NotificationSettings(webhook_url=url, retries=2)
    assert post_notices(settings, NOTICE) == 1 and len(handler.received) == 1
    handler.answers = [400, 200]
    assert post_notices(settings, NOTICE) == 0  # 4xx: the document is refused, not retried


def test_an_unreachable_webhook_costs_a_bounded_time_and_never_raises() -> None:
    settings = NotificationSettings(
        webhook_url="http://127.0.0.1:9/hook", retries=1, timeout=timedelta(milliseconds=200)
    )
    started = time.monotonic()
    assert post_notices(settings, NOTICE) == 0
    assert time.monotonic() - started < 5


def test_the_webhook_is_configured_in_the_pipeline_file() -> None:
    from kbqe_dagster.core.config.pipeline import parse_pipeline_config
    from kbqe_dagster.core.errors import ConfigError

    raw = {"version": 1, "topics": [{"name": "t", "event_time": {"fields": ["ts"]}}]}
    assert parse_pipeline_config(raw).notifications.webhook_url is None
    config = parse_pipeline_config(
        {
            **raw,
            "notifications": {
                "webhook_url": "https://hooks.example/x",
                "timeout": "2s",
                "retries": 0,
            },
        }
    )
    assert config.notifications == NotificationSettings(
        "https://hooks.example/x", timedelta(seconds=2), 0
    )
    with pytest.raises(ConfigError, match="notifications: webhook_url must start with http"):
        parse_pipeline_config({**raw, "notifications": {"webhook_url": "ftp://x"}})


def test_a_notice_is_a_text_line_for_people_and_a_json_line_for_log_shippers(
    store, make_coordinator, caplog
) -> None:
    """The load's own logger (on the console) gets the notice's one-line text; the
    ``kbqe_dagster.notices`` logger the whole JSON document, which the console shows only
    with -v (cli/logs.py)."""
    import logging

    stage_range(store, TOPIC, 0, 0, 3, [(ORDERS_V1, 4, DAY)])
    with caplog.at_level(logging.INFO):
        [notice] = make_coordinator().run_cycle().notices
    lines = {r.name: r.getMessage() for r in caplog.records if "schema notice" in r.getMessage()}
    assert lines["kbqe_dagster.loading.coordinator"] == f"schema notice: {notice.to_json()['text']}"
    document = json.loads(lines["kbqe_dagster.notices"].split(": ", 1)[1])
    assert document["table"] == "acme_sales.orders" and document["after"]
