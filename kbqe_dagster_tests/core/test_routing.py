"""Routing: each message's (dataset, table), valid names only, inside the allow-list."""

from __future__ import annotations

from typing import Any

import pytest

from kbqe_dagster.core.errors import (
    BadInputError,
    ConfigError,
    DestinationNotAllowedError,
    RoutingError,
    UnroutableError,
)
from kbqe_dagster.core.record.routing import (
    AllowList,
    Destination,
    Router,
    RoutingConfig,
    RoutingInput,
    RoutingMode,
    required_fields,
    snake_case,
)

ACME = AllowList(("acme_sales.*", "acme_web.page_views", "billing.*", "ops.*"))
SELF = "kbqe_dagster_tests.core.test_routing"


def _message(
    fields: dict[str, Any] | None = None,
    schema: str | None = "com.acme.Thing",
    key: bytes | None = None,
) -> RoutingInput:
    return RoutingInput("com.acme.events", 3, 1234, schema, fields or {}, key)


# --- routing functions used by the function-mode tests (imported by name) ---
def route_by_key(message: RoutingInput) -> tuple[str, str] | None:
    if message.key is None:
        return None
    return ("ops", message.key.decode())


def route_badly(message: RoutingInput) -> Any:
    return "ops.audit"


def route_with_a_bug(message: RoutingInput) -> tuple[str, str]:
    raise KeyError("region")


def route_and_refuse(message: RoutingInput) -> tuple[str, str]:
    raise DestinationNotAllowedError("tenant 42 is frozen")


NOT_CALLABLE = 42


def _function_config(name: str) -> RoutingConfig:
    return RoutingConfig(RoutingMode.FUNCTION, function=f"{SELF}:{name}")


def test_static_routes_every_message_to_its_table() -> None:
    router = Router(RoutingConfig(RoutingMode.STATIC, dataset="ops", table="audit"), ACME)
    assert router.route(_message()) == Destination("ops", "audit")
    assert router.route(_message({"datasetName": "x"})) == ("ops", "audit")
    assert router.required_fields == ()


@pytest.mark.parametrize(
    "fields, expected",
    [
        ({"datasetName": "acme_sales", "tableName": "orders"}, ("acme_sales", "orders")),
        ({"datasetName": "acme_web", "tableName": "page_views"}, ("acme_web", "page_views")),
        ({"datasetName": "acme_sales", "tableName": "orders-v2"}, ("acme_sales", "orders-v2")),
    ],
)
def test_fields_mode_reads_dataset_and_table_fields(
    fields: dict[str, str], expected: tuple[str, str]
) -> None:
    router = Router(RoutingConfig(), ACME)
    assert router.route(_message(fields)) == expected


def test_fields_mode_reads_configured_dotted_paths() -> None:
    config = RoutingConfig(dataset_field="meta.ds", table_field="meta.tbl")
    router = Router(config, ACME)
    assert router.required_fields == ("meta.ds", "meta.tbl")
    assert router.route(_message({"meta.ds": "billing", "meta.tbl": "invoices"})) == (
        "billing",
        "invoices",
    )


@pytest.mark.parametrize(
    "fields, message_part",
    [
        ({}, "'datasetName', 'tableName' missing or null"),
        ({"datasetName": "acme_sales"}, "'tableName' missing or null"),
        ({"datasetName": None, "tableName": "orders"}, "'datasetName' missing or null"),
        ({"datasetName": "", "tableName": "orders"}, "dataset ''"),
        ({"datasetName": "acme_sales", "tableName": ""}, "table ''"),
        ({"datasetName": "acme.sales", "tableName": "orders"}, "dataset 'acme.sales'"),
        ({"datasetName": "acme-sales", "tableName": "orders"}, "dataset 'acme-sales'"),
        ({"datasetName": "acme_sales", "tableName": "ord.ers"}, "table 'ord.ers'"),
        ({"datasetName": "acme_sales", "tableName": "a/b"}, "table 'a/b'"),
        ({"datasetName": "acme_sales", "tableName": "orders\n"}, "table 'orders\\n'"),
        ({"datasetName": 7, "tableName": "orders"}, "dataset 7"),
        ({"datasetName": ["acme_sales"], "tableName": "orders"}, "dataset ['acme_sales']"),
        ({"datasetName": "acme_sales", "tableName": {"n": 1}}, "table {'n': 1}"),
    ],
)
def test_missing_or_invalid_names_are_unroutable(fields: dict[str, Any], message_part: str) -> None:
    router = Router(RoutingConfig(), ACME)
    with pytest.raises(UnroutableError) as caught:
        router.route(_message(fields))
    assert caught.value.reason == "unroutable"
    assert str(caught.value).startswith("com.acme.events[3] offset 1234: ")
    assert message_part in str(caught.value)


