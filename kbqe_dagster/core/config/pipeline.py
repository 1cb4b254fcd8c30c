"""The pipeline configuration: one YAML file, validated into frozen dataclasses (DESIGN.md §6).

Connections (Kafka, registry, GCS, BigQuery, Spark) are not here: they are Dagster resources
configured from the environment. This file says *what* flows where. Layout (every key
optional unless marked; ``examples/pipeline.yaml`` is a complete example)::

    version: 1
    topics:                          # at least one topic or one topic pattern
      - name: com.acme.events        # required
        routing: {...}               # RoutingConfig keys (core/record/routing.py); default mode fields
        destinations: [...]          # instead of routing: several tables, each with its own
                                     # routing, transforms and projection (core/transforms/destinations.py)
        event_time: {...}            # EventTimeConfig keys (core/record/event_time.py)
        on_bad_input: dead_letter    # dead_letter | skip | fail
        staging: {...}               # StagingSettings keys, overriding the pipeline's
        format: avro                 # avro | debezium (change events; needs keyed) | json |
                                     # json_schema (framed JSON, registry JSON Schema) |
                                     # protobuf (framed Protobuf, registry .proto) |
                                     # decoder (with decoder: "package.module:function")
        keyed: {...}                 # KeyedConfig keys (core/keyed/contract.py): a keyed destination
        transforms: [...]            # per-record transforms (core/transforms/specs.py)
        completeness: {...}          # CompletenessSettings keys, overriding the pipeline's
        delivery: load               # load | storage_write: for its tables tables: is silent on
    topic_patterns:                  # topics discovered in Kafka (core/config/discovery.py)
      - match: 'shop[.].*'           # required: a regex over the whole topic name
        exclude: ['shop[.]tmp[.].*'] # names this pattern does not take
        include_internal: false      # let internal topics (_*, Connect's) match
        routing: {mode: static, dataset: shop, table: "{topic}"}   # any topics[] key but
                                     # name; {topic}: the name, dots as underscores
    allowed_destinations: [acme_sales.*, acme_web.page_views]
    event_time: {...}                # defaults for every topic's event_time, key by key
    on_bad_input: dead_letter        # default for every topic
    staging: {...}                   # StagingSettings for every topic
    stage_runs: {max_topics_per_run: 50}   # how due topics share runs (core/stage_runs/groups.py)
    completeness: {basis: kafka_time, lateness: 5m}   # when a DAY partition is complete
    tables:                          # per destination table (core/record/partitioning.py)
      acme_web.*: {partitioning: hour}   # HOUR partitions; dataset.table wins over dataset.*
      acme_web.clicks: {delivery: storage_write}   # rows in seconds (Storage Write API)
    dead_letter: {dataset: kbqe_dead_letters, table: dead_letters}
    enrichment: {...}
    load: {...}
    retention: {...}
    notifications: {webhook_url: https://hooks.example/...}   # schema and table notices
    erasure: {...}                   # a data subject's rows erased across tables (core/config/erasure.py)

Rules worth knowing: a listed topic always wins over ``topic_patterns``; otherwise the first
matching pattern does (core/config/discovery.py has every rule). ``event_time``, ``staging``,
``completeness`` and ``on_bad_input`` at the top level are defaults a topic overrides key by
key. A ``static`` route's table, a static destination's included, is implicitly allowed (it is
declared right there); every other destination must match ``allowed_destinations``. Routing
keys that the chosen mode does not read are errors, not silently ignored. Unknown keys are
errors with a did-you-mean, a key repeated in one mapping an error naming both lines
(core/config/yaml_file.py); all problems are reported together in one :class:`ConfigError`.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.completeness.decision import COMPLETENESS_SPEC, CompletenessSettings
from kbqe_dagster.core.config.discovery import (
    TopicPattern,
    internal_topics,
    pattern_for,
    read_topic_patterns,
    resolve_topics,
)
from kbqe_dagster.core.config.erasure import ErasureSettings, read_erasure
from kbqe_dagster.core.config.sections import (
    DEAD_LETTER_SPEC,
    ENRICHMENT_SPEC,
    EVENT_TIME_SPEC,
    LOAD_SPEC,
    NOTIFICATION_SPEC,
    RETENTION_SPEC,
    STAGE_RUNS_SPEC,
    STAGING_SPEC,
    BadInputPolicy,
    DeadLetterDestination,
    LoadSettings,
    NotificationSettings,
    RetentionSettings,
    StageRunSettings,
    StagingSettings,
    cadence_quota_verdict,
    jobs_per_table_per_day,
)
from kbqe_dagster.core.config.table_layout import TableLayout, table_layout
from kbqe_dagster.core.config.table_option_checks import (
    check_partition_column,
    check_table_options,
)
from kbqe_dagster.core.config.topics import (
    BAD_INPUT_POLICY,
    PATTERN_TOPIC_KEYS,
    TopicConfig,
    TopicDefaults,
    read_topic,
    read_topics,
)
from kbqe_dagster.core.config.yaml_file import load_yaml
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.formats.raw_archive import raw_enrichment
from kbqe_dagster.core.formats.source_format import SourceFormat
from kbqe_dagster.core.keyed.contract import changelog_table
from kbqe_dagster.core.protocol.offsets import MARKER_DATASET
from kbqe_dagster.core.record.enrichment import EnrichmentConfig
from kbqe_dagster.core.record.partitioning import (
    Delivery,
    Partitioning,
    TablesConfig,
    TableSettings,
    read_tables,
)
from kbqe_dagster.core.record.routing import AllowList, Router, allow_pattern_problem

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
    "tables", "stage_runs", "erasure",
)  # fmt: skip


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
    """Columns added to every record (core/record/enrichment.py documents each and its default)."""
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
    """Topics taken from Kafka by name pattern (core/config/discovery.py); listed topics win."""
    tables: TablesConfig = field(default_factory=TablesConfig)
    """Per destination table (``dataset.table`` or ``dataset.*``): its partitioning (DAY by
    default, HOUR, MONTH, YEAR or none) and partition column, delivery and options
    (core/record/partitioning.py)."""
    stage_runs: StageRunSettings = field(default_factory=StageRunSettings)
    """How due topics share stage runs (core/stage_runs/groups.py)."""
    erasure: ErasureSettings = field(default_factory=ErasureSettings)
    """Which tables a data subject's rows are erased from, and where requests come from
    (core/config/erasure.py)."""

    def partitioning(self, dataset: str, table: str) -> Partitioning:
        """The time partitioning of ``dataset.table``: DAY unless ``tables:`` says otherwise."""
        return self.tables.partitioning(dataset, table)

    def is_hourly(self, dataset: str, table: str) -> bool:
        return self.tables.is_hourly(dataset, table)

    def is_dead_letter_table(self, dataset: str, table: str) -> bool:
        """Whether ``dataset.table`` is the dead-letter table (``dead_letter:``)."""
        return self.dead_letter.is_table(dataset, table)

    @property
    def raw_archive_tables(self) -> frozenset[str]:
        """``dataset.table`` of every table a ``format: raw`` topic (or pattern) routes to by a
        static route: their rows carry the Kafka key under :meth:`key_column_of`'s name even
        when ``enrichment.key_column`` is off (core/formats/raw_archive.py)."""
        return _raw_archive_tables(self.topics, self.topic_patterns)

    def key_column_of(self, dataset: str, table: str) -> str | None:
        """The column holding the Kafka key in ``dataset.table``'s rows (None: no key): the
        pipeline's ``enrichment.key_column``, or a raw archive's default name."""
        if f"{dataset}.{table}" in self.raw_archive_tables:
            return raw_enrichment(self.enrichment).key_column
        return self.enrichment.key_column

    def table_layout(self, dataset: str, table: str) -> TableLayout:
        """How ``dataset.table`` is laid out in BigQuery: partitioning and its column,
        clustering, offset columns, the options kbqe keeps in step (clustering, partition
        expiration, labels, description; core/config/table_layout.py)."""
        return table_layout(
            self.enrichment,
            self.partitioning(dataset, table),
            dead_letter=self.is_dead_letter_table(dataset, table),
            changelog=self.is_changelog_table(dataset, table),
            delivery=self.delivery(dataset, table),
            all_columns_nullable=self.tables.all_columns_nullable(dataset, table),
            settings=self.tables.of(dataset, table),
            default_expiration_days=self.load.partition_expiration_days,
        )

    def delivery(self, dataset: str, table: str, topic: str | None = None) -> Delivery:
        """How ``dataset.table``'s rows reach BigQuery: its ``tables:`` entry, else the
        ``delivery`` of ``topic`` (the topic writing the rows), else of the first listed topic
        whose static route names the table, else ``load``. The dead-letter table follows its
        own entry only."""
        explicit = self.tables.delivery(dataset, table)
        if explicit is not None or self.is_dead_letter_table(dataset, table):
            return explicit or Delivery.LOAD
        if topic is not None:
            return self.topic(topic).delivery
        for t in self.topics:
            if (dataset, table) in {(d.dataset, d.table) for d in t.static_destinations}:
                return t.delivery
            static = t.routing.static_destination
            if (
                t.keyed
                and static
                and (dataset, table) == (static.dataset, changelog_table(static.table))
            ):
                return t.delivery  # a keyed topic writes its changelog
        return Delivery.LOAD

    def topic_may_deliver_by_storage_write(self, topic: str) -> bool:
        """Whether ``topic`` may write a ``storage_write`` table: then its stage runs plan one
        range per partition (a range's stream offsets follow the previous range's rows)."""
        config = self.topic(topic)
        if config.delivery is Delivery.STORAGE_WRITE:
            return True
        if not self.tables.any_storage_write:
            return False
        statics = config.static_destinations
        if not statics or config.routing.static_destination is None:
            return True  # routing names tables per record: any storage_write table may be one
        if config.keyed:  # its rows go to the changelog, never to the current table
            statics = tuple(d._replace(table=changelog_table(d.table)) for d in statics)
        return any(
            self.delivery(d.dataset, d.table, topic) is Delivery.STORAGE_WRITE for d in statics
        )

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
        """``(dataset, table)`` of every keyed topic's changelog (core/keyed/contract.py)."""
        return frozenset(
            (d.dataset, changelog_table(d.table))
            for t in self.topics
            if t.keyed and (d := t.routing.static_destination)
        )

    def is_changelog_table(self, dataset: str, table: str) -> bool:
        """Whether ``dataset.table`` is a keyed topic's changelog: of a topic of
        :attr:`topics`, or of one a keyed pattern may take (a topic created since the
        topics were discovered still gets its changelog clustered from its first load)."""
        return (dataset, table) in self.changelog_tables or any(
            p.makes_changelog(dataset, table) for p in self.topic_patterns
        )

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
        found = [
            (t, d) for t in topics if t.pattern is not None and (d := t.routing.static_destination)
        ]
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
    problems = r.Problems()
    try:
        raw = load_yaml(text, problems)  # a repeated key is a problem, not the last one wins
    except yaml.YAMLError as error:
        raise ConfigError(f"{source}: not valid YAML: {error}") from error
    return parse_pipeline_config(raw, source=source, problems=problems)


