"""The bad-input corpus as one partition's stream (``STREAM``, each case at its offset) and a
stager run over some of its cases on either path (Python or the native kernel) with a fake
registry: what the corpus tests and the commit tests share."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.staging import stager as stager_module
from kbqe_dagster.staging.context import RangeResult, StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging
from kbqe_dagster.staging.stager import RangeStager
from kbqe_dagster.staging.task import stage_messages
from kbqe_dagster_tests.corpus.bad_input_corpus import (
    Corpus,
    CorpusCase,
    FakeSchemaLookup,
    fake_messages,
    load_corpus,
)
from kbqe_dagster_tests.staging.kernel_equality import ListReader

CORPUS = load_corpus()


TOPIC = "com.acme.corpus.bad"


FAKE_IDS = {name: 11 + i for i, name in enumerate(CORPUS.schemas)}


def stream(corpus: Corpus) -> list[CorpusCase]:
    """The bad cases in manifest order with the controls spread between them, a control
    first: good messages must stage whatever bad input surrounds them."""
    controls = list(corpus.controls)
    step = math.ceil(len(corpus.bad) / len(controls))
    out: list[CorpusCase] = []
    for i, case in enumerate(corpus.bad):
        if i % step == 0 and controls:
            out.append(controls.pop(0))
        out.append(case)
    return out + controls


STREAM = stream(CORPUS)


OFFSET_OF = {case.name: offset for offset, case in enumerate(STREAM)}


def run_stager(tmp_path: Path, policy: str, cases: list[CorpusCase],
               path: str = "python") -> tuple[RangeResult, object]:  # fmt: skip
    staging = StagingLocation(str(tmp_path / "staging"))
    ctx = StageContext(
        KafkaSettings("127.0.0.1:9"),
        RegistrySettings("http://127.0.0.1:9"),
        staging,
        CORPUS.pipeline(TOPIC, policy),
        TOPIC,
        native_kernel=path == "native",
    )
    rng = OffsetRange(TOPIC, 0, 0, len(cases))
    workdir = tmp_path / "work"
    workdir.mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(
            stager_module,
            "SchemaLookup",
            lambda settings: FakeSchemaLookup(CORPUS.schemas, FAKE_IDS),
        )
        stager = RangeStager(ctx, rng, workdir)
    reader = ListReader(fake_messages(cases, FAKE_IDS, TOPIC), 0, len(cases))
    native = NativeStaging.for_stager(stager) if path == "native" else None
    assert (native is not None) == (path == "native")
    stage_messages(stager, reader, native)
    store = staging.open()
    return stager.commit(store, reader.covered), store
