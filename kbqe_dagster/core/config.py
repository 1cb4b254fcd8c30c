"""The pipeline configuration: one YAML file, validated into frozen dataclasses (DESIGN.md §6).

Connections (Kafka, registry, GCS, BigQuery, Spark) are not here: they are Dagster resources
configured from the environment. This file says *what* flows where. Layout (every key
optional unless marked; ``examples/pipeline.yaml`` is a complete example)::

    version: 1
    topics:                          # at least one topic or one topic pattern
      - name: com.acme.events        # required
        routing: {...}               # RoutingConfig keys (core/routing.py); default mode fields
        destinations: [...]          # instead of routing: several tables, each with its own
                                     # routing, transforms and projection (core/destinations.py)
        event_time: {...}            # EventTimeConfig keys (core/event_time.py)
        on_bad_input: dead_letter    # dead_letter | skip | fail
        staging: {...}               # StagingSettings keys, overriding the pipeline's
        format: avro                 # avro | debezium (change events; needs keyed) | json |
                                     # json_schema (framed JSON, registry JSON Schema) |
                                     # protobuf (framed Protobuf, registry .proto) |
                                     # decoder (with decoder: "package.module:function")
        keyed: {...}                 # KeyedConfig keys (core/keyed.py): a keyed destination
        transforms: [...]            # per-record transforms (core/transform_specs.py)
        completeness: {...}          # CompletenessSettings keys, overriding the pipeline's
    topic_patterns:                  # topics discovered in Kafka (core/discovery.py)
      - match: 'shop[.].*'           # required: a regex over the whole topic name
        exclude: ['shop[.]tmp[.].*'] # names this pattern does not take
        include_internal: false      # let internal topics (_*, Connect's) match
        routing: {mode: static, dataset: shop, table: "{topic}"}   # any topics[] key but
                                     # name; {topic}: the name, dots as underscores
    allowed_destinations: [acme_sales.*, acme_web.page_views]
    event_time: {...}                # defaults for every topic's event_time, key by key
    on_bad_input: dead_letter        # default for every topic
    staging: {...}                   # StagingSettings for every topic
    stage_runs: {max_topics_per_run: 50}   # how due topics share runs (core/stage_groups.py)
    completeness: {basis: kafka_time, lateness: 5m}   # when a DAY partition is complete
    tables:                          # per destination table (core/partitioning.py)
      acme_web.*: {partitioning: hour}   # HOUR partitions; dataset.table wins over dataset.*
    dead_letter: {dataset: kbqe_dead_letters, table: dead_letters}
    enrichment: {...}
    load: {...}
    retention: {...}
    notifications: {webhook_url: https://hooks.example/...}   # schema and table notices

Rules worth knowing: a listed topic always wins over ``topic_patterns``; otherwise the first
matching pattern does (core/discovery.py has every rule). ``event_time``, ``staging``,
``completeness`` and ``on_bad_input`` at the top level are defaults a topic overrides key by
key. A ``static`` route's table, a static destination's included, is implicitly allowed (it is
declared right there); every other destination must match ``allowed_destinations``. Routing
keys that the chosen mode does not read are errors, not silently ignored. Unknown keys are
errors with a did-you-mean; all problems are reported together in one :class:`ConfigError`.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping

import fastavro
import yaml

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.config_sections import (
    DEAD_LETTER_SPEC,
    ENRICHMENT_SPEC,
    EVENT_TIME_SPEC,
    LOAD_SPEC,
    NOTIFICATION_SPEC,
    RETENTION_SPEC,
    ROUTING_KEYS_BY_MODE,
    ROUTING_SPEC,
    STAGING_SPEC,
    BadInputPolicy,
    DeadLetterDestination,
    LoadSettings,
    NotificationSettings,
    RetentionSettings,
    StagingSettings,
    cadence_quota_verdict,
    jobs_per_table_per_day,
)
from kbqe_dagster.core.completeness import COMPLETENESS_SPEC, CompletenessSettings
from kbqe_dagster.core.decoders import resolve_decoder
from kbqe_dagster.core.destinations import (
    DestinationConfig,
    destination_config_problems,
    read_destinations,
)
from kbqe_dagster.core.discovery import (
    TopicPattern,
    internal_topics,
    pattern_for,
    read_topic_patterns,
    resolve_topics,
)
from kbqe_dagster.core.enrichment import EnrichmentConfig
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.event_time import EventTimeConfig
from kbqe_dagster.core.keyed import (
    DEBEZIUM_EVENT_TIME_FIELDS,
    KEYED_SPEC,
    KeyedConfig,
    SourceFormat,
    changelog_table,
)
from kbqe_dagster.core.naming import TOPIC_RE
from kbqe_dagster.core.partitioning import Partitioning, TablesConfig, read_tables
from kbqe_dagster.core.offsets import MARKER_DATASET
from kbqe_dagster.core.routing import (
    AllowList,
    Destination,
    Router,
    RoutingConfig,
    RoutingMode,
    allow_pattern_problem,
    required_fields,
    resolve_function,
)
from kbqe_dagster.core.stage_groups import STAGE_RUNS_SPEC, StageRunSettings
from kbqe_dagster.core.transform_specs import TransformSpec, read_transforms
from kbqe_dagster.core.transforms import transform_config_problems

__all__ = [
    "BadInputPolicy",
    "DeadLetterDestination",
    "EnrichmentConfig",
    "LoadSettings",
    "PipelineConfig",
    "RetentionSettings",
    "StagingSettings",
    "TopicConfig",
    "TopicPattern",
    "jobs_per_table_per_day",
    "load_pipeline_config",
    "parse_pipeline_config",
    "parse_pipeline_text",
]

log = logging.getLogger(__name__)

CONFIG_VERSION = 1
_TOP_KEYS = (
    "version", "topics", "topic_patterns", "allowed_destinations", "event_time", "on_bad_input",
    "staging", "dead_letter", "enrichment", "load", "retention", "notifications", "completeness",
    "tables", "stage_runs",
)  # fmt: skip
_TOPIC_KEYS = (
    "name", "format", "schema", "decoder", "routing", "event_time", "on_bad_input", "staging",
    "keyed", "transforms", "completeness", "destinations",
)  # fmt: skip
# A pattern's topics would all write the same destination tables; list such topics instead.
_PATTERN_TOPIC_KEYS = tuple(k for k in _TOPIC_KEYS if k != "destinations")


@dataclass(frozen=True)
class TopicConfig:
    """Everything decided for one source topic, defaults already applied."""

    name: str
    """The Kafka topic (dots allowed)."""
    routing: RoutingConfig
    """Where its messages go; default: ``fields`` mode on ``datasetName``/``tableName``. With
    ``destinations``, the first destination's routing (each destination routes its own
    records; see :attr:`destinations`)."""
    event_time: EventTimeConfig
    """How a record's event date is found; needs fields or the Kafka timestamp fallback."""
    on_bad_input: BadInputPolicy = BadInputPolicy.DEAD_LETTER
    """What happens to messages that cannot be staged. Default ``dead_letter``."""
    staging: StagingSettings = field(default_factory=StagingSettings)
    """Stage-run knobs: the pipeline's ``staging:`` with this topic's overrides applied."""
    format: SourceFormat = SourceFormat.AVRO
    """How message values are laid out (``avro`` records, or ``debezium`` change events)."""
    keyed: KeyedConfig | None = None
    """Set for a keyed topic: its destination is a changelog, a current-state table and
    optionally a history (see core/keyed.py); None for an append-only topic."""
    value_schema: Mapping[str, Any] | None = None
    """``format: json``: the Avro record schema its values are staged under (core/formats.py)."""
    transforms: tuple[TransformSpec, ...] = ()
    """Per-record transforms, in order, applied before routing, event time and enrichment
    (core/transform_specs.py, core/transforms.py); empty: records are staged as they come."""
    decoder: str | None = None
    """``format: decoder``: the user decoder ``"package.module:function"`` that turns each
    message into an Avro record and its schema (core/decoders.py); checked importable when
    the file is read."""
    pattern: str | None = None
    """The ``topic_patterns[].match`` that discovered this topic; None for a listed topic."""
    completeness: CompletenessSettings = field(default_factory=CompletenessSettings)
    """When its partitions count as caught up to a day: the pipeline's ``completeness:`` with
    this topic's overrides applied (core/completeness.py)."""
    destinations: tuple[DestinationConfig, ...] = ()
    """Several tables per message, each with its own routing, transforms and projection
    (core/destinations.py); instead of ``routing``. Empty: the topic's ``routing`` alone."""

    @property
    def static_destinations(self) -> tuple[Destination, ...]:
        """Every table this topic's static routes name: its routing's, or each of its
        destinations' (those are implicitly allowed)."""
        routings = [d.routing for d in self.destinations] or [self.routing]
        return tuple(d for routing in routings if (d := routing.static_destination))

    @property
    def required_fields(self) -> tuple[str, ...]:
        """Field paths the decoder must decode: routing's, then event time's, no duplicates."""
        return tuple(dict.fromkeys(required_fields(self.routing) + self.event_time.fields))