def parse_pipeline_config(
    raw: Any, source: str = "<config>", problems: r.Problems | None = None
) -> PipelineConfig:
    """Validate a parsed YAML document; raises one :class:`ConfigError` listing every problem
    (``problems``: those found while reading the text, e.g. repeated keys)."""
    problems = problems if problems is not None else r.Problems()
    top = r.read_section(raw, "", {key: r.identity for key in _TOP_KEYS}, problems)
    if "version" in top and top["version"] != CONFIG_VERSION:
        problems.add("version", f"expected {CONFIG_VERSION}, got {r.describe(top['version'])}")
    allowed = _allow_list(top, problems)
    defaults = TopicDefaults(
        event_time=r.read_section(top.get("event_time"), "event_time", EVENT_TIME_SPEC, problems),
        on_bad_input=r.read_value(
            top, "on_bad_input", BAD_INPUT_POLICY, BadInputPolicy.DEAD_LETTER, problems
        ),
        staging=r.build_section(
            StagingSettings(), top.get("staging"), "staging", STAGING_SPEC, problems
        ),
        completeness=r.build_section(
            CompletenessSettings(),
            top.get("completeness"),
            "completeness",
            COMPLETENESS_SPEC,
            problems,
        ),
        base_dir=Path(source).parent if source != "<config>" else None,
    )
    dead_letter = r.build_section(
        DeadLetterDestination(), top.get("dead_letter"), "dead_letter", DEAD_LETTER_SPEC, problems
    )
    patterns = read_topic_patterns(
        top.get("topic_patterns"),
        PATTERN_TOPIC_KEYS,
        dead_letter.dataset,
        problems,
        build_topic=lambda section, path: read_topic(section, path, defaults, allowed, problems),
    )
    topics = read_topics(
        top.get("topics"),
        defaults,
        allowed,
        dead_letter,
        problems,
        required=not patterns and "topic_patterns" not in top,
    )
    enrichment = r.build_section(
        EnrichmentConfig(), top.get("enrichment"), "enrichment", ENRICHMENT_SPEC, problems
    )
    _check_raw_enrichment(enrichment, topics, patterns, problems)
    load = r.build_section(LoadSettings(), top.get("load"), "load", LOAD_SPEC, problems)
    retention = r.build_section(
        RetentionSettings(), top.get("retention"), "retention", RETENTION_SPEC, problems
    )
    notifications = r.build_section(
        NotificationSettings(),
        top.get("notifications"),
        "notifications",
        NOTIFICATION_SPEC,
        problems,
    )
    tables = read_tables(top.get("tables"), problems)
    _check_tables(tables, allowed, topics, patterns, dead_letter, problems)
    for key, settings in tables.settings.items():
        check_table_options(
            key,
            settings,
            topics,
            enrichment,
            (dead_letter.dataset, dead_letter.table),
            settings.partitioning is Partitioning.HOUR,
            problems,
        )
        check_partition_column(key, settings, topics, enrichment, problems)
    stage_runs = r.build_section(
        StageRunSettings(), top.get("stage_runs"), "stage_runs", STAGE_RUNS_SPEC, problems
    )
    erasure = read_erasure(top.get("erasure"), problems)
    _check_erasure(erasure, allowed, topics, patterns, dead_letter, enrichment, problems)
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
        raise ConfigError(
            f"{source}: {len(problems.items)} problem(s):\n{listed}", tuple(problems.located)
        )
    statics = tuple(f"{d.dataset}.{d.table}" for t in topics for d in t.static_destinations)
    # A keyed topic's loads go to its changelog table (core/keyed/contract.py), declared with it.
    statics += tuple(
        f"{d.dataset}.{changelog_table(d.table)}"
        for t in topics
        if t.keyed and (d := t.routing.static_destination)
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
        erasure=erasure,
    )


