"""The demo's freshness and cost lines: the Storage Write table's rows are seen the moment its
count reaches what was there plus what was produced, a failing count never stops the demo,
and the lines put its seconds and list price next to the load tables' seconds and free bytes."""

from __future__ import annotations

import itertools

from kbqe_dagster.demo.freshness import DemoFreshness, VisibilityWatch


def test_the_rows_are_seen_when_the_count_reaches_the_expected_rows() -> None:
    counts = iter([100, 100, 130, 150, 150])
    ticks = itertools.count(10.0)
    watch = VisibilityWatch(lambda: next(counts), expected=150, clock=lambda: next(ticks)).start()
    assert watch.finish(grace_s=10) == 10.0, "seen once, at the first count reaching 150"
    assert watch.rows == 150


def test_rows_never_seen_leave_no_figure_and_an_error_never_escapes() -> None:
    def broken() -> int:
        raise ConnectionError("emulator gone")

    watch = VisibilityWatch(broken, expected=1).start()
    assert watch.finish(grace_s=0.2) is None
    assert watch.error == "ConnectionError: emulator gone"


def test_the_lines_show_both_deliveries_seconds_and_what_they_cost() -> None:
    freshness = DemoFreshness(
        produced_at=100.0,
        storage_write_tables=("acme_web.clicks",),
        storage_write_seen_at=121.04,
        load_tables=("acme_sales.orders", "acme_web.page_views"),
        loaded_at=163.5,
        appended={"acme_web.clicks": {"rows": 500, "bytes": 2**30}},
        bytes_loaded=123_456,
        load_cadence_s=300.0,
    )

    assert freshness.lines() == [
        "      freshness: last message produced → its rows queryable in BigQuery",
        "        acme_web.clicks (storage_write): 21.0 s, as the stage run committed its "
        "ranges (no load job)",
        "        acme_sales.orders, acme_web.page_views (load): 63.5 s, after the stage run "
        "and a load job + up to load.cadence (300 s) under the daemon",
        "      cost: acme_web.clicks: 500 row(s), 1,073,741,824 byte(s) appended through the "
        "Storage Write API = $0.03 at list price ($0.025/GiB, before the free 2 TiB a month)",
        "      cost: load tables: 123,456 byte(s) loaded by batch load jobs = $0.00 (free)",
    ]


def test_a_storage_write_table_whose_rows_were_not_seen_says_so() -> None:
    freshness = DemoFreshness(0.0, ("acme_web.clicks",), None, ("acme_sales.orders",), 5.0, {}, 0)
    assert freshness.lines()[1] == (
        "        acme_web.clicks (storage_write): rows not seen (see the stage run's logs)"
    )