@dataclass(frozen=True)
class PipelineConfig:
    """The validated pipeline file."""

    topics: tuple[TopicConfig, ...]
    """Source topics: the listed ones in file order, then (after :meth:`discover`) the topics
    found in Kafka by ``topic_patterns``, by name. At least one topic or one pattern."""
    allowed_destinations: AllowList
    """Explicit ``allowed_destinations`` plus every static route's table. Default: empty."""
    dead_letter: DeadLetterDestination = field(default_factory=DeadLetterDestination)
    """The dead-letter table. Default ``kbqe_dead_letters.dead_letters``."""
    enrichment: EnrichmentConfig = field(default_factory=EnrichmentConfig)
    """Columns added to every record (core/enrichment.py documents each and its default)."""
    load: LoadSettings = field(default_factory=LoadSettings)
    """The BigQuery load coordinator's settings."""
    retention: RetentionSettings = field(default_factory=RetentionSettings)
    """Staging-area housekeeping."""
    notifications: NotificationSettings = field(default_factory=NotificationSettings)
    """Where schema and table notices are posted (besides Dagster and the log)."""
    source: str = "<config>"
    """Where the configuration was read from, for messages."""
    warnings: tuple[str, ...] = ()
    """Accepted but risky settings (also logged once when parsed)."""
    topic_patterns: tuple[TopicPattern, ...] = ()
    """Topics taken from Kafka by name pattern (core/discovery.py); listed topics win."""
    tables: TablesConfig = field(default_factory=TablesConfig)
    """Per destination table (``dataset.table`` or ``dataset.*``): its partitioning, DAY by
    default or HOUR (core/partitioning.py)."""
    stage_runs: StageRunSettings = field(default_factory=StageRunSettings)
    """How due topics share stage runs (core/stage_groups.py)."""

    def partitioning(self, dataset: str, table: str) -> Partitioning:
        """The time partitioning of ``dataset.table``: DAY unless ``tables:`` says HOUR."""
        return self.tables.partitioning(dataset, table)

    def is_hourly(self, dataset: str, table: str) -> bool:
        return self.tables.is_hourly(dataset, table)

    def topic_may_write_hourly(self, topic: str) -> bool:
        """Whether any destination ``topic`` may write is HOUR-partitioned: its static table,
        or (routing that names tables per record) any HOUR table of the file at all."""
        if not self.tables.any_hourly:
            return False
        static = self.topic(topic).routing.static_destination
        return self.is_hourly(*static) if static is not None else True

    @property
    def topic_names(self) -> tuple[str, ...]:
        return tuple(topic.name for topic in self.topics)

    @property
    def changelog_tables(self) -> frozenset[tuple[str, str]]:
        """``(dataset, table)`` of every keyed topic's changelog (core/keyed.py)."""
        return frozenset(
            (d.dataset, changelog_table(d.table))
            for t in self.topics if t.keyed and (d := t.routing.static_destination)
        )

    def is_changelog_table(self, dataset: str, table: str) -> bool:
        """Whether ``dataset.table`` is a keyed topic's changelog: of a topic of
        :attr:`topics`, or of one a keyed pattern may take (a topic created since the
        topics were discovered still gets its changelog clustered from its first load)."""
        return (dataset, table) in self.changelog_tables or any(
            p.makes_changelog(dataset, table) for p in self.topic_patterns)

    def topic(self, name: str) -> TopicConfig:
        """The configuration of topic ``name``: listed or discovered, else resolved through
        ``topic_patterns`` — so a stage run of a topic created after this configuration was
        discovered still finds its settings."""
        for topic in self.topics:
            if topic.name == name:
                return topic
        pattern = pattern_for(self.topic_patterns, name, name in internal_topics([name]))
        if pattern is not None:
            return pattern.topic_config(name)
        patterns = " and matches no topic_patterns" if self.topic_patterns else ""
        raise ConfigError(f"{self.source}: topic {name!r} is not configured{patterns}")

    def key_path(self, name: str) -> str:
        """Where topic ``name``'s settings are in the file, for messages: ``topics[i]`` for a
        listed topic, ``topic_patterns[j]`` for one a pattern takes (discovered or not)."""
        for i, topic in enumerate(self.topics):
            if topic.name == name and topic.pattern is None:
                return f"topics[{i}]"
        pattern = pattern_for(self.topic_patterns, name, name in internal_topics([name]))
        if pattern is not None:
            return f"topic_patterns[{pattern.index}]"
        raise ConfigError(f"{self.source}: topic {name!r} is not configured")

    def discover(self, names: Iterable[str]) -> PipelineConfig:
        """This configuration with the topics of ``names`` (the topics Kafka holds) that
        ``topic_patterns`` take added to :attr:`topics`, and their static tables to the
        allow-list (a pattern's static route is declared right there, like a listed one's).
        Apply it to a configuration as parsed; without patterns it returns ``self``."""
        if not self.topic_patterns:
            return self
        listed = tuple(t for t in self.topics if t.pattern is None)
        topics = resolve_topics(listed, self.topic_patterns, names)
        found = [(t, d) for t in topics
                 if t.pattern is not None and (d := t.routing.static_destination)]
        statics = tuple(f"{d.dataset}.{d.table}" for _, d in found)
        # A keyed topic's loads go to its changelog table, declared with it (as in parsing).
        statics += tuple(f"{d.dataset}.{changelog_table(d.table)}" for t, d in found if t.keyed)
        allowed = AllowList(tuple(dict.fromkeys(self.allowed_destinations.patterns + statics)))
        return replace(self, topics=topics, allowed_destinations=allowed)

    def router(self, topic: str) -> Router:
        """A router for ``topic`` (imports a routing function, so build once per task)."""
        config = self.topic(topic)
        allowed = self.allowed_destinations
        static = config.routing.static_destination
        if static is not None and not allowed.allows(static.dataset, static.table):
            # A topic resolved through a pattern, not discovered yet: its static table is
            # declared by the pattern, as discover() would have allowed it.
            allowed = AllowList(allowed.patterns + (f"{static.dataset}.{static.table}",))
        return Router(config.routing, allowed)


