"""Topics from patterns: which Kafka topics a pipeline covers without being listed one by one.

A pipeline file may declare ``topic_patterns:`` next to (or instead of) ``topics:``. Each
pattern is a regular expression over topic names plus the settings every matching topic
gets (any key of a ``topics[]`` entry except ``name``). Given the names Kafka
holds, :func:`resolve_topics` returns the effective topic configurations, frozen, exactly as
if each discovered topic had been listed: everything downstream (the sensor, the stage job,
the definitions' assets, ``kbqe run``) reads ``PipelineConfig.topics`` and
``PipelineConfig.topic(name)`` and never needs to know a topic was discovered.

The rules, in the order they are applied to one topic name:

1. **An explicit ``topics:`` entry always wins.** A listed topic is never matched by a
   pattern, whatever the patterns say, and is never filtered as internal.
2. **Internal topics never match** unless the pattern says ``include_internal: true``
   (see :func:`internal_topics`): names starting with ``_`` (``__consumer_offsets``,
   ``__transaction_state``, ``_schemas``, ``_confluent-*``), Kafka Connect's default
   ``connect-configs``/``connect-offsets``/``connect-status``, and any ``X-configs``,
   ``X-offsets``, ``X-status`` whose three names all exist (a Connect cluster's three storage
   topics share their prefix; one ``orders-status`` alone is a business topic).
3. **The first matching pattern wins**, in file order. A pattern matches a name when its
   ``match`` matches the **whole** name (``re.fullmatch``: ``orders\\..*``, not a substring)
   and none of its ``exclude`` expressions matches the whole name. A name a pattern excludes
   can still match a later pattern.

Routing in a pattern: ``fields``, ``schema_name`` and ``function`` work as in a topic. A
``static`` route's ``table`` may contain ``{topic}``, replaced by the topic name with every
``.`` turned into ``_`` (BigQuery table names have no dots): ``table: "{topic}"`` sends
``shop.orders`` to ``shop_orders``, ``table: "raw_{topic}"`` to ``raw_shop_orders``. The
dataset is always literal, so a pattern can never write into a dataset nobody declared; the
table each discovered topic resolves to is implicitly allowed, like a listed static route's.
A keyed pattern (``format: debezium``, ``keyed:``, ``table: "{topic}"``) makes each matching
topic a keyed destination of its own: one entry onboards every table of a Debezium connector.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.config.topics import TopicConfig
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.keyed.contract import CHANGELOG_SUFFIX

TOPIC_PLACEHOLDER = "{topic}"
"""Replaced in a pattern's static ``routing.table`` by the topic name, dots → underscores."""

CONNECT_DEFAULT_TOPICS = frozenset({"connect-configs", "connect-offsets", "connect-status"})
"""Kafka Connect's default storage topics (``config.storage.topic`` and its siblings)."""
CONNECT_SUFFIXES = ("-configs", "-offsets", "-status")


def table_for(template: str, topic: str) -> str:
    """The table a static ``table`` template names for ``topic``."""
    return template.replace(TOPIC_PLACEHOLDER, topic.replace(".", "_"))


def template_problem(template: str) -> str | None:
    """Why ``template`` is not a valid table template, or None: ``{topic}`` is the one
    placeholder, and braces are for nothing else."""
    try:
        fields = [
            (name, spec, conv)
            for _, name, spec, conv in string.Formatter().parse(template)
            if name is not None
        ]
    except ValueError as error:
        return f"not a valid table template: {error}"
    unknown = sorted({name for name, _, _ in fields if name != "topic"})
    if unknown:
        return (
            f"unknown placeholder {{{unknown[0]}}}; the only placeholder is {TOPIC_PLACEHOLDER}"
            " (the topic name with dots as underscores)"
        )
    if any(spec or conv for _, spec, conv in fields):
        return f"{TOPIC_PLACEHOLDER} takes no format spec or conversion"
    return None


