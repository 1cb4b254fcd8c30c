"""What a delivery costs at list rates: loads nothing, the Storage Write API $0.025 per GiB
appended after a free 2 TiB a month; and the docs' cost table is what these functions say."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kbqe_dagster.core.load.cost import (
    GIB,
    SECONDS_PER_MONTH,
    STORAGE_WRITE_FREE_BYTES_PER_MONTH,
    load_price,
    storage_write_cost,
    storage_write_list_price,
    topic_month,
    usd,
)

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    "n_bytes, price",
    [
        (0, 0.0),
        (GIB, 0.025),
        (40 * GIB, 1.0),
        (2**40, 25.6),  # a TiB
    ],
)
def test_the_list_price_is_a_fortieth_of_a_dollar_per_gib_appended(n_bytes, price) -> None:
    assert storage_write_list_price(n_bytes) == pytest.approx(price)


def test_loads_cost_nothing_whatever_their_size() -> None:
    assert load_price(0) == load_price(10 * 2**40) == 0.0


def test_negative_bytes_are_refused() -> None:
    with pytest.raises(ValueError, match="-1"):
        storage_write_list_price(-1)


@pytest.mark.parametrize(
    "tib, list_usd, after_free_usd",
    [
        (1, 25.6, 0.0),  # within the free 2 TiB
        (2, 51.2, 0.0),  # exactly the free tier
        (3, 76.8, 25.6),  # one TiB beyond it
    ],
)
def test_the_free_tier_takes_off_the_first_2_tib_of_a_month(tib, list_usd, after_free_usd) -> None:
    cost = storage_write_cost(tib * 2**40)
    assert (cost.list_usd, cost.after_free_tier_usd) == (
        pytest.approx(list_usd),
        pytest.approx(after_free_usd),
    )
    assert STORAGE_WRITE_FREE_BYTES_PER_MONTH == 2 * 2**40


def test_a_steady_topic_appends_rate_times_row_size_times_a_730_hour_month() -> None:
    cost = topic_month(1_000, 500)
    assert SECONDS_PER_MONTH == 2_628_000
    assert cost.bytes_per_month == 1_000 * 500 * 2_628_000
    assert cost.gib_per_month == pytest.approx(1223.8, abs=0.05)
    assert (round(cost.list_usd, 2), cost.after_free_tier_usd) == (30.59, 0.0)


@pytest.mark.parametrize(
    "amount, text",
    [
        (0.0, "$0.00"),
        (30.594, "$30.59"),
        (1234.5, "$1,234.50"),
        (0.0000421, "$0.000042"),
        (2.38e-07, "$0.00000024"),
        (0.0099, "$0.0099"),
    ],
)
def test_prices_are_shown_in_cents_or_with_enough_digits_to_be_seen(amount, text) -> None:
    assert usd(amount) == text


def cost_section() -> str:
    text = (REPO / "docs" / "operations.md").read_text()
    assert "\n## Cost" in text, "docs/operations.md has a Cost section"
    return text.split("\n## Cost", 1)[1]


def cost_table_rows() -> list[list[str]]:
    """The rows of the cost table in docs/operations.md ("Cost"), cells stripped."""
    section = cost_section().split("\n#", 1)[0]
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in section.splitlines()
        if line.startswith("| ")
    ]
    return [r for r in rows if r[0] and r[0][0].isdigit()]


def test_the_docs_cost_table_is_what_the_functions_compute() -> None:
    rows = cost_table_rows()
    assert len(rows) >= 3, "the cost table has a row per rate"
    for rate, row_bytes, gib_month, load, listed, after_free in rows:
        cost = topic_month(int(rate.replace(",", "")), int(row_bytes))
        assert gib_month == f"{cost.gib_per_month:,.0f}", rate
        assert load == "$0.00", rate
        assert listed == usd(cost.list_usd), rate
        assert after_free == usd(cost.after_free_tier_usd), rate


def test_the_docs_state_the_rates_the_module_uses() -> None:
    section = cost_section()
    assert re.search(r"\$0\.025 per GiB", section) and "2 TiB" in section