def load_pipeline_config(path: str | Path) -> PipelineConfig:
    """Read and validate the pipeline YAML file at ``path``."""
    source = str(path)
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as error:
        raise ConfigError(f"{source}: cannot read the pipeline configuration: {error}") from error
    return parse_pipeline_text(text, source=source)


def parse_pipeline_text(text: str, source: str = "<config>") -> PipelineConfig:
    """Validate the text of a pipeline YAML file."""
    try:
        raw = yaml.safe_load(text)
    except yaml.YAMLError as error:
        raise ConfigError(f"{source}: not valid YAML: {error}") from error
    return parse_pipeline_config(raw, source=source)


def parse_pipeline_config(raw: Any, source: str = "<config>") -> PipelineConfig:
    """Validate a parsed YAML document; raises one :class:`ConfigError` listing every problem."""
    problems = r.Problems()
    top = r.read_section(raw, "", {key: _identity for key in _TOP_KEYS}, problems)
    if "version" in top and top["version"] != CONFIG_VERSION:
        problems.add("version", f"expected {CONFIG_VERSION}, got {r.describe(top['version'])}")
    allowed = _allow_list(top, problems)
    defaults = _TopicDefaults(
        event_time=r.read_section(top.get("event_time"), "event_time", EVENT_TIME_SPEC, problems),
        on_bad_input=_read_value(
            top, "on_bad_input", _POLICY, BadInputPolicy.DEAD_LETTER, problems
        ),
        staging=_build(StagingSettings(), top.get("staging"), "staging", STAGING_SPEC, problems),
        completeness=_build(
            CompletenessSettings(), top.get("completeness"), "completeness", COMPLETENESS_SPEC,
            problems,
        ),
        base_dir=Path(source).parent if source != "<config>" else None,
    )
    dead_letter = _build(
        DeadLetterDestination(), top.get("dead_letter"), "dead_letter", DEAD_LETTER_SPEC, problems
    )
    patterns = read_topic_patterns(
        top.get("topic_patterns"), _PATTERN_TOPIC_KEYS, dead_letter.dataset, problems,
        build_topic=lambda section, path: _topic(section, path, defaults, allowed, problems),
    )
    topics = _topics(top.get("topics"), defaults, allowed, dead_letter, problems,
                     required=not patterns and "topic_patterns" not in top)
    enrichment = _build(
        EnrichmentConfig(), top.get("enrichment"), "enrichment", ENRICHMENT_SPEC, problems
    )
    load = _build(LoadSettings(), top.get("load"), "load", LOAD_SPEC, problems)
    retention = _build(
        RetentionSettings(), top.get("retention"), "retention", RETENTION_SPEC, problems
    )
    notifications = _build(
        NotificationSettings(), top.get("notifications"), "notifications", NOTIFICATION_SPEC,
        problems,
    )
    tables = read_tables(top.get("tables"), problems)
    _check_tables(tables, allowed, topics, patterns, dead_letter, problems)
    stage_runs = _build(
        StageRunSettings(), top.get("stage_runs"), "stage_runs", STAGE_RUNS_SPEC, problems
    )
    if allowed.allows(dead_letter.dataset, dead_letter.table):
        problems.add(
            "allowed_destinations",
            f"covers the dead-letter table {dead_letter.dataset}.{dead_letter.table}: "
            "messages must not be routed into it",
        )
    error, warning = cadence_quota_verdict(load.cadence)
    if error:
        problems.add("load.cadence", error)
    warnings = (f"load.cadence {warning}",) if warning else ()
    if problems:
        listed = "\n".join(f"  - {item}" for item in problems.items)
        raise ConfigError(f"{source}: {len(problems.items)} problem(s):\n{listed}")
    statics = tuple(f"{d.dataset}.{d.table}" for t in topics for d in t.static_destinations)
    # A keyed topic's loads go to its changelog table (core/keyed.py), declared with it.
    statics += tuple(
        f"{d.dataset}.{changelog_table(d.table)}"
        for t in topics if t.keyed and (d := t.routing.static_destination)
    )
    for warning in warnings:
        log.warning("%s: %s", source, warning)
    return PipelineConfig(
        topics=topics,
        allowed_destinations=AllowList(tuple(dict.fromkeys(allowed.patterns + statics))),
        dead_letter=dead_letter,
        enrichment=enrichment,
        load=load,
        retention=retention,
        notifications=notifications,
        source=source,
        warnings=warnings,
        topic_patterns=patterns,
        tables=tables,
        stage_runs=stage_runs,
    )