@pytest.mark.parametrize(
    "dataset, table",
    [("acme_web", "orders"), ("acme_marketing", "leads"), ("acme_salesx", "orders")],
)
def test_destinations_outside_the_allow_list_are_refused(dataset: str, table: str) -> None:
    router = Router(RoutingConfig(), ACME)
    with pytest.raises(DestinationNotAllowedError) as caught:
        router.route(_message({"datasetName": dataset, "tableName": table}))
    assert caught.value.reason == "destination_not_allowed"
    assert f"{dataset}.{table} is not in the allow-list" in str(caught.value)
    assert "offset 1234" in str(caught.value)


def test_verdicts_are_cached_but_errors_still_name_each_message() -> None:
    router = Router(RoutingConfig(), ACME)
    bad = {"datasetName": "nope", "tableName": "x"}
    with pytest.raises(DestinationNotAllowedError, match=r"\[3\] offset 1"):
        router.route(RoutingInput("t", 3, 1, None, bad))
    with pytest.raises(DestinationNotAllowedError, match=r"\[4\] offset 2"):
        router.route(RoutingInput("t", 4, 2, None, bad))


@pytest.mark.parametrize(
    "schema, namespace_datasets, dataset, expected",
    [
        ("com.acme.billing.Invoice", {}, None, ("billing", "invoice")),
        (
            "com.acme.sales.OrderLine",
            {"com.acme.sales": "acme_sales"},
            None,
            ("acme_sales", "order_line"),
        ),
        ("com.acme.web.PageViews", {}, "acme_web", ("acme_web", "page_views")),
        (
            "com.acme.web.PageViews",
            {"com.acme.web": "acme_web"},
            "ops",
            ("acme_web", "page_views"),
        ),
        ("Invoice", {}, "billing", ("billing", "invoice")),
        ("ops.HTTPRequest", {}, None, ("ops", "http_request")),
    ],
)
def test_schema_name_mode_maps_namespace_and_name(
    schema: str,
    namespace_datasets: dict[str, str],
    dataset: str | None,
    expected: tuple[str, str],
) -> None:
    config = RoutingConfig(
        RoutingMode.SCHEMA_NAME, dataset=dataset, namespace_datasets=namespace_datasets
    )
    router = Router(config, ACME)
    assert router.route(_message(schema=schema)) == expected
    assert router.required_fields == ()


@pytest.mark.parametrize("schema", [None, "", "Invoice"])
def test_schema_name_without_namespace_or_dataset_is_unroutable(schema: str | None) -> None:
    router = Router(RoutingConfig(RoutingMode.SCHEMA_NAME), ACME)
    with pytest.raises(UnroutableError, match="schema full name"):
        router.route(_message(schema=schema))


@pytest.mark.parametrize(
    "name, expected",
    [
        ("PageView", "page_view"),
        ("HTTPRequest", "http_request"),
        ("orderV2", "order_v2"),
        ("Invoice", "invoice"),
        ("already_snake", "already_snake"),
        ("A", "a"),
    ],
)
def test_snake_case(name: str, expected: str) -> None:
    assert snake_case(name) == expected


def test_function_mode_calls_the_imported_function_with_the_message() -> None:
    config = RoutingConfig(
        RoutingMode.FUNCTION, function=f"{SELF}:route_by_key", function_fields=("region",)
    )
    router = Router(config, ACME)
    assert router.required_fields == ("region",)
    assert router.route(_message(key=b"audit")) == ("ops", "audit")
    with pytest.raises(UnroutableError, match="returned no destination"):
        router.route(_message(key=None))
    with pytest.raises(UnroutableError, match="table 'a.b'"):
        router.route(_message(key=b"a.b"))


def test_function_returning_a_non_pair_is_unroutable() -> None:
    router = Router(_function_config("route_badly"), ACME)
    with pytest.raises(UnroutableError, match="returned 'ops.audit', expected"):
        router.route(_message())


def test_function_may_choose_its_reason_and_bugs_propagate() -> None:
    refusing = Router(_function_config("route_and_refuse"), ACME)
    with pytest.raises(DestinationNotAllowedError, match="tenant 42"):
        refusing.route(_message())
    buggy = Router(_function_config("route_with_a_bug"), ACME)
    with pytest.raises(KeyError):
        buggy.route(_message())


