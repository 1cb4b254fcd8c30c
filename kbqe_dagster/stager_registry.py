"""The stage engine's extension seam: which stager stages a topic.

The stage engine (``staging/``) stages every range with a
:class:`~kbqe_dagster.staging.stager.RangeStager`; formats (``formats/``) and keyed changes
(``keyed/``) are subclasses of it, built on its documented interface. This module is the one
place that knows them: :data:`STAGERS` is the registry, :func:`stager_for` chooses a topic's
stager from its configuration (the first entry whose test takes the topic; the plain Avro
``RangeStager`` when none does), and :func:`stage_context` builds the stage context the
driver ships to the Spark tasks with that chooser in it. ``staging/`` never imports its
extensions: it asks the context (``StageContext.stager_class``), once per range.

A registry entry names its stager's module and class as text, imported the first time a topic
needs it, so a Spark worker imports only the formats its ranges use (a ``protobuf`` runtime
or ``jsonschema`` costs nothing to an Avro worker). ``kafka-delta-ingest`` chooses its
deserializer the same way, with a factory over the format (``MessageDeserializerFactory``).

**A new format**: its stager (``formats/<name>_stage.py``, a ``RangeStager`` or
``TransformingStager`` subclass overriding ``stage`` and, for registry schemas,
``new_decoder``), its mapping to Avro in ``core/``, its name in ``core.formats.SourceFormat``
(the configuration's vocabulary), and one line here. Nothing in ``staging/``.

May import: ``core/``, ``resources/``, ``staging/``; ``formats/`` and ``keyed/`` by name, here.
Imported by whoever builds a stage context (``defs/staging``, ``reliability/``, ``bench/``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

from kbqe_dagster.core.config.pipeline import PipelineConfig, TopicConfig
from kbqe_dagster.core.formats.source_format import SourceFormat
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.stager import RangeStager


@dataclass(frozen=True)
class StagerEntry:
    """One extension of the stage engine: the topics it stages and where its stager lives."""

    name: str
    takes: Callable[[TopicConfig], bool]
    """Whether this stager stages ``topic`` (entries are asked in order; the first wins)."""
    stager: str
    """``package.module:Class``, a :class:`RangeStager` subclass, imported on first use."""

    def load(self) -> type[RangeStager]:
        return _load(self.stager)


STAGERS: tuple[StagerEntry, ...] = (
    # Keyed topics, unframed formats and transformed topics (or with several destinations) are
    # rooms of their own; JSON-family topics apply their transforms themselves.
    StagerEntry(
        "keyed", lambda t: t.keyed is not None, "kbqe_dagster.keyed.stage:KeyedRangeStager"
    ),
    StagerEntry(
        "raw",
        lambda t: t.format is SourceFormat.RAW,
        "kbqe_dagster.formats.raw_stage:RawRangeStager",
    ),
    StagerEntry(
        "decoder",
        lambda t: t.decoder is not None,
        "kbqe_dagster.formats.decoder_stage:DecoderRangeStager",
    ),
    StagerEntry(
        "json",
        lambda t: t.value_schema is not None,
        "kbqe_dagster.formats.json_stage:JsonRangeStager",
    ),
    StagerEntry(
        "json_schema",
        lambda t: t.format is SourceFormat.JSON_SCHEMA,
        "kbqe_dagster.formats.json_schema_stage:JsonSchemaRangeStager",
    ),
    StagerEntry(
        "protobuf",
        lambda t: t.format is SourceFormat.PROTOBUF,
        "kbqe_dagster.formats.protobuf_stage:ProtobufRangeStager",
    ),
    StagerEntry(
        "transforms",
        lambda t: bool(t.transforms or t.destinations),
        "kbqe_dagster.formats.transform_stage:TransformRangeStager",
    ),
)
"""The registry, in order of precedence."""


def stager_for(topic: TopicConfig) -> type[RangeStager]:
    """The stager class of ``topic``: the first :data:`STAGERS` entry that takes it, else the
    stage engine's own Avro ``RangeStager``. Module-level, so a stage context holding it
    pickles by reference.

    A topic keyed by its Kafka key (a compacted topic) is its format's stager with the keyed
    table's in front (keyed/table_stage.py): the format decodes each value, the table's makes
    it a change, so every format takes it the same way. Its transforms are the table's to
    apply (to the value, in each changelog layout): the format's stager only decodes."""
    if topic.keyed is not None and topic.keyed.kafka_ordered:
        table_stager: Any = _load("kbqe_dagster.keyed.table_stage:table_stager")
        format_topic = replace(topic, keyed=None, transforms=())
        stager: type[RangeStager] = table_stager(stager_for(format_topic))
        return stager
    for entry in STAGERS:
        if entry.takes(topic):
            return entry.load()
    return RangeStager


def stager_class(ctx: StageContext) -> type[RangeStager]:
    """The stager class of ``ctx``'s topic (what a stage task of it uses)."""
    return stager_for(ctx.topic)


def stage_context(
    kafka: KafkaSettings,
    registry: RegistrySettings,
    staging: StagingLocation,
    pipeline: PipelineConfig,
    topic_name: str,
    **options: Any,
) -> StageContext:
    """A stage context whose tasks choose their stager here (``options``: the other
    :class:`StageContext` fields)."""
    return StageContext(
        kafka, registry, staging, pipeline, topic_name, stager_for=stager_for, **options
    )


@cache
def _load(path: str) -> type[RangeStager]:
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)