def _check_tables(
    tables: TablesConfig, allowed: AllowList, topics: tuple[TopicConfig, ...],
    patterns: tuple[TopicPattern, ...], dead_letter: DeadLetterDestination, problems: r.Problems,
) -> None:  # fmt: skip
    """Every ``tables:`` key names a destination the pipeline writes, and no HOUR key covers
    a table that must stay DAY (the dead letters; keyed topics' tables)."""
    # Static routes declare their tables: (dataset, table) -> (who, keyed); a pattern's
    # templated table may be any table of its dataset.
    statics = {d: (repr(t.name), t.keyed is not None)
               for t in topics if (d := t.routing.static_destination) is not None}
    templated: dict[str, tuple[str, bool]] = {}
    for p in patterns:
        if (d := p.prototype.routing.static_destination) is None:
            continue
        who = (p.where, p.prototype.keyed is not None)
        if p.table_template is None:
            statics.setdefault(d, who)
        else:
            templated.setdefault(d.dataset, who)
    wild = {p.split(".")[0] for p in allowed.patterns if p.endswith(".*")}
    for key, settings in tables.settings.items():
        dataset, table = key.split(".")
        if table == "*":
            if dataset not in wild and dataset not in templated:
                problems.add(f"tables.{key}", f"dataset.* needs the allow-list entry {key!r}")
        elif not allowed.allows(dataset, table) and (dataset, table) not in statics \
                and dataset not in templated \
                and (dataset, table) != (dead_letter.dataset, dead_letter.table):
            problems.add(f"tables.{key}", "not a destination of this pipeline (not in "
                         "allowed_destinations and no static route names it)")
        if settings.partitioning is not Partitioning.HOUR:
            continue
        if dataset == dead_letter.dataset and table in ("*", dead_letter.table):
            problems.add(f"tables.{key}.partitioning", "the dead-letter table is DAY-partitioned "
                         "on its staging date")
        keyed = [who for (ds, tb), (who, is_keyed) in statics.items()
                 if is_keyed and ds == dataset and table in ("*", tb, changelog_table(tb))]
        if templated.get(dataset, ("", False))[1]:
            keyed.append(templated[dataset][0])
        for who in keyed[:1]:
            problems.add(f"tables.{key}.partitioning", f"covers the tables of keyed topic {who}: "
                         "keyed tables are DAY-partitioned (the MERGE prunes by date)")


