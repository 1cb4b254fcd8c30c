"""What delivering rows into BigQuery costs at list rates: free batch loads, or bytes appended
through the Storage Write API (``delivery: storage_write``), billed per GiB after a monthly
free tier.

The figures a run reports (metadata, metrics, ``kbqe run``) are **list prices before the free
tier**: the free 2 TiB a month are per billing account, shared by every writer of every
project on it, which one run cannot know. :func:`storage_write_cost` gives both sides for a
month's volume (the docs' cost table, docs/operations.md "Cost").

The bytes are the serialized rows the writer sends (``TableDelivery.bytes``); BigQuery bills
the ingested bytes it computes itself, so the price is an estimate at list rates, not an
invoice. Pure: no I/O.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# List prices, BigQuery "Data ingestion pricing" (https://cloud.google.com/bigquery/pricing),
# US/EU multi-regions, checked 2026-11-25: Storage Write API $0.025 per GiB ingested, the
# first 2 TiB per month free (per billing account); batch loading: free (shared slot pool).
# Legacy streaming inserts (not used here) list at $0.05 per GiB, twice the Storage Write API.
STORAGE_WRITE_USD_PER_GIB = 0.025
STORAGE_WRITE_FREE_BYTES_PER_MONTH = 2 * 2**40
"""2 TiB a month free, per billing account."""
LOAD_JOB_USD_PER_GIB = 0.0
"""Batch load jobs cost nothing (they use the shared slot pool); only storage is billed, the
same for both deliveries."""
PRICES_CHECKED = "2026-11-25"

GIB = 2**30
SECONDS_PER_MONTH = 730 * 3600
"""A month as Google's pricing calculator counts it: 730 hours."""


def gib(n_bytes: int | float) -> float:
    return n_bytes / GIB


def storage_write_list_price(bytes_appended: int | float) -> float:
    """USD for ``bytes_appended`` through the Storage Write API at the list rate, **before**
    the free tier (what a run reports: it cannot know the billing account's month)."""
    if bytes_appended < 0:
        raise ValueError(f"bytes appended cannot be negative: {bytes_appended}")
    return gib(bytes_appended) * STORAGE_WRITE_USD_PER_GIB


def usd(amount: float) -> str:
    """``$30.59``; below a cent, two significant digits, so that a small price never reads
    as nothing (``$0.000042``, ``$0.00000024``)."""
    if amount >= 0.01 or amount <= 0:
        return f"${amount:,.2f}"
    return f"${amount:.{1 - math.floor(math.log10(amount))}f}"


def load_price(bytes_loaded: int | float) -> float:
    """USD for ``bytes_loaded`` by batch load jobs: nothing."""
    return gib(bytes_loaded) * LOAD_JOB_USD_PER_GIB


@dataclass(frozen=True)
class MonthlyCost:
    """A month's Storage Write API volume and its price, with and without the free tier."""

    bytes_per_month: float
    list_usd: float
    """Every byte at the list rate (the free tier used up by other writers)."""
    after_free_tier_usd: float
    """Only the bytes beyond the month's free 2 TiB (this table the account's only writer)."""

    @property
    def gib_per_month(self) -> float:
        return gib(self.bytes_per_month)


def storage_write_cost(bytes_per_month: float) -> MonthlyCost:
    """The price of a month of ``bytes_per_month`` appended through the Storage Write API."""
    billed = max(0.0, bytes_per_month - STORAGE_WRITE_FREE_BYTES_PER_MONTH)
    return MonthlyCost(
        bytes_per_month, storage_write_list_price(bytes_per_month), storage_write_list_price(billed)
    )


def topic_month(messages_per_second: float, row_bytes: float) -> MonthlyCost:
    """A steady topic of ``messages_per_second`` rows of ``row_bytes`` each, for a month,
    delivered by ``storage_write`` (by ``load``: :func:`load_price`, nothing)."""
    return storage_write_cost(messages_per_second * row_bytes * SECONDS_PER_MONTH)
