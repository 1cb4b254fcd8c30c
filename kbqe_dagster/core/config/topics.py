"""One source topic's configuration: :class:`TopicConfig` and the reading of a ``topics[]``
entry (or a ``topic_patterns[]`` entry's settings) into it, defaults applied, every problem
named by its key path. The pipeline file as a whole is read in core/config/pipeline.py.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import fastavro

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.completeness.decision import COMPLETENESS_SPEC, CompletenessSettings
from kbqe_dagster.core.config.sections import (
    EVENT_TIME_SPEC,
    ROUTING_KEYS_BY_MODE,
    ROUTING_SPEC,
    STAGING_SPEC,
    BadInputPolicy,
    DeadLetterDestination,
    StagingSettings,
)
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.formats.decoders import resolve_decoder
from kbqe_dagster.core.formats.raw_archive import raw_topic_problems
from kbqe_dagster.core.keyed.contract import (
    DEBEZIUM_EVENT_TIME_FIELDS,
    KAFKA_KEYED_FORMATS,
    KEYED_SPEC,
    KeyedConfig,
    KeyFormat,
    KeySource,
    SourceFormat,
)
from kbqe_dagster.core.protocol.naming import TOPIC_RE
from kbqe_dagster.core.record.event_time import EventTimeConfig
from kbqe_dagster.core.record.partitioning import Delivery
from kbqe_dagster.core.record.routing import (
    AllowList,
    Destination,
    RoutingConfig,
    RoutingMode,
    required_fields,
    resolve_function,
)
from kbqe_dagster.core.transforms.compiler import transform_config_problems
from kbqe_dagster.core.transforms.destinations import (
    DestinationConfig,
    destination_config_problems,
    read_destinations,
)
from kbqe_dagster.core.transforms.keyed_rows import (
    keyed_transform_problems,
    table_transform_problems,
)
from kbqe_dagster.core.transforms.specs import TransformSpec, read_transforms

TOPIC_KEYS = (
    "name", "format", "schema", "decoder", "routing", "event_time", "on_bad_input", "staging",
    "keyed", "transforms", "completeness", "destinations", "delivery",
)  # fmt: skip
# A pattern's topics would all write the same destination tables; list such topics instead.
PATTERN_TOPIC_KEYS = tuple(k for k in TOPIC_KEYS if k != "destinations")


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
    """How message values are laid out: ``avro`` records (default), ``debezium`` change
    events, ``json``, ``json_schema``, ``protobuf``, ``decoder``, or ``raw``: any value archived
    undecoded as BYTES with its key, headers and Kafka timestamp, dated by the Kafka timestamp,
    routed ``static`` or ``function`` only, without ``transforms``, ``keyed``,
    ``destinations`` or ``event_time.fields`` (core/formats/raw_archive.py)."""
    keyed: KeyedConfig | None = None
    """Set for a keyed topic: its destination is a changelog, a current-state table and
    optionally a history (see core/keyed/contract.py); None for an append-only topic."""
    value_schema: Mapping[str, Any] | None = None
    """``format: json``: the Avro record schema its values are staged under (core/formats/source_format.py)."""
    transforms: tuple[TransformSpec, ...] = ()
    """Per-record transforms, in order, applied before routing, event time and enrichment
    (core/transforms/specs.py, core/transforms/compiler.py); empty: records are staged as they come.
    On a keyed topic they reshape the row (the changelog, the current table and the history
    alike; not ``function``), and a key field takes only a transform that keeps its identity:
    ``rename``, ``mask`` with hmac, ``cast`` to string (core/transforms/keyed_rows.py). On a
    topic keyed by its Kafka key they reshape the value; the key columns, the Kafka key's, take
    none."""
    decoder: str | None = None
    """``format: decoder``: the user decoder ``"package.module:function"`` that turns each
    message into an Avro record and its schema (core/formats/decoders.py); checked importable when
    the file is read."""
    pattern: str | None = None
    """The ``topic_patterns[].match`` that discovered this topic; None for a listed topic."""
    completeness: CompletenessSettings = field(default_factory=CompletenessSettings)
    """When its partitions count as caught up to a day: the pipeline's ``completeness:`` with
    this topic's overrides applied (core/completeness/decision.py)."""
    destinations: tuple[DestinationConfig, ...] = ()
    """Several tables per message, each with its own routing, transforms and projection
    (core/transforms/destinations.py); instead of ``routing``. Empty: the topic's ``routing`` alone."""
    delivery: Delivery = Delivery.LOAD
    """How the rows of the tables this topic writes reach BigQuery, for each table that
    ``tables:`` says nothing of: ``load`` (default; free batch load jobs) or
    ``storage_write`` (the Storage Write API, seconds; core/record/partitioning.py). A topic
    that may write a ``storage_write`` table stages one range per partition per run. A keyed
    topic's table is its changelog: delivered so, it is fresh in seconds and its MERGE keeps
    its cadence (keyed/merge.py)."""

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
class TopicDefaults:
    """What a topic entry (or a pattern's settings) inherits from the top of the file."""

    event_time: dict[str, Any]
    on_bad_input: BadInputPolicy
    staging: StagingSettings
    completeness: CompletenessSettings = field(default_factory=CompletenessSettings)
    base_dir: Path | None = None
    """Where relative ``schema:`` file paths are read from: the pipeline file's folder."""


