"""What a stage task is given and what it returns: :class:`StageContext` (picklable, built on
the driver and shipped to every Spark task) and :class:`RangeResult` (the small summary a
task sends back).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from kbqe_dagster.core.config.pipeline import PipelineConfig, TopicConfig
from kbqe_dagster.core.protocol.offsets import StartPolicy
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.kafka.native_reader import native_consumer_switch_on
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.staging.native_kernel import kernel_switch_on
from kbqe_dagster.staging.range_sink import SinkFactory, TableDelivery


@dataclass(frozen=True)
class StageContext:
    """Everything a stage task needs; picklable, shipped to every Spark task."""

    kafka: KafkaSettings
    registry: RegistrySettings
    staging: StagingLocation
    pipeline: PipelineConfig
    topic_name: str
    native_kernel: bool = field(default_factory=kernel_switch_on)
    """Whether the run's tasks may use the native stage kernel: ``KBQE_STAGE_KERNEL`` where the
    run starts (staging/native_kernel.py). Tasks without the extension take the Python path."""
    native_consumer: bool = field(default_factory=native_consumer_switch_on)
    """Whether the kernel's ranges are read by its native consumer (resources/kafka/native_reader.py):
    ``KBQE_NATIVE_CONSUMER`` where the run starts."""
    stager_for: Callable[[TopicConfig], type] | None = field(default=None, repr=False)
    """The stager class (a ``RangeStager``: staging/stager.py's ``chosen_stager`` says so to the
    type checker, this module being below it) of a topic: the extension seam's chooser (``kbqe_dagster.stager_registry.
    stager_for``), given by the driver that builds the context, so this room never imports its
    extensions (formats/, keyed/). Asked once per range: a grouped run's ranges are of several
    topics. None: the context cannot stage (its builder forgot the seam)."""
    sink: SinkFactory | None = None
    """Where the ranges' records go (staging/range_sink.py); None: the staging area, Avro files and
    done files (staging/staging_area_sink.py)."""

    @property
    def topic(self) -> TopicConfig:
        return self.pipeline.topic(self.topic_name)

    @property
    def start_policy(self) -> StartPolicy:
        return self.topic.staging.start_offset


@dataclass(frozen=True)
class RangeResult:
    topic: str
    partition: int
    start: int
    planned_last: int
    committed_last: int | None  # None: nothing was read, nothing committed
    messages: int
    records: int
    files: tuple[tuple[str, int], ...]  # (avro name, records), dead-letter files included
    bytes_written: int
    dead_letters: dict[str, int] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    conflict: bool = False  # another writer committed this range first
    seconds: float = 0.0
    bytes_by_dataset: dict[str, int] = field(default_factory=dict)  # file bytes per dataset
    tombstones: int = 0  # keyed topics: null values counted, not staged (keyed/stage.py)
    stage_path: str = "python"  # "native" when the native kernel staged (staging/native_kernel.py)
    kernel_handbacks: dict[str, int] = field(
        default_factory=dict
    )  # messages it handed back, by why
    reader: str = "confluent-kafka"  # "native" when the kernel's own consumer read the range
    delivered: tuple[TableDelivery, ...] = ()  # tables written through the Storage Write API