def regex_problem(expression: str) -> str | None:
    """Why ``expression`` is not a valid regular expression, or None."""
    try:
        re.compile(expression)
    except re.error as error:
        return f"not a valid regular expression: {error}"
    return None


def internal_topics(names: Iterable[str]) -> frozenset[str]:
    """Which of ``names`` are a cluster's own topics rather than data (rule 2 above)."""
    names = frozenset(names)
    internal = {n for n in names if n.startswith("_") or n in CONNECT_DEFAULT_TOPICS}
    for name in names:
        if name.endswith(CONNECT_SUFFIXES[0]):
            prefix = name[: -len(CONNECT_SUFFIXES[0])]
            triple = {prefix + suffix for suffix in CONNECT_SUFFIXES}
            if prefix and triple <= names:
                internal |= triple
    return frozenset(internal)


@dataclass(frozen=True)
class TopicPattern:
    """One ``topic_patterns[]`` entry, validated."""

    index: int
    """Its position in the file (``topic_patterns[index]``), for messages."""
    match: str
    """Regular expression a topic name must match as a whole."""
    prototype: TopicConfig
    """The settings every matching topic gets; its ``name`` is a placeholder."""
    exclude: tuple[str, ...] = ()
    """Regular expressions of names this pattern does not take (whole-name matches)."""
    include_internal: bool = False
    """Whether internal topics (``_*``, Connect's storage topics) may match."""
    table_template: str | None = None
    """A static route's ``table`` holding ``{topic}``, or None (the table is literal)."""
    _match_re: re.Pattern[str] = field(init=False, repr=False, compare=False)
    _exclude_re: tuple[re.Pattern[str], ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_match_re", re.compile(self.match))
        object.__setattr__(self, "_exclude_re", tuple(re.compile(e) for e in self.exclude))

    @property
    def where(self) -> str:
        return f"topic_patterns[{self.index}]"

    def matches(self, name: str, internal: bool = False) -> bool:
        """Whether this pattern takes topic ``name`` (``internal``: the name is internal)."""
        if internal and not self.include_internal:
            return False
        if not self._match_re.fullmatch(name):
            return False
        return not any(e.fullmatch(name) for e in self._exclude_re)

    def makes_changelog(self, dataset: str, table: str) -> bool:
        """Whether ``dataset.table`` is the changelog of a keyed topic this pattern may take
        (for the load side, which clusters changelogs from their first load, possibly before
        any listing has seen the topic)."""
        static = self.prototype.routing.static_destination
        if self.prototype.keyed is None or static is None or static.dataset != dataset:
            return False
        if not table.endswith(CHANGELOG_SUFFIX):
            return False
        current = table[: -len(CHANGELOG_SUFFIX)]
        if self.table_template is None:
            return current == static.table
        # What {topic} becomes: a topic name's characters, its dots turned into underscores.
        parts = (re.escape(part) for part in self.table_template.split(TOPIC_PLACEHOLDER))
        return re.fullmatch("[A-Za-z0-9_-]+".join(parts), current) is not None

    def topic_config(self, name: str) -> TopicConfig:
        """The configuration of topic ``name`` under this pattern."""
        routing = self.prototype.routing
        if self.table_template is not None:
            table = table_for(self.table_template, name)
            try:
                routing = replace(routing, table=table)
            except ValueError as error:
                raise ConfigError(
                    f"topic {name!r}: {self.where}.routing.table makes table {table!r}: {error}"
                ) from error
        return replace(self.prototype, name=name, routing=routing, pattern=self.match)


def pattern_for(
    patterns: Iterable[TopicPattern], name: str, internal: bool = False
) -> TopicPattern | None:
    """The first pattern that takes ``name``, or None."""
    return next((p for p in patterns if p.matches(name, internal)), None)


def resolve_topics(
    listed: Iterable[TopicConfig], patterns: Iterable[TopicPattern], names: Iterable[str]
) -> tuple[TopicConfig, ...]:
    """The effective topics: every listed topic (in file order), then each name of ``names``
    that a pattern takes and no listed topic names (sorted by name), under its first pattern."""
    listed = tuple(listed)
    patterns = tuple(patterns)
    names = frozenset(names)
    explicit = {t.name for t in listed}
    internal = internal_topics(names)
    found = []
    for name in sorted(names - explicit):
        pattern = pattern_for(patterns, name, name in internal)
        if pattern is not None:
            found.append(pattern.topic_config(name))
    return listed + tuple(found)


# --- reading topic_patterns[] from the pipeline file -----------------------------------------
PATTERN_OWN_KEYS = ("match", "exclude", "include_internal")
_PROTOTYPE_NAME = "kbqe.topic.pattern"
"""The name a pattern's settings are validated under (any legal topic name would do)."""
_REGEX = r.checked(r.string, regex_problem)
_OWN_SPEC = {"match": _REGEX, "exclude": r.list_of(_REGEX), "include_internal": r.boolean}


def read_topic_patterns(
    raw: Any, topic_keys: tuple[str, ...], dead_letter_dataset: str, problems: r.Problems, *,
    build_topic: Callable[[Mapping[str, Any], str], TopicConfig | None],
) -> tuple[TopicPattern, ...]:  # fmt: skip
    """``topic_patterns:`` validated. Each pattern's topic settings (``topic_keys`` but
    ``name``) are validated by ``build_topic`` (config.py's own topic reader) as
    a topic of a placeholder name, so every topic rule and every key path is the topics' own,
    under ``topic_patterns[i]``."""
    if raw is None:
        return ()
    if not isinstance(raw, list) or not raw:
        problems.add("topic_patterns", f"expected a list of patterns, got {r.describe(raw)}")
        return ()
    settings_keys = tuple(k for k in topic_keys if k != "name")
    patterns = []
    for index, item in enumerate(raw):
        pattern = _read_pattern(
            item, index, settings_keys, dead_letter_dataset, problems, build_topic
        )
        if pattern is not None:
            patterns.append(pattern)
    return tuple(patterns)


def _read_pattern(
    raw: Any, index: int, settings_keys: tuple[str, ...], dead_letter_dataset: str,
    problems: r.Problems, build_topic: Callable[[Mapping[str, Any], str], TopicConfig | None],
) -> TopicPattern | None:  # fmt: skip
    path = f"topic_patterns[{index}]"
    before = len(problems.items)
    keys = PATTERN_OWN_KEYS + settings_keys
    section = r.read_section(raw, path, {k: _identity for k in keys}, problems, required=("match",))
    own = r.read_section(
        {k: v for k, v in section.items() if k in PATTERN_OWN_KEYS}, path, _OWN_SPEC, problems
    )
    settings = {k: v for k, v in section.items() if k not in PATTERN_OWN_KEYS}
    template = _table_template(settings, path, problems)
    if template is not None:
        routing = dict(settings["routing"])
        routing["table"] = table_for(template, "topic")  # validated as a table like any other
        settings["routing"] = routing
        if routing.get("dataset") == dead_letter_dataset:
            problems.add(f"{path}.routing.dataset", "the dead-letter dataset takes no routes")
    prototype = build_topic({**settings, "name": _PROTOTYPE_NAME}, path)
    if prototype is None or "match" not in own or len(problems.items) > before:
        return None
    return TopicPattern(
        index,
        own["match"],
        prototype,
        own.get("exclude", ()),
        own.get("include_internal", False),
        template,
    )


def _identity(value: Any) -> Any:
    return value


def _table_template(settings: Mapping[str, Any], path: str, problems: r.Problems) -> str | None:
    """A static route's ``table`` holding ``{topic}``, checked; None for any other routing."""
    routing = settings.get("routing")
    if not isinstance(routing, Mapping) or not isinstance(routing.get("table"), str):
        return None
    table: str = routing["table"]
    if "{" not in table and "}" not in table:
        return None
    problem = template_problem(table)
    if problem:
        problems.add(f"{path}.routing.table", problem)
        return None
    return table