BAD_INPUT_POLICY = r.choice(BadInputPolicy)


def read_topics(
    raw: Any,
    defaults: TopicDefaults,
    allowed: AllowList,
    dead_letter: DeadLetterDestination,
    problems: r.Problems,
    required: bool = True,
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
        topic = read_topic(item, path, defaults, allowed, problems)
        static = topic.routing.static_destination if topic else None
        if topic and topic.keyed and static and dead_letter.is_table(*static):
            problems.add(f"{path}.keyed", "not allowed on the dead-letter table")
        if topic is None:
            continue
        if topic.name in seen:
            problems.add(f"{path}.name", f"duplicate of topics[{seen[topic.name]}]")
        seen.setdefault(topic.name, index)
        topics.append(topic)
    return tuple(topics)


TOPIC_NAME_RULE = r.checked(
    r.string, lambda name: None if TOPIC_RE.fullmatch(name) else "not a legal Kafka topic name"
)


def read_topic(
    raw: Any, path: str, defaults: TopicDefaults, allowed: AllowList, problems: r.Problems
) -> TopicConfig | None:
    spec = {key: r.identity for key in TOPIC_KEYS}
    section = r.read_section(raw, path, spec, problems, required=("name",))
    name = r.read_value(section, "name", TOPIC_NAME_RULE, None, problems, path)
    source_format = r.read_value(section, "format", _FORMAT, SourceFormat.AVRO, problems, path)
    routing = _routing(section.get("routing"), f"{path}.routing", allowed, problems)
    event_time = _event_time(
        section.get("event_time"),
        f"{path}.event_time",
        defaults,
        problems,
        default_fields=DEBEZIUM_EVENT_TIME_FIELDS if source_format is SourceFormat.DEBEZIUM else (),
        kafka_dated=source_format is SourceFormat.RAW,
    )
    policy = r.read_value(
        section, "on_bad_input", BAD_INPUT_POLICY, defaults.on_bad_input, problems, path
    )
    staging = r.build_section(
        defaults.staging, section.get("staging"), f"{path}.staging", STAGING_SPEC, problems
    )
    keyed = _keyed(section, path, source_format, routing, problems)
    value_schema = _value_schema(section, path, source_format, defaults.base_dir, problems)
    decoder = _decoder(section, path, source_format, problems)
    if source_format is SourceFormat.RAW:
        event_time = _raw_event_time(section, path, routing, event_time, problems)
    elif (
        source_format
        in (
            SourceFormat.JSON,
            SourceFormat.JSON_SCHEMA,
            SourceFormat.PROTOBUF,
            SourceFormat.DECODER,
        )
        and "keyed" in section
        and not (_kafka_keyed(section) and source_format in KAFKA_KEYED_FORMATS)
    ):
        also = (
            ""
            if source_format not in KAFKA_KEYED_FORMATS
            else "; a topic keyed by its Kafka key (key_from: kafka_key) may be"
        )
        problems.add(
            f"{path}.keyed",
            f"not with format: {source_format.value} (keyed topics are avro or debezium){also}",
        )
    transforms = read_transforms(section.get("transforms"), f"{path}.transforms", problems)
    if transforms and "keyed" in section and _kafka_keyed(section):
        # A table topic's transforms reshape its value; its key columns are the Kafka key's.
        key = keyed.key if keyed is not None else ()
        for where, message in table_transform_problems(transforms, key):
            problems.add(f"{path}.transforms{where}", message)
    elif transforms and "keyed" in section:
        # keyed.key names source fields; unset (Debezium), the stage run and the merge check
        # the Kafka key's (keyed/stage.py, keyed/merge.py).
        key = keyed.key if keyed is not None else ()
        for where, message in keyed_transform_problems(transforms, key):
            problems.add(f"{path}.transforms{where}", message)
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
    completeness = r.build_section(
        defaults.completeness,
        section.get("completeness"),
        f"{path}.completeness",
        COMPLETENESS_SPEC,
        problems,
    )
    delivery = r.read_value(section, "delivery", _DELIVERY, Delivery.LOAD, problems, path)
    return TopicConfig(
        name,
        routing,
        event_time,
        policy,
        staging,
        source_format,
        keyed,
        value_schema,
        transforms=transforms,
        decoder=decoder,
        completeness=completeness,
        destinations=destinations,
        delivery=delivery,
    )


def _raw_event_time(
    section: Mapping[str, Any], path: str, routing: RoutingConfig | None,
    event_time: EventTimeConfig | None, problems: r.Problems,
) -> EventTimeConfig | None:  # fmt: skip
    """The rules of a ``format: raw`` topic (core/formats/raw_archive.py), and its event time:
    the Kafka timestamp alone, whatever the top-level ``event_time.fields`` say (they describe
    decoded records; the range limits still apply)."""
    if routing is None and "routing" in section:
        mode: str | None = "static"  # the bad routing section is reported already
    else:
        mode = routing.mode.value if routing is not None and "routing" in section else None
    own = section.get("event_time")
    for where, message in raw_topic_problems(
        frozenset(section),
        mode,
        routing.function_fields if routing is not None else (),
        dict(own) if isinstance(own, Mapping) else None,
    ):
        problems.add(f"{path}.{where}", message)
    if event_time is None:
        return None
    return replace(event_time, fields=(), kafka_timestamp_fallback=True)


def _destinations(
    section: Mapping[str, Any], path: str, allowed: AllowList, problems: r.Problems,
) -> tuple[DestinationConfig, ...] | None:  # fmt: skip
    """``destinations:`` with the rules that involve the rest of the topic; ``()`` when there
    is none, None when it is invalid."""
    if "destinations" not in section:
        return ()
    key = f"{path}.destinations"
    if "routing" in section:
        problems.add(
            f"{path}.routing",
            "not with destinations: each destination has its own "
            "routing (move this one into destinations)",
        )
    if "keyed" in section:
        problems.add(
            key,
            "not with keyed: (a keyed topic's one destination is its changelog, "
            "current state and history)",
        )
    return read_destinations(
        section["destinations"],
        key,
        problems,
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
    decoder: str = section["decoder"]
    return decoder


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
        problems.add(
            key,
            "only with format: json (avro and debezium take their schema from "
            "the registry; a decoder returns its own)",
        )
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
_DELIVERY = r.choice(Delivery)


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
    kafka_key = values.get("key_from") is KeySource.KAFKA_KEY
    if debezium:
        for key in ("version", "delete_field"):
            if key in values:
                problems.add(
                    f"{keyed_path}.{key}",
                    "not used with format: debezium: the "
                    "change's source.ts_ms is the version and op 'd' the delete",
                )
        if kafka_key:
            problems.add(
                f"{keyed_path}.key_from",
                "not with format: debezium: its key columns are the Kafka key's "
                "already, and source.ts_ms orders its changes",
            )
    if not kafka_key:
        for key in ("key_format", "key_types"):
            if key in values:
                problems.add(f"{keyed_path}.{key}", "only with key_from: kafka_key")
    if kafka_key and not debezium:
        _kafka_key_rules(values, keyed_path, problems)
    elif not debezium:
        if "key" not in values:
            problems.add(
                f"{keyed_path}.key",
                "required unless format: debezium (whose default "
                "is the fields of the Kafka key's schema)",
            )
        if "version" not in values:
            problems.add(
                f"{keyed_path}.version",
                "required unless format: debezium: the field "
                "(timestamp or long) that orders a key's versions",
            )
    if routing is not None and routing.static_destination is None:
        problems.add(
            f"{path}.routing",
            "a keyed topic needs routing mode static: its "
            "destination is one changelog, one current-state table and one history",
        )
    if len(problems.items) > before:
        return None
    return KeyedConfig(**values)


def _kafka_keyed(section: Mapping[str, Any]) -> bool:
    """Whether the topic's ``keyed:`` section says ``key_from: kafka_key`` (read as written:
    the section's own problems are reported by :func:`_keyed`)."""
    keyed = section.get("keyed")
    return isinstance(keyed, Mapping) and keyed.get("key_from") == KeySource.KAFKA_KEY.value


def _kafka_key_rules(values: Mapping[str, Any], keyed_path: str, problems: r.Problems) -> None:
    """What ``key_from: kafka_key`` needs of the rest of ``keyed:``, per ``key_format``."""
    key_format = values.get("key_format", KeyFormat.AVRO)
    key = values.get("key", ())
    if key_format is KeyFormat.AVRO and key:
        problems.add(
            f"{keyed_path}.key",
            "not with key_format: avro: the key columns are the fields of the Kafka "
            "key's Avro record (set key_format: string or json for other keys)",
        )
    if key_format is KeyFormat.STRING and len(key) != 1:
        problems.add(
            f"{keyed_path}.key",
            "key_format: string needs key: [the name of its one column], "
            f"got {list(key) or 'none'}",
        )
    if key_format is KeyFormat.JSON and not key:
        problems.add(
            f"{keyed_path}.key", "key_format: json needs key: [the JSON key's fields, in order]"
        )
    types = dict(values.get("key_types", {}))
    if types and key_format is not KeyFormat.JSON:
        problems.add(f"{keyed_path}.key_types", "only with key_format: json")
    elif unknown := sorted(set(types) - set(key)):
        problems.add(f"{keyed_path}.key_types", f"{unknown} not among key: {list(key)}")


def _routing(raw: Any, path: str, allowed: AllowList, problems: r.Problems) -> RoutingConfig | None:
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
    raw: Any, path: str, defaults: TopicDefaults, problems: r.Problems,
    default_fields: tuple[str, ...] = (), kafka_dated: bool = False,
) -> EventTimeConfig | None:  # fmt: skip
    """``default_fields`` (a format's own, e.g. Debezium's ``source.ts_ms``) win over the
    top-level default fields, which describe append topics' records; the topic's own win over
    both. ``kafka_dated``: the format dates records by their Kafka timestamp alone (raw)."""
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
    if not config.fields and not config.kafka_timestamp_fallback and not kafka_dated:
        problems.add(path, "needs at least one field or kafka_timestamp_fallback: true")
    return config