# --- sections ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class _TopicDefaults:
    event_time: dict[str, Any]
    on_bad_input: BadInputPolicy
    staging: StagingSettings
    completeness: CompletenessSettings = field(default_factory=CompletenessSettings)
    base_dir: Path | None = None
    """Where relative ``schema:`` file paths are read from: the pipeline file's folder."""


_POLICY = r.choice(BadInputPolicy)


def _identity(value: Any) -> Any:
    return value


def _read_value(
    section: Mapping[str, Any], key: str, convert: r.Converter, default: Any, problems: r.Problems,
    path: str = "",
) -> Any:  # fmt: skip
    if key not in section:
        return default
    try:
        return convert(section[key])
    except r.Invalid as error:
        problems.add(r.join(path, key) + error.subpath, str(error))
        return default


def _build(
    base: Any, raw: Any, path: str, spec: Mapping[str, r.Converter], problems: r.Problems
) -> Any:
    """``base`` with the valid keys of ``raw`` applied; cross-field errors land on ``path``."""
    before = len(problems.items)
    values = r.read_section(raw, path, spec, problems)
    if len(problems.items) > before:
        return base  # cross-field checks on a half-read section would only add noise
    try:
        return replace(base, **values)
    except (ValueError, TypeError, ConfigError) as error:
        problems.add(path, str(error).removeprefix(f"{path}: "))
        return base