def _check_raw_enrichment(
    enrichment: EnrichmentConfig, topics: Any, patterns: Any, problems: r.Problems
) -> None:
    """A raw topic's files turn the key, headers and timestamp columns on under their default
    names (core/formats/raw_archive.py): those must not collide with a column the pipeline
    names otherwise."""
    raw = [t.name for t in topics if t.format is SourceFormat.RAW] + [
        p.match for p in patterns if p.prototype.format is SourceFormat.RAW
    ]
    if not raw:
        return
    try:
        raw_enrichment(enrichment)
    except ConfigError as error:
        problems.add("enrichment", f"{error} (the raw columns of topic(s) {raw})")


def _check_tables(
    tables: TablesConfig, allowed: AllowList, topics: tuple[TopicConfig, ...],
    patterns: tuple[TopicPattern, ...], dead_letter: DeadLetterDestination, problems: r.Problems,
) -> None:  # fmt: skip
    """Every ``tables:`` key names a destination the pipeline writes, and no HOUR key covers
    a table that must stay DAY (the dead letters; keyed topics' tables)."""
    # Static routes declare their tables: (dataset, table) -> (who, keyed); a pattern's
    # templated table may be any table of its dataset.
    statics = {
        d: (repr(t.name), t.keyed is not None)
        for t in topics
        if (d := t.routing.static_destination) is not None
    }
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
    changelogs = {(ds, changelog_table(tb)) for (ds, tb), (_, keyed) in statics.items() if keyed}
    for key, settings in tables.settings.items():
        dataset, table = key.split(".")
        if table == "*":
            if dataset not in wild and dataset not in templated:
                problems.add(f"tables.{key}", f"dataset.* needs the allow-list entry {key!r}")
        elif (
            not allowed.allows(dataset, table)
            and (dataset, table) not in statics
            and dataset not in templated
            and (dataset, table) not in changelogs
            and not dead_letter.is_table(dataset, table)
        ):
            problems.add(
                f"tables.{key}",
                "not a destination of this pipeline (not in "
                "allowed_destinations and no static route names it)",
            )
        if settings.delivery is Delivery.STORAGE_WRITE:
            _check_storage_write(key, dataset, table, statics, templated, dead_letter, problems)
        if settings.all_columns_nullable:
            _check_all_columns_nullable(key, dataset, table, statics, dead_letter, problems)
        _check_partitioning(
            key, dataset, table, settings, statics, templated, dead_letter, problems
        )


