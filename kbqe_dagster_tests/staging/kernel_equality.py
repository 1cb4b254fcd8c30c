"""Stage one message stream twice — on the Python path and through the native kernel — and
return what each committed, byte for byte, for the differential tests of the kernel.

Both runs use the same fixed sync marker and staging time, so their avro files, dead-letter
files and done files must be identical; the native run also reports how many messages the
kernel staged itself (a differential test where the kernel hands everything back would
prove nothing).
"""

from __future__ import annotations

import io
import json
import random
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import PipelineConfig
from kbqe_dagster.core.errors import StageRangeFailed
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.kafka.native_reader import ConsumedMessage
from kbqe_dagster.resources.schema_registry import RegisteredSchema, RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stager_class
from kbqe_dagster.staging import stager as stager_module
from kbqe_dagster.staging.context import RangeResult, StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging
from kbqe_dagster.staging.task import stage_messages

SYNC = bytes(range(16))
STAGED_AT = datetime(2026, 11, 25, 6, 0, tzinfo=UTC)


class Msg(ConsumedMessage):
    """A consumed Kafka message as the stage path reads it: the native reader's
    ``ConsumedMessage`` (confluent-kafka's accessors), built from what a test names."""

    __slots__ = ()

    def __init__(self, topic: str, partition: int, offset: int, value: bytes | None,
                 key: bytes | None = None, headers: list | None = None,
                 timestamp: tuple[int, int] = (1, 1_726_238_205_123)) -> None:  # fmt: skip
        super().__init__(None, "", topic, partition, offset, value, key, timestamp, headers)


class ListReader:
    """``RangeReader``'s contract over a list of messages, in batches of ``batch_size``."""

    def __init__(self, messages: Sequence[Any], start: int, end_exclusive: int,
                 batch_size: int = 64) -> None:  # fmt: skip
        self.messages = list(messages)
        self.end_exclusive = end_exclusive
        self.batch_size = batch_size
        self.position = start
        self.finished = False

    @property
    def covered(self) -> int:
        return min(self.position, self.end_exclusive)

    def batches(self):
        for at in range(0, len(self.messages), self.batch_size):
            if self.finished or self.position >= self.end_exclusive:
                return
            yield self.messages[at : at + self.batch_size]

    def accept(self, msg: Any) -> bool:
        if msg.offset() >= self.end_exclusive:
            self.position, self.finished = self.end_exclusive, True
            return False
        self.position = msg.offset() + 1
        return True

    def staged_through(self, offset: int) -> None:
        self.position = offset + 1


class DictLookup:
    """The registry boundary: writer schemas by id."""

    def __init__(self, schemas: Mapping[int, Any]) -> None:
        self.schemas = dict(schemas)

    def get(self, schema_id: int) -> RegisteredSchema | None:
        schema = self.schemas.get(schema_id)
        if schema is None or isinstance(schema, RegisteredSchema):
            return schema  # a registered schema as is (a JSON Schema's, say)
        return RegisteredSchema(schema_id, "AVRO", schema)


@dataclass
class Staged:
    result: RangeResult | None
    files: dict[str, bytes]
    error: str | None = None  # the fail policy's StageRangeFailed
    kernel_messages: int = 0
    handbacks: dict[str, int] | None = None
    handed_back_records: dict[str, int] | None = None
    """Hand-backs the Python path staged, by reason (``NativeStaging.handed_back_records``)."""


