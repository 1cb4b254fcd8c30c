"""A pipeline config of three topics (a static route, a fields route, a keyed Debezium topic) with
the ``tables:`` entries and topic ``delivery:`` a test gives, and the problems a config
refuses: what the delivery and column-nullability config tests share."""

from __future__ import annotations

from typing import Any

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import ConfigError

TS = {"fields": ["ts"]}


def pipeline_with(tables: Any = None, *, topic_delivery: str | None = None, **extra: Any) -> dict:
    web: dict[str, Any] = {
        "name": "web",
        "event_time": TS,
        "routing": {"mode": "static", "dataset": "acme_web", "table": "views"},
    }
    if topic_delivery is not None:
        web["delivery"] = topic_delivery
    raw: dict[str, Any] = {
        "version": 1,
        "topics": [
            web,
            {"name": "sales", "event_time": TS},  # fields routing: tables named per record
            {
                "name": "dbserver1.inventory.customers",
                "format": "debezium",
                "keyed": {},
                "routing": {"mode": "static", "dataset": "inventory", "table": "customers"},
            },
        ],
        "allowed_destinations": ["acme_web.*", "acme_sales.*"],
        **extra,
    }
    if tables is not None:
        raw["tables"] = tables
    return raw


def config_problems(raw: dict) -> str:
    with pytest.raises(ConfigError) as error:
        parse_pipeline_config(raw)
    return str(error.value)