_PATTERNS = r.list_of(r.checked(r.string, allow_pattern_problem))


def _allow_list(top: Mapping[str, Any], problems: r.Problems) -> AllowList:
    patterns = _read_value(top, "allowed_destinations", _PATTERNS, (), problems)
    if any(p.split(".")[0] == MARKER_DATASET for p in patterns):
        problems.add("allowed_destinations", f"dataset {MARKER_DATASET!r} is reserved for markers")
    return AllowList(patterns)


def _topics(
    raw: Any, defaults: _TopicDefaults, allowed: AllowList, dead_letter: DeadLetterDestination,
    problems: r.Problems, required: bool = True,
) -> tuple[TopicConfig, ...]:
    if raw is None and not required:
        return ()  # topic_patterns declare the topics
    if not isinstance(raw, list) or (required and not raw):
        problems.add("topics", f"expected a list of at least one topic, got {r.describe(raw)}")
        return ()
    topics: list[TopicConfig] = []
    seen: dict[str, int] = {}
    for index, item in enumerate(raw):
        path = f"topics[{index}]"
        topic = _topic(item, path, defaults, allowed, problems)
        static = topic.routing.static_destination if topic else None
        if topic and topic.keyed and static == (dead_letter.dataset, dead_letter.table):
            problems.add(f"{path}.keyed", "not allowed on the dead-letter table")
        if topic is None:
            continue
        if topic.name in seen:
            problems.add(f"{path}.name", f"duplicate of topics[{seen[topic.name]}]")
        seen.setdefault(topic.name, index)
        topics.append(topic)
    return tuple(topics)


_TOPIC_NAME = r.checked(
    r.string, lambda name: None if TOPIC_RE.fullmatch(name) else "not a legal Kafka topic name"
)


