"""Routing: the destination ``(dataset, table)`` of each message, and the allow-list it must
match (DESIGN.md §2).

Modes (``RoutingConfig.mode``), chosen per topic:

- ``static``: every message goes to ``dataset.table``.
- ``fields`` (default, the original project's behaviour): two record fields name the
  destination, ``datasetName`` and ``tableName`` unless configured otherwise. Values come from
  the decoder's dotted path → value mapping and must be strings.
- ``schema_name``: from the Avro schema's full name ``namespace.Name``. The table is
  ``snake_case(Name)`` (``PageView`` → ``page_view``, ``HTTPRequest`` → ``http_request``). The
  dataset is, first match wins: ``namespace_datasets[namespace]`` (exact namespace), the fixed
  ``dataset``, the last namespace component. So ``com.acme.billing.Invoice`` →
  ``billing.invoice`` by default. A name without a namespace needs one of the first two.
- ``function``: a user function named ``"package.module:function"``, imported once when the
  :class:`Router` is built. It is called as ``fn(RoutingInput) -> tuple[str, str] | None``;
  ``None`` means unroutable. It may raise :class:`~kbqe_dagster.core.errors.RoutingError`
  subclasses to choose the reason; any other exception propagates unchanged (a bug in routing
  code should stop the topic, not send every record to the dead letters). The record fields it
  reads must be declared in ``function_fields`` so the decoder decodes them.

Whatever the mode, the result must be a valid name (``core/protocol/naming.py``: a dataset is letters,
digits and underscores; a table has no dots, slashes or whitespace) or the message is
``unroutable``, and must match the allow-list or it is ``destination_not_allowed``.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, NamedTuple

from kbqe_dagster.core.errors import ConfigError, DestinationNotAllowedError, UnroutableError
from kbqe_dagster.core.protocol.naming import DATASET_RE, TABLE_RE

# Verdicts per (dataset, table) are cached; a topic whose field values are garbage must not grow
# the cache without bound, so past this size new verdicts are computed but not kept.
_MAX_CACHED_VERDICTS = 10_000
_FUNCTION_SPEC_RE = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")


class RoutingMode(StrEnum):
    """How a topic's messages find their table (see the module docstring)."""

    STATIC = "static"
    FIELDS = "fields"
    SCHEMA_NAME = "schema_name"
    FUNCTION = "function"


class Destination(NamedTuple):
    """A destination table; a tuple, so it compares equal to ``(dataset, table)``."""

    dataset: str
    table: str

    def __str__(self) -> str:
        return f"{self.dataset}.{self.table}"


class RoutingInput(NamedTuple):
    """What a routing function sees of one message. Built per message on the hot path, so a
    ``NamedTuple`` (immutable, about twice as cheap to build as a frozen dataclass here)."""

    topic: str
    partition: int
    offset: int
    schema_full_name: str | None
    """The Avro record schema's ``namespace.Name`` (``None`` when not a named record)."""
    fields: Mapping[str, Any]
    """Decoded values of the declared field paths (dotted path → value)."""
    key: bytes | None = None