@pytest.mark.parametrize(
    "spec, message_part",
    [
        (f"{SELF}:no_such_function", "cannot be imported"),
        ("kbqe_no_such_module:route", "cannot be imported"),
        (f"{SELF}:NOT_CALLABLE", "is a int, not callable"),
    ],
)
def test_unresolvable_functions_fail_when_the_router_is_built(spec: str, message_part: str) -> None:
    with pytest.raises(ConfigError, match=message_part):
        Router(RoutingConfig(RoutingMode.FUNCTION, function=spec), ACME)


@pytest.mark.parametrize(
    "kwargs, message_part",
    [
        ({"mode": "static", "dataset": "ops"}, "needs both 'dataset' and 'table'"),
        ({"mode": "static", "dataset": "o.ps", "table": "audit"}, "dataset 'o.ps'"),
        ({"mode": "static", "dataset": "ops", "table": "a b"}, "table 'a b'"),
        ({"mode": "function"}, "needs 'package.module:name', got None"),
        ({"mode": "function", "function": "module.function"}, "got 'module.function'"),
        ({"mode": "function", "function": "m:f\n"}, "got 'm:f\\n'"),
        ({"mode": "schema_name", "dataset": "a-b"}, "dataset 'a-b'"),
        ({"mode": "schema_name", "namespace_datasets": {"com.x": "x.y"}}, "{'com.x': 'x.y'}"),
    ],
)
def test_invalid_routing_configs_are_refused(kwargs: dict[str, Any], message_part: str) -> None:
    with pytest.raises(ValueError) as caught:
        RoutingConfig(**kwargs)
    assert message_part in str(caught.value)


def test_mode_strings_are_coerced_and_unknown_modes_refused() -> None:
    config = RoutingConfig(mode="schema_name")  # type: ignore[arg-type]
    assert config.mode is RoutingMode.SCHEMA_NAME
    with pytest.raises(ValueError, match="feild"):
        RoutingConfig(mode="feild")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "config, fields",
    [
        (RoutingConfig(), ("datasetName", "tableName")),
        (RoutingConfig(RoutingMode.STATIC, dataset="a", table="b"), ()),
        (RoutingConfig(RoutingMode.SCHEMA_NAME), ()),
        (
            RoutingConfig(RoutingMode.FUNCTION, function="m:f", function_fields=["x", "y.z"]),
            ("x", "y.z"),
        ),
    ],
)
def test_required_fields_tell_the_decoder_what_to_decode(
    config: RoutingConfig, fields: tuple[str, ...]
) -> None:
    assert required_fields(config) == fields


def test_static_destination_is_known_up_front() -> None:
    static = RoutingConfig(RoutingMode.STATIC, dataset="a", table="b")
    assert static.static_destination == ("a", "b")
    assert RoutingConfig().static_destination is None


@pytest.mark.parametrize(
    "dataset, table, allowed",
    [
        ("acme_sales", "anything", True),
        ("acme_web", "page_views", True),
        ("acme_web", "orders", False),
        ("acme", "sales", False),
        ("other", "page_views", False),
    ],
)
def test_allow_list_matches_exact_tables_and_dataset_wildcards(
    dataset: str, table: str, allowed: bool
) -> None:
    assert ACME.allows(dataset, table) is allowed


def test_allow_list_declares_its_datasets() -> None:
    assert ACME.datasets == {"acme_sales", "acme_web", "billing", "ops"}


@pytest.mark.parametrize(
    "pattern, message_part",
    [
        ("*", "must be 'dataset.table' or 'dataset.*'"),
        ("*.*", "dataset '*'"),
        ("*.orders", "dataset '*'"),
        ("acme_sales", "must be 'dataset.table'"),
        ("a.b.c", "must be 'dataset.table'"),
        ("acme-sales.*", "dataset 'acme-sales'"),
        ("acme_sales.", "table ''"),
        (7, "must be 'dataset.table'"),
    ],
)
def test_allow_list_refuses_patterns_that_would_open_undeclared_datasets(
    pattern: Any, message_part: str
) -> None:
    with pytest.raises(ValueError, match="allow-list entry") as caught:
        AllowList((pattern,))
    assert message_part in str(caught.value)


def test_routing_errors_are_bad_input() -> None:
    assert issubclass(UnroutableError, RoutingError)
    assert issubclass(DestinationNotAllowedError, RoutingError)
    assert issubclass(RoutingError, BadInputError)


def test_a_table_name_with_a_control_character_is_unroutable_not_a_crash():
    # Found by the native kernel's differential fuzz: a corrupted byte put a NUL into a routed
    # table name, which passed the name rule and then failed the stage task opening its file.
    from kbqe_dagster.core.record.routing import name_problem

    assert "control characters" in name_problem("acme_sales", "page_v\x00ews")
    assert "control characters" in name_problem("acme_sales", "tab\x7fle")
    assert name_problem("acme_sales", "page_views") is None