def _topic(
    raw: Any, path: str, defaults: _TopicDefaults, allowed: AllowList, problems: r.Problems
) -> TopicConfig | None:
    spec = {key: _identity for key in _TOPIC_KEYS}
    section = r.read_section(raw, path, spec, problems, required=("name",))
    name = _read_value(section, "name", _TOPIC_NAME, None, problems, path)
    source_format = _read_value(section, "format", _FORMAT, SourceFormat.AVRO, problems, path)
    routing = _routing(section.get("routing"), f"{path}.routing", allowed, problems)
    event_time = _event_time(
        section.get("event_time"), f"{path}.event_time", defaults, problems,
        default_fields=DEBEZIUM_EVENT_TIME_FIELDS if source_format is SourceFormat.DEBEZIUM else (),
    )
    policy = _read_value(section, "on_bad_input", _POLICY, defaults.on_bad_input, problems, path)
    staging = _build(
        defaults.staging, section.get("staging"), f"{path}.staging", STAGING_SPEC, problems
    )
    keyed = _keyed(section, path, source_format, routing, problems)
    value_schema = _value_schema(section, path, source_format, defaults.base_dir, problems)
    decoder = _decoder(section, path, source_format, problems)
    if source_format in (SourceFormat.JSON, SourceFormat.JSON_SCHEMA, SourceFormat.PROTOBUF,
                         SourceFormat.DECODER) and "keyed" in section:
        problems.add(f"{path}.keyed", f"not with format: {source_format.value} (keyed topics "
                     "are avro or debezium)")
    transforms = read_transforms(section.get("transforms"), f"{path}.transforms", problems)
    if transforms and "keyed" in section:
        problems.add(f"{path}.transforms", "not with keyed: (a keyed topic's changelog is cut "
                     "from the message as it is)")
    destinations = _destinations(section, path, allowed, problems)
    if destinations:
        routing = destinations[0].routing
        for where, message in destination_config_problems(transforms, destinations, value_schema):
            problems.add(f"{path}.{where}", message)
    elif transforms and routing is not None:
        for where, message in transform_config_problems(transforms, routing, value_schema):
            problems.add(f"{path}.transforms{where}", message)
    if name is None or routing is None or event_time is None or destinations is None:
        return None
    completeness = _build(
        defaults.completeness, section.get("completeness"), f"{path}.completeness",
        COMPLETENESS_SPEC, problems,
    )
    return TopicConfig(name, routing, event_time, policy, staging, source_format, keyed,
                       value_schema, transforms=transforms, decoder=decoder,
                       completeness=completeness, destinations=destinations)


def _destinations(
    section: Mapping[str, Any], path: str, allowed: AllowList, problems: r.Problems,
) -> tuple[DestinationConfig, ...] | None:  # fmt: skip
    """``destinations:`` with the rules that involve the rest of the topic; ``()`` when there
    is none, None when it is invalid."""
    if "destinations" not in section:
        return ()
    key = f"{path}.destinations"
    if "routing" in section:
        problems.add(f"{path}.routing", "not with destinations: each destination has its own "
                     "routing (move this one into destinations)")
    if "keyed" in section:
        problems.add(key, "not with keyed: (a keyed topic's one destination is its changelog, "
                     "current state and history)")
    return read_destinations(
        section["destinations"], key, problems,
        lambda raw, where: _routing(raw, where, allowed, problems),
    )


def _decoder(
    section: Mapping[str, Any], path: str, source_format: SourceFormat, problems: r.Problems,
) -> str | None:  # fmt: skip
    """``decoder:`` of a ``format: decoder`` topic, imported now so that a typo or a missing
    module is a configuration error, not a stage run failing at its first message."""
    key = f"{path}.decoder"
    if "decoder" not in section:
        if source_format is SourceFormat.DECODER:
            problems.add(key, "required with format: decoder: 'package.module:function'")
        return None
    if source_format is not SourceFormat.DECODER:
        problems.add(key, "only with format: decoder")
        return None
    try:
        resolve_decoder(section["decoder"])
    except ConfigError as error:
        problems.add(key, str(error))
        return None
    return section["decoder"]


def _value_schema(
    section: Mapping[str, Any], path: str, source_format: SourceFormat, base_dir: Path | None,
    problems: r.Problems,
) -> Mapping[str, Any] | None:  # fmt: skip
    """``schema:``, the Avro record of a ``format: json`` topic: inline, or a file path
    (relative to the pipeline file). Parsed here, so a bad schema is a config error."""
    key = f"{path}.schema"
    if "schema" not in section:
        if source_format is SourceFormat.JSON:
            problems.add(key, "required with format: json: the Avro record schema of the values")
        return None
    if source_format is not SourceFormat.JSON:
        problems.add(key, "only with format: json (avro and debezium take their schema from "
                     "the registry; a decoder returns its own)")
        return None
    raw = section["schema"]
    if isinstance(raw, str):
        file = Path(raw) if base_dir is None or Path(raw).is_absolute() else base_dir / raw
        try:
            raw = json.loads(file.read_text(encoding="utf-8"))
        except (OSError, ValueError) as error:
            problems.add(key, f"cannot read an Avro schema from {file}: {error}")
            return None
    if not isinstance(raw, Mapping) or raw.get("type") != "record":
        problems.add(key, f"expected an Avro record schema, got {r.describe(raw)}")
        return None
    try:
        fastavro.parse_schema(dict(raw), _write_hint=False)
    except Exception as error:  # noqa: BLE001 - fastavro raises several types for a bad schema
        problems.add(key, f"not a valid Avro schema: {error}")
        return None
    return dict(raw)