def _check_partitioning(
    key: str, dataset: str, table: str, settings: TableSettings,
    statics: dict[Any, tuple[str, bool]], templated: dict[str, tuple[str, bool]],
    dead_letter: DeadLetterDestination, problems: r.Problems,
) -> None:  # fmt: skip
    """A ``partitioning`` other than DAY and a ``partition_column`` are refused where they
    cannot hold: the dead letters, keyed topics' tables, ``partition_column`` of an
    unpartitioned table."""
    where = f"tables.{key}.partitioning"
    if settings.partition_column and settings.partitioning is Partitioning.NONE:
        problems.add(
            f"tables.{key}.partition_column",
            f"{settings.partition_column!r} with partitioning none: an unpartitioned table has "
            "no partition column (remove one of them)",
        )
    if settings.require_partition_filter and (
        settings.partitioning is Partitioning.NONE or settings.partition_column
    ):
        problems.add(
            f"tables.{key}.require_partition_filter",
            "not with partitioning none (no partition to filter on) nor, yet, with a "
            "partition_column (kbqe's statements filter by event date)",
        )
    if settings.partitioning is Partitioning.NONE and settings.partition_expiration_days:
        problems.add(
            f"tables.{key}.partition_expiration_days",
            "partitioning none: an unpartitioned table has no partitions to expire",
        )
    if settings.partitioning is Partitioning.DAY and not settings.partition_column:
        return
    if settings.partition_column and settings.partitioning is Partitioning.DAY:
        where = f"tables.{key}.partition_column"
    if _covers_dead_letter(dataset, table, dead_letter):
        problems.add(where, "the dead-letter table is DAY-partitioned on its staging date")
    for keyed in _keyed_topics_covered(dataset, table, statics, templated)[:1]:
        problems.add(
            where,
            f"covers the tables of keyed topic {keyed}: "
            "keyed tables are DAY-partitioned on the event date (the MERGE prunes by date)",
        )