def stage(tmp: Path, pipeline: PipelineConfig, topic: str, schemas: Mapping[int, Any],
          messages: Sequence[Any], *, native: bool, partition: int = 0,
          batch_size: int = 64, end_exclusive: int | None = None,
          lookup: Any = None, kernel_declines: bool = False) -> Staged:  # fmt: skip
    """``lookup``: the registry boundary when it is not ``schemas`` as Avro writer schemas
    (a ``FakeSchemaRegistry`` of Protobuf schemas). ``kernel_declines``: with ``native``, the
    kernel is available but this range must take the Python path (its driver's ``for_range``
    declines it)."""
    staging = StagingLocation(str(tmp / ("native" if native else "python") / "staging"))
    workdir = tmp / ("native" if native else "python") / "work"
    workdir.mkdir(parents=True)
    ctx = StageContext(
        KafkaSettings("127.0.0.1:9"),
        RegistrySettings("http://127.0.0.1:9"),
        staging,
        pipeline,
        topic,
        native_kernel=native,
    )
    start = messages[0].offset() if messages else 0
    end = messages[-1].offset() + 1 if messages else 0
    end = end if end_exclusive is None else end_exclusive
    rng = OffsetRange(topic, partition, start, end)
    with pytest.MonkeyPatch.context() as mp:
        registry = lookup if lookup is not None else DictLookup(schemas)
        mp.setattr(stager_module, "SchemaLookup", lambda settings: registry)
        stager = stager_class(ctx)(ctx, rng, workdir)
    stager.sync_marker = SYNC
    stager.staged_at = STAGED_AT
    driver = NativeStaging.for_stager(stager) if native else None
    if native and kernel_declines:
        assert driver is None, "the native kernel took a range it should leave to Python"
    elif native:
        assert driver is not None, "the native kernel is not available for this stager"
    reader = ListReader(messages, start, end, batch_size)
    try:
        stage_messages(stager, reader, driver)
    except StageRangeFailed as failed:
        return Staged(None, {}, str(failed), driver.kernel.messages if driver else 0)
    store = staging.open()
    result = stager.commit(store, reader.covered)
    files = {f.name: store.read_bytes(f.name) for f in store.list()}
    return Staged(
        result,
        files,
        None,
        driver.kernel.messages if driver else 0,
        dict(driver.handbacks) if driver else None,
        dict(driver.handed_back_records) if driver else None,
    )


def comparable(name: str, data: bytes) -> Any:
    """A committed file as compared: done files without the versions that pin each avro
    object in its store (a local store's version is a fingerprint of the file's inode and
    time, different for every run); everything else byte for byte."""
    if not name.endswith(".done"):
        return data
    manifest = json.loads(data)
    for entry in manifest.get("files", ()):
        entry.pop("version", None)
    return manifest


def assert_same(python: Staged, native: Staged, context: str = "") -> None:
    """The native run committed exactly what the Python run committed."""
    assert native.error == python.error, context
    if python.result is None:
        return
    assert sorted(native.files) == sorted(python.files), context
    for name, data in python.files.items():
        assert comparable(name, native.files[name]) == comparable(name, data), (
            f"{context}: {name} differs"
        )
    p, n = python.result, native.result
    assert (
        n.messages, n.records, n.files, n.dead_letters, n.skipped, n.committed_last, n.tombstones
    ) == (
        p.messages, p.records, p.files, p.dead_letters, p.skipped, p.committed_last, p.tombstones
    ), context  # fmt: skip


def committed_records(area: Any) -> dict[str, Any]:
    """What a staging area (a ``StagingLocation``) holds, comparable across stage runs: avro
    files as their records (sync markers are random per file; dead letters without their
    staging time), done files without their versions and creation time."""
    store = area.open()
    out: dict[str, Any] = {}
    for f in store.list():
        data = store.read_bytes(f.name)
        if f.name.endswith(".avro"):
            out[f.name] = [{k: v for k, v in r.items() if k != "staged_at"}
                           for r in fastavro.reader(io.BytesIO(data))]  # fmt: skip
        else:
            out[f.name] = comparable(f.name, data)
            if isinstance(out[f.name], dict):
                out[f.name].pop("created_at")
    return out


# --- the differential fuzz loop every kernel driver shares ------------------------------------
SCENARIO_MESSAGES = 400
"""Messages per seeded scenario of a differential fuzz."""