_FORMAT = r.choice(SourceFormat)


def _keyed(
    section: Mapping[str, Any], path: str, source_format: SourceFormat,
    routing: RoutingConfig | None, problems: r.Problems,
) -> KeyedConfig | None:  # fmt: skip
    """The topic's ``keyed:`` section, with the rules that involve the rest of the topic. The
    rules that need the record schema (key and version fields exist, the version is orderable)
    are checked when the first record of a schema is staged, naming the same key paths."""
    debezium = source_format is SourceFormat.DEBEZIUM
    if "keyed" not in section:
        if debezium:
            problems.add(
                f"{path}.format",
                "debezium needs a keyed: section (it lands as changelog, current state and "
                "history); use format: avro to append the change envelopes as they are",
            )
        return None
    keyed_path = f"{path}.keyed"
    before = len(problems.items)
    values = r.read_section(section["keyed"], keyed_path, KEYED_SPEC, problems)
    if debezium:
        for key in ("version", "delete_field"):
            if key in values:
                problems.add(f"{keyed_path}.{key}", "not used with format: debezium: the "
                             "change's source.ts_ms is the version and op 'd' the delete")
    else:
        if "key" not in values:
            problems.add(f"{keyed_path}.key", "required unless format: debezium (whose default "
                         "is the fields of the Kafka key's schema)")
        if "version" not in values:
            problems.add(f"{keyed_path}.version", "required unless format: debezium: the field "
                         "(timestamp or long) that orders a key's versions")
    if routing is not None and routing.static_destination is None:
        problems.add(f"{path}.routing", "a keyed topic needs routing mode static: its "
                     "destination is one changelog, one current-state table and one history")
    if len(problems.items) > before:
        return None
    return KeyedConfig(**values)


def _routing(
    raw: Any, path: str, allowed: AllowList, problems: r.Problems
) -> RoutingConfig | None:
    before = len(problems.items)
    values = r.read_section(raw, path, ROUTING_SPEC, problems)
    if isinstance(raw, Mapping) and "mode" in raw and "mode" not in values:
        return None  # the bad mode is reported; judging the other keys against a guess misleads
    mode = values.get("mode", RoutingMode.FIELDS)
    for key in sorted(values.keys() - {"mode"} - ROUTING_KEYS_BY_MODE[mode]):
        problems.add(f"{path}.{key}", f"not used by routing mode {mode.value}")
    if len(problems.items) > before:
        return None
    try:
        config = RoutingConfig(**values)
    except ValueError as error:
        problems.add(path, str(error))
        return None
    if mode is RoutingMode.FUNCTION and config.function:
        try:
            resolve_function(config.function)
        except ConfigError as error:
            problems.add(f"{path}.function", str(error))
    if mode is RoutingMode.SCHEMA_NAME:
        named = [("dataset", config.dataset)] + [
            (f"namespace_datasets.{ns}", ds) for ns, ds in config.namespace_datasets.items()
        ]
        for key, dataset in named:
            if dataset is not None and dataset not in allowed.datasets:
                problems.add(f"{path}.{key}", f"dataset {dataset!r} is not in allowed_destinations")
    return config


def _event_time(
    raw: Any, path: str, defaults: _TopicDefaults, problems: r.Problems,
    default_fields: tuple[str, ...] = (),
) -> EventTimeConfig | None:  # fmt: skip
    """``default_fields`` (a format's own, e.g. Debezium's ``source.ts_ms``) win over the
    top-level default fields, which describe append topics' records; the topic's own win over
    both."""
    before = len(problems.items)
    own = r.read_section(raw, path, EVENT_TIME_SPEC, problems)
    values = {**defaults.event_time, **own}
    if default_fields and "fields" not in own:
        values["fields"] = default_fields
    if len(problems.items) > before:
        return None
    try:
        config = EventTimeConfig(**values)
    except ValueError as error:
        problems.add(path, str(error))
        return None
    if not config.fields and not config.kafka_timestamp_fallback:
        problems.add(path, "needs at least one field or kafka_timestamp_fallback: true")
    return config