def _covers_dead_letter(dataset: str, table: str, dead_letter: DeadLetterDestination) -> bool:
    """Whether the ``tables:`` key ``dataset.table`` (``table`` may be ``*``) covers the
    dead-letter table."""
    return dataset == dead_letter.dataset and table in ("*", dead_letter.table)


def _keyed_topics_covered(
    dataset: str,
    table: str,
    statics: Mapping[Any, tuple[str, bool]],
    templated: Mapping[str, tuple[str, bool]],
) -> list[str]:
    """The keyed topics whose tables (current state or changelog) the ``tables:`` key
    ``dataset.table`` covers."""
    keyed = [
        who
        for (ds, tb), (who, is_keyed) in statics.items()
        if is_keyed and ds == dataset and table in ("*", tb, changelog_table(tb))
    ]
    if templated.get(dataset, ("", False))[1]:
        keyed.append(templated[dataset][0])
    return keyed


def _check_storage_write(
    key: str, dataset: str, table: str, statics: Mapping[Any, tuple[str, bool]],
    templated: Mapping[str, tuple[str, bool]], dead_letter: DeadLetterDestination,
    problems: r.Problems,
) -> None:  # fmt: skip
    """What ``delivery: storage_write`` cannot do, refused naming the table. A keyed topic's
    changelog may be delivered so (its MERGE takes the delivered rows at its cadence), not
    its current table, which only the MERGE writes."""
    if _covers_dead_letter(dataset, table, dead_letter):
        # Not "yet": the table of last resort stays loaded (docs/architecture.md, "Storage
        # Write delivery").
        problems.add(
            f"tables.{key}.delivery",
            f"storage_write is not supported for the "
            f"dead-letter table {dead_letter.dataset}.{dead_letter.table}: it stays "
            "loaded (the rows the Storage Write API refuses are dead-lettered there, "
            "and a row it refused for this table could not be dead-lettered again)",
        )
    for (ds, tb), (who, is_keyed) in statics.items():
        if is_keyed and (ds, tb) == (dataset, table):
            problems.add(
                f"tables.{key}.delivery",
                f"{key} is the current state of keyed topic "
                f"{who}, written by its MERGE, never delivered: set the delivery of "
                f"its changelog {ds}.{changelog_table(tb)} (or the topic's)",
            )