@dataclass(frozen=True)
class RoutingConfig:
    """How one topic's messages find their table; see the module docstring for each mode."""

    mode: RoutingMode = RoutingMode.FIELDS
    """``static`` | ``fields`` | ``schema_name`` | ``function``."""
    dataset: str | None = None
    """``static``: the dataset. ``schema_name``: a fixed dataset (instead of the namespace)."""
    table: str | None = None
    """``static``: the table."""
    dataset_field: str = "datasetName"
    """``fields``: dotted path of the field naming the dataset."""
    table_field: str = "tableName"
    """``fields``: dotted path of the field naming the table."""
    namespace_datasets: Mapping[str, str] = field(default_factory=dict)
    """``schema_name``: Avro namespace → dataset, checked before the other dataset rules."""
    function: str | None = None
    """``function``: ``"package.module:function"``."""
    function_fields: tuple[str, ...] = ()
    """``function``: the dotted field paths the function reads."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "mode", RoutingMode(self.mode))
        object.__setattr__(self, "function_fields", tuple(self.function_fields))
        problem = routing_config_problem(self)
        if problem:
            raise ValueError(problem)

    @property
    def static_destination(self) -> Destination | None:
        """The one destination of a ``static`` route, else ``None``."""
        if self.mode is RoutingMode.STATIC and self.dataset and self.table:
            return Destination(self.dataset, self.table)
        return None


def routing_config_problem(config: RoutingConfig) -> str | None:
    """What is wrong with a routing configuration, or ``None``."""
    if config.mode is RoutingMode.STATIC:
        if not config.dataset or not config.table:
            return "static routing needs both 'dataset' and 'table'"
        return name_problem(config.dataset, config.table)
    if config.mode is RoutingMode.FUNCTION:
        if not config.function or not _FUNCTION_SPEC_RE.fullmatch(config.function):
            return f"function routing needs 'package.module:name', got {config.function!r}"
    if config.dataset is not None and not is_valid_dataset(config.dataset):
        return f"dataset {config.dataset!r} must be letters, digits and underscores"
    bad = {ns: ds for ns, ds in config.namespace_datasets.items() if not is_valid_dataset(ds)}
    if bad:
        return f"namespace_datasets maps to invalid dataset names: {bad}"
    return None


def required_fields(config: RoutingConfig) -> tuple[str, ...]:
    """The dotted field paths routing reads, so the decoder decodes only those."""
    if config.mode is RoutingMode.FIELDS:
        return (config.dataset_field, config.table_field)
    if config.mode is RoutingMode.FUNCTION:
        return config.function_fields
    return ()


def is_valid_dataset(name: object) -> bool:
    return isinstance(name, str) and DATASET_RE.fullmatch(name) is not None


def is_valid_table(name: object) -> bool:
    return isinstance(name, str) and TABLE_RE.fullmatch(name) is not None


def name_problem(dataset: object, table: object) -> str | None:
    """Why ``(dataset, table)`` cannot be a destination (staging file names rely on it)."""
    if not is_valid_dataset(dataset):
        return f"dataset {dataset!r} must be a non-empty string of letters, digits, underscores"
    if not is_valid_table(table):
        return f"table {table!r} must be a non-empty string without dots, slashes, spaces or control characters"
    return None


def snake_case(name: str) -> str:
    """``PageView`` → ``page_view``, ``HTTPRequest`` → ``http_request``, ``orderV2`` →
    ``order_v2``; already snake_case names are unchanged."""
    return _CAMEL_BOUNDARY.sub("_", name).lower()


def resolve_function(spec: str) -> Callable[..., Any]:
    """Import ``"package.module:function"``; a failure is a :class:`ConfigError`."""
    module_name, _, attribute = spec.partition(":")
    try:
        target = getattr(importlib.import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise ConfigError(f"routing function {spec!r} cannot be imported: {error}") from error
    if not callable(target):
        raise ConfigError(f"routing function {spec!r} is a {type(target).__name__}, not callable")
    function: Callable[..., Any] = target
    return function


@dataclass(frozen=True)
class AllowList:
    """Destinations messages may write to: ``dataset.table`` or ``dataset.*`` patterns.

    There is no dataset wildcard: a message can never write into a dataset nobody declared."""

    patterns: tuple[str, ...]
    _wild: frozenset[str] = field(init=False, repr=False, compare=False)
    _exact: frozenset[tuple[str, str]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        patterns = tuple(self.patterns)
        problems = [problem for problem in map(allow_pattern_problem, patterns) if problem]
        if problems:
            raise ValueError("; ".join(problems))
        pairs = [tuple(p.split(".")) for p in patterns]
        object.__setattr__(self, "patterns", patterns)
        object.__setattr__(self, "_wild", frozenset(ds for ds, table in pairs if table == "*"))
        object.__setattr__(self, "_exact", frozenset(pair for pair in pairs if pair[1] != "*"))

    @property
    def datasets(self) -> frozenset[str]:
        """Every dataset the allow-list declares (for dataset creation and asset wiring)."""
        return frozenset(p.split(".")[0] for p in self.patterns)

    def allows(self, dataset: str, table: str) -> bool:
        return dataset in self._wild or (dataset, table) in self._exact


def allow_pattern_problem(pattern: object) -> str | None:
    """Why ``pattern`` is not a valid allow-list entry, or ``None``."""
    if not isinstance(pattern, str) or pattern.count(".") != 1:
        return f"allow-list entry {pattern!r} must be 'dataset.table' or 'dataset.*'"
    dataset, table = pattern.split(".")
    if not is_valid_dataset(dataset):
        return f"allow-list entry {pattern!r}: dataset {dataset!r} is not a valid dataset name"
    if table != "*" and not is_valid_table(table):
        return f"allow-list entry {pattern!r}: table {table!r} is not a valid table name"
    return None


class Router:
    """Routes one topic's messages. Built once per task; ``route`` is on the hot path."""

    def __init__(self, config: RoutingConfig, allowed: AllowList) -> None:
        self.config = config
        self.allowed = allowed
        self._function = (
            resolve_function(config.function or "") if config.mode is RoutingMode.FUNCTION else None
        )
        # (dataset, table) → Destination, or (error class, problem) to raise with a location.
        self._verdicts: dict[tuple[str, str], Destination | tuple[type, str]] = {}
        self._by_schema: dict[str | None, tuple[str | None, str | None]] = {}

    @property
    def required_fields(self) -> tuple[str, ...]:
        return required_fields(self.config)

    def route(self, message: RoutingInput) -> Destination:
        """The allowed destination of ``message``; raises :class:`UnroutableError` or
        :class:`DestinationNotAllowedError`, naming topic, partition and offset."""
        dataset, table = self._candidate(message)
        if type(dataset) is str and type(table) is str:
            key = (dataset, table)
            verdict = self._verdicts.get(key)
            if verdict is None:
                verdict = self._judge(dataset, table)
                if len(self._verdicts) < _MAX_CACHED_VERDICTS:
                    self._verdicts[key] = verdict
        else:  # missing, or not strings (possibly unhashable): never cached
            verdict = self._judge(dataset, table)
        if isinstance(verdict, Destination):
            return verdict
        error, problem = verdict
        raise error(f"{message.topic}[{message.partition}] offset {message.offset}: {problem}")

    def _candidate(self, message: RoutingInput) -> tuple[Any, Any]:
        config = self.config
        mode = config.mode
        if mode is RoutingMode.FIELDS:
            fields = message.fields
            return fields.get(config.dataset_field), fields.get(config.table_field)
        if mode is RoutingMode.STATIC:
            return config.dataset, config.table
        if mode is RoutingMode.SCHEMA_NAME:
            name = message.schema_full_name
            found = self._by_schema.get(name)
            if found is None:
                found = self._by_schema[name] = self._schema_destination(name)
            return found
        assert self._function is not None
        result = self._function(message)
        if result is None:
            return None, None
        if not isinstance(result, tuple) or len(result) != 2:
            raise UnroutableError(
                f"{message.topic}[{message.partition}] offset {message.offset}: routing function "
                f"{config.function!r} returned {result!r}, expected (dataset, table) or None"
            )
        return result

    def _schema_destination(self, full_name: str | None) -> tuple[str | None, str | None]:
        if not full_name:
            return None, None
        namespace, _, name = full_name.rpartition(".")
        dataset = self.config.namespace_datasets.get(namespace) or self.config.dataset
        if dataset is None and namespace:
            dataset = namespace.rpartition(".")[2]
        return dataset, snake_case(name)

    def _judge(self, dataset: Any, table: Any) -> Destination | tuple[type, str]:
        if dataset is None or table is None:
            return UnroutableError, self._missing(dataset, table)
        problem = name_problem(dataset, table)
        if problem:
            return UnroutableError, problem
        if self.allowed.allows(dataset, table):
            return Destination(dataset, table)
        return (
            DestinationNotAllowedError,
            f"destination {dataset}.{table} is not in the allow-list {list(self.allowed.patterns)}",
        )

    def _missing(self, dataset: Any, table: Any) -> str:
        mode = self.config.mode
        if mode is RoutingMode.FIELDS:
            absent = [
                path
                for path, value in (
                    (self.config.dataset_field, dataset),
                    (self.config.table_field, table),
                )
                if value is None
            ]
            return f"routing field(s) {', '.join(map(repr, absent))} missing or null"
        if mode is RoutingMode.SCHEMA_NAME:
            return "schema_name routing: no schema full name, or no namespace and no dataset set"
        return f"routing function {self.config.function!r} returned no destination"