def fuzz_seeds(config: pytest.Config, per_case: int = SCENARIO_MESSAGES) -> list[int]:
    """The scenario seeds of a fuzz of ``--kernel-fuzz-cases`` messages (16,000 by default: a
    seeded slice in the suite; 1,000,000 behind the flag), ``per_case`` at a time."""
    return list(range(max(1, config.getoption("--kernel-fuzz-cases") // per_case)))


@dataclass
class FuzzTally:
    """What a differential fuzz staged, and how much of it the kernel did itself: a fuzz where
    the kernel hands everything back would prove nothing."""

    scenarios: int = 0
    messages: int = 0
    records: int = 0
    """Records staged (the Python path's count: both paths committed the same)."""
    natively: int = 0
    """Of them, the kernel's own (a keyed kernel's counted tombstones are not records)."""
    tombstones: int = 0
    plain_records: int = 0
    """Records of the scenarios that are not adversarial: what producers send."""
    plain_natively: int = 0
    handbacks: Counter[str] = field(default_factory=Counter)
    handed_back_records: Counter[str] = field(default_factory=Counter)
    """The records the kernel did not stage (what its share loses), by hand-back reason."""
    plain_handed_back_records: Counter[str] = field(default_factory=Counter)
    """Of them, the producer-like scenarios'."""

    @property
    def share(self) -> float:
        return self.natively / max(self.records, 1)

    @property
    def plain_share(self) -> float:
        return self.plain_natively / max(self.plain_records, 1)

    def add(self, case: Any, python: Staged, native: Staged) -> None:
        self.scenarios += 1
        self.messages += len(case.messages)
        if python.result is None or native.result is None:
            return  # the fail policy stopped the range: nothing committed on either path
        natively = native.kernel_messages - native.result.tombstones
        self.natively += natively
        self.records += python.result.records
        self.tombstones += python.result.tombstones
        # Scenarios say whether they are adversarial; one that does not is counted as such.
        if not getattr(case, "adversarial", True):
            self.plain_records += python.result.records
            self.plain_natively += natively
            self.plain_handed_back_records.update(native.handed_back_records or {})
        self.handbacks.update(native.handbacks or {})
        self.handed_back_records.update(native.handed_back_records or {})

    def summary(self, label: str) -> str:
        line = (
            f"{label} kernel fuzz: {self.scenarios} scenarios, {self.messages} messages, "
            f"0 disagreements, {self.records} records staged, {self.natively} by the kernel "
            f"({self.share:.1%})"
        )
        if self.tombstones:
            line += f", {self.tombstones} tombstones"
        line += f"; hand-backs {dict(self.handbacks)}"
        line += f"; records staged by Python after a hand-back {dict(self.handed_back_records.most_common())}"
        if self.plain_records:
            line += (
                f"; producer-like scenarios: {self.plain_records} records, "
                f"{self.plain_natively} by the kernel ({self.plain_share:.1%}), by Python after "
                f"a hand-back {dict(self.plain_handed_back_records.most_common())}"
            )
        return line


def differential_fuzz(
    label: str,
    topic: str,
    scenario: Callable[[int, int], Any],
    config: pytest.Config,
    tmp_path_factory: pytest.TempPathFactory,
    *,
    schemas_of: Callable[[Any], Mapping[int, Any]] = lambda case: {},
    lookup_of: Callable[[Any], Any] = lambda case: None,
) -> FuzzTally:
    """Stage every seeded scenario (``scenario(seed, messages)``: its ``pipeline``, ``messages``
    and whatever ``schemas_of``/``lookup_of`` read) on both paths, the kernel in consume
    batches of a seeded size, and require identical commits; returns the tally."""
    tally = FuzzTally()
    for seed in fuzz_seeds(config):
        case = scenario(seed, SCENARIO_MESSAGES)
        tmp = tmp_path_factory.mktemp(f"{label}fuzz{seed}")
        inputs = (tmp, case.pipeline, topic, schemas_of(case), case.messages)
        python = stage(*inputs, native=False, lookup=lookup_of(case))
        batch = random.Random(seed).choice([1, 7, 64, 1000])
        native = stage(*inputs, native=True, lookup=lookup_of(case), batch_size=batch)
        assert_same(python, native, f"seed {seed}")
        tally.add(case, python, native)
    print(tally.summary(label))
    return tally