def _check_all_columns_nullable(
    key: str, dataset: str, table: str, statics: Mapping[Any, tuple[str, bool]],
    dead_letter: DeadLetterDestination, problems: r.Problems,
) -> None:  # fmt: skip
    """``all_columns_nullable`` on a table whose columns kbqe does not take from a schema,
    refused naming the table (a ``dataset.*`` key may cover such tables: it means the
    others)."""
    if table != "*" and _covers_dead_letter(dataset, table, dead_letter):
        problems.add(
            f"tables.{key}.all_columns_nullable",
            f"{key} is the dead-letter table: its columns are kbqe's own, never a schema's",
        )
    for (ds, tb), (who, is_keyed) in statics.items():
        if is_keyed and (ds, tb) == (dataset, table):
            problems.add(
                f"tables.{key}.all_columns_nullable",
                f"{key} is the current state of keyed topic {who}, whose columns are all "
                f"NULLABLE already: set it on its changelog {ds}.{changelog_table(tb)}",
            )


def _check_erasure(
    erasure: ErasureSettings, allowed: AllowList, topics: tuple[TopicConfig, ...],
    patterns: tuple[TopicPattern, ...], dead_letter: DeadLetterDestination,
    enrichment: EnrichmentConfig, problems: r.Problems,
) -> None:  # fmt: skip
    """Every ``erasure.tables`` key names a dataset the pipeline writes; ``kafka_key`` needs
    the key column (the dead-letter table has its own ``raw_key``); the requests topic is
    not a topic the pipeline stages (its subjects would be loaded into BigQuery)."""
    datasets = set(allowed.datasets) | {dead_letter.dataset}
    datasets |= {d.dataset for t in topics for d in t.static_destinations}
    datasets |= {d.dataset for p in patterns if (d := p.prototype.routing.static_destination)}
    for key, settings in erasure.tables:
        dataset, table = key.split(".")
        if dataset not in datasets:
            problems.add(f"erasure.tables.{key}", f"dataset {dataset!r} is not written by this "
                         "pipeline (no allow-list entry, static route or dead-letter table)")  # fmt: skip
        dead = _covers_dead_letter(dataset, table, dead_letter)
        raw_archive = key in _raw_archive_tables(topics, patterns)
        if settings.kafka_key and not enrichment.key_column and not (dead and table != "*") \
                and not raw_archive:  # fmt: skip
            problems.add(f"erasure.tables.{key}.kafka_key",
                         "needs enrichment.key_column: rows carry no Kafka key otherwise")  # fmt: skip
    if erasure.requests_topic and erasure.requests_topic in {t.name for t in topics}:
        problems.add("erasure.requests_topic", f"{erasure.requests_topic!r} is a topic this "
                     "pipeline stages: erasure requests must not be loaded into BigQuery")  # fmt: skip


def _raw_archive_tables(
    topics: Iterable[TopicConfig], patterns: Iterable[TopicPattern]
) -> frozenset[str]:
    out = {f"{d.dataset}.{d.table}" for t in topics if t.format is SourceFormat.RAW
           for d in t.static_destinations}  # fmt: skip
    out |= {f"{d.dataset}.{d.table}" for p in patterns if p.prototype.format is SourceFormat.RAW
            if (d := p.prototype.routing.static_destination)}  # fmt: skip
    return frozenset(out)


# --- sections ----------------------------------------------------------------------------------
_PATTERNS = r.list_of(r.checked(r.string, allow_pattern_problem))


def _allow_list(top: Mapping[str, Any], problems: r.Problems) -> AllowList:
    patterns = r.read_value(top, "allowed_destinations", _PATTERNS, (), problems)
    if any(p.split(".")[0] == MARKER_DATASET for p in patterns):
        problems.add("allowed_destinations", f"dataset {MARKER_DATASET!r} is reserved for markers")
    return AllowList(patterns)
