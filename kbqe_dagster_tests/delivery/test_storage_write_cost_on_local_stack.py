"""The cost of Storage Write delivery as a user sees it, end to end on the local stack: one
topic feeds ``page_views`` (``delivery: load``) and ``orders`` (``delivery: storage_write``);
``kbqe run --until-idle --json`` reports the orders' rows and bytes appended and their list
price, the page views' bytes loaded for free, and the metrics fold of the same Dagster
instance counts the same bytes; a second, idle run appends and reports nothing more.

Isolated like the other ``kbqe run`` tests (``test_storage_write_on_local_stack.py``'s rig).
"""

from __future__ import annotations

from datetime import timedelta

import dagster as dg
import pytest

from kbqe_dagster.core.load.cost import storage_write_list_price
from kbqe_dagster.observability.event_log import EventLogFold
from kbqe_dagster.observability.event_totals import TableAppends
from kbqe_dagster_tests.support.storage_write_rig import Rig

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def rig(local_stack, local_endpoints, tmp_path):
    rig = Rig(local_endpoints, tmp_path)
    yield rig
    rig.remove()


def folded(rig: Rig):
    with dg.DagsterInstance.from_config(rig.env["DAGSTER_HOME"]) as instance:
        return EventLogFold(lambda: instance, keep_jobs_for=timedelta(days=8)).refresh()


def test_bytes_appended_and_their_price_are_reported_once_next_to_the_free_loads(rig) -> None:
    rig.produce(views=30, orders=24)

    report = rig.until_idle()

    orders = report["tables"][f"{rig.sales}.orders"]
    views = report["tables"][f"{rig.web}.page_views"]
    assert (orders["rows_appended"], orders["rows_loaded"], orders["load_jobs"]) == (24, 0, 0)
    assert 24 * 20 < orders["bytes_appended"] < 24 * 500, "a few dozen bytes per order row"
    assert orders["list_price_usd"] == round(storage_write_list_price(orders["bytes_appended"]), 6)
    assert (
        views["rows_loaded"],
        views["rows_appended"],
        views["bytes_appended"],
        views["list_price_usd"],
    ) == (30, 0, 0, 0.0)
    assert views["bytes_loaded"] > 0, "the loads' bytes are reported, free"
    totals = folded(rig)
    assert totals.appends == {(rig.sales, "orders"): TableAppends(24, orders["bytes_appended"])}
    assert totals.tables[(rig.web, "page_views")].bytes == views["bytes_loaded"]

    again = rig.until_idle()

    assert again["tables"] == {}, "an idle run appends nothing and reports nothing"
    assert folded(rig).appends == totals.appends
    rig.assert_exactly_once()
