"""Every case of the bad-input corpus (``bad_input/``) meets the topic's bad-input policy.

- ``dead_letter``: each bad case is in a committed dead-letter file with its expected reason
  and its exact bytes, key, headers and location; the good controls between them are staged
  on their tables and event dates; every offset ends up in exactly one place.
- ``skip``: the counts per reason are the corpus's, nothing is dead-lettered, the controls are
  staged and the range still commits (offsets advance).
- ``fail``: the range stops at the first bad case with an error naming topic, partition,
  offset and reason, and commits nothing.

Unit tests drive ``RangeStager`` with fake messages and a fake ``SchemaLookup`` (the registry
boundary, replaced where ``staging/stager.py`` looks it up); the integration test produces the
corpus to the real local Kafka, registers the corpus schemas in the real Apicurio and runs
``stage_range`` — same assertions.
"""

from __future__ import annotations

import io
import uuid
from datetime import UTC, datetime
from pathlib import Path

import pytest
from fastavro import reader

from kbqe_dagster.core.errors import StageRangeFailed
from kbqe_dagster.core.protocol.naming import parse_listing
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.reasons import (
    DECODER_ONLY,
    JSON_ONLY,
    KEYED_ONLY,
    PROTOBUF_ONLY,
    STORAGE_WRITE_ONLY,
    TRANSFORM_ONLY,
    Reason,
)
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stage_context
from kbqe_dagster.staging.context import RangeResult, StageContext
from kbqe_dagster.staging.native_kernel import kernel_built, kernel_status
from kbqe_dagster.staging.task import stage_range
from kbqe_dagster_tests.corpus import make_bad_input_corpus
from kbqe_dagster_tests.corpus.bad_input_corpus import (
    BASE_TIMESTAMP_MS,
    Corpus,
    CorpusCase,
)
from kbqe_dagster_tests.support.corpus_stream import (
    CORPUS,
    FAKE_IDS,
    OFFSET_OF,
    STREAM,
    TOPIC,
    run_stager,
)

BAD_NAMES = [c.name for c in CORPUS.bad]


# --- the corpus itself -------------------------------------------------------------------------
def test_corpus_has_a_case_for_every_reason():
    # The corpus stages Avro append topics; keyed-only, JSON-only, Protobuf-only, decoder-only
    # and transform-only reasons are specified in kbqe_dagster_tests/keyed/ and .../formats/;
    # the Storage Write API's refusals in kbqe_dagster_tests/delivery/.
    only_elsewhere = (
        KEYED_ONLY | JSON_ONLY | PROTOBUF_ONLY | DECODER_ONLY | TRANSFORM_ONLY | STORAGE_WRITE_ONLY
    )
    assert set(CORPUS.expected_reasons()) == {str(r) for r in Reason} - only_elsewhere


def test_generator_reproduces_the_committed_files_byte_for_byte(tmp_path):
    make_bad_input_corpus.write(tmp_path)
    committed = make_bad_input_corpus.CORPUS_DIR
    produced = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    assert produced == sorted(
        p.relative_to(committed)
        for p in committed.rglob("*")
        if p.is_file() and p.name != "README.md"
    )
    for rel in produced:
        assert (tmp_path / rel).read_bytes() == (committed / rel).read_bytes(), rel


RECORD_BODIES = [
    c
    for c in CORPUS.cases
    if c.schema
    and isinstance(CORPUS.schemas[c.schema].parsed, dict)
    and CORPUS.schemas[c.schema].schema_type == "AVRO"
]


@pytest.mark.parametrize("case", RECORD_BODIES, ids=lambda c: c.name)
def test_framed_record_bodies_agree_with_fastavro(case):
    """An independent decoder: malformed bodies are malformed, every other body is valid."""
    assert make_bad_input_corpus.decodes_exactly(case.schema, case.body) == (
        case.expect != Reason.BODY_DECODE_ERROR
    )


# --- reading a staging area back ---------------------------------------------------------------
def read_back(store, topic: str, dead_letter: tuple[str, str]) -> tuple[dict, dict, set]:
    """(offset → dead-letter record, offset → (table, event date), committed (first, last))."""
    listing = parse_listing(f.name for f in store.list())
    done_keys = {d.key for d in listing.done}
    committed = {(d.first_offset, d.last_offset) for d in listing.done if d.key.topic == topic}
    dead: dict[int, dict] = {}
    staged: dict[int, tuple] = {}
    for avro in listing.avro:
        assert avro.key in done_keys, f"{avro.name} has no done file"
        for record in reader(io.BytesIO(store.read_bytes(avro.name))):
            if avro.key.table_id == dead_letter:
                assert record["offset"] not in dead, f"offset {record['offset']} twice"
                dead[record["offset"]] = record
            else:
                offset = record["_kafka_offset"]
                assert offset not in staged, f"offset {offset} staged twice"
                staged[offset] = (avro.key.table_id, record["_event_date"].isoformat())
    return dead, staged, committed


def dead_letter_table(corpus: Corpus) -> tuple[str, str]:
    dl = corpus.pipeline(TOPIC).dead_letter
    return (dl.dataset, dl.table)


# --- the three policies: shared assertions (unit and integration) ------------------------------
def assert_dead_lettered(result: RangeResult, store, ids, topic: str) -> None:
    dead, staged, committed = read_back(store, topic, dead_letter_table(CORPUS))
    assert result.dead_letters == dict(CORPUS.expected_reasons())
    assert result.records == len(CORPUS.controls)
    assert committed == {(0, len(STREAM) - 1)}
    assert set(dead) | set(staged) == set(range(len(STREAM)))
    assert not set(dead) & set(staged)
    for offset, case in enumerate(STREAM):
        if case.is_control:
            assert staged[offset] == (case.table, case.event_date), case.name
            continue
        record = dead[offset]
        value = case.value(ids)
        assert (case.name, record["reason"]) == (case.name, case.expect)
        assert record["raw_value"] == value, case.name
        assert record["raw_key"] == case.key, case.name
        assert [(h["key"], h["value"]) for h in record["headers"]] == list(case.headers), case.name
        assert (record["topic"], record["partition"]) == (topic, 0)
        assert record["kafka_timestamp"] == datetime.fromtimestamp(
            (BASE_TIMESTAMP_MS + offset) / 1000, tz=UTC
        )
        header_id = int.from_bytes(value[1:5], "big") if value and len(value) >= 5 else None
        assert record["schema_id"] == header_id, case.name
        assert f"{topic}[0] offset {offset}" in record["error"], case.name


def assert_skipped(result: RangeResult, store, topic: str) -> None:
    dead, staged, committed = read_back(store, topic, dead_letter_table(CORPUS))
    assert result.skipped == dict(CORPUS.expected_reasons())
    assert result.dead_letters == {}
    assert dead == {}
    assert staged == {
        offset: (case.table, case.event_date)
        for offset, case in enumerate(STREAM)
        if case.is_control
    }
    assert committed == {(0, len(STREAM) - 1)}


def assert_failed_at(error: StageRangeFailed, case: CorpusCase, offset: int, topic: str) -> None:
    assert str(error).startswith(f"{topic}[0] offset {offset}: {case.expect}: "), str(error)


# --- unit: RangeStager with fake messages and a fake registry -------------------------------------
# Both stage paths: the Python path (the reference) and the native kernel, which hands every
# bad case back to it (kbqe_dagster/staging/native_kernel.py).
STAGE_PATHS = [
    "python",
    pytest.param(
        "native", marks=pytest.mark.skipif(not kernel_built(), reason=str(kernel_status()))
    ),
]


@pytest.fixture(scope="module", params=STAGE_PATHS)
def stage_path(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def dead_lettered(tmp_path_factory, stage_path):
    return run_stager(tmp_path_factory.mktemp("dead_letter"), "dead_letter", STREAM, stage_path)


def test_dead_letter_policy_files_every_case_and_stages_the_controls(dead_lettered):
    result, store = dead_lettered
    assert_dead_lettered(result, store, FAKE_IDS, TOPIC)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_dead_letter_reason_of_each_case(dead_lettered, name):
    _, store = dead_lettered
    dead, _, _ = read_back(store, TOPIC, dead_letter_table(CORPUS))
    case = next(c for c in CORPUS.bad if c.name == name)
    assert dead[OFFSET_OF[name]]["reason"] == case.expect


def test_skip_policy_counts_every_reason_and_dead_letters_nothing(tmp_path, stage_path):
    result, store = run_stager(tmp_path, "skip", STREAM, stage_path)
    assert_skipped(result, store, TOPIC)


def test_fail_policy_stops_at_the_first_bad_case(tmp_path, stage_path):
    first_bad = next(offset for offset, c in enumerate(STREAM) if not c.is_control)
    with pytest.raises(StageRangeFailed) as failed:
        run_stager(tmp_path, "fail", STREAM, stage_path)
    assert_failed_at(failed.value, STREAM[first_bad], first_bad, TOPIC)


@pytest.mark.parametrize("name", BAD_NAMES)
def test_fail_policy_names_topic_partition_offset_and_reason_of_each_case(
    tmp_path, name, stage_path
):
    case = next(c for c in CORPUS.bad if c.name == name)
    with pytest.raises(StageRangeFailed) as failed:
        run_stager(tmp_path, "fail", [CORPUS.controls[0], case], stage_path)
    assert_failed_at(failed.value, case, 1, TOPIC)


# --- integration: the real local Kafka and Apicurio, through stage_range -----------------------
@pytest.fixture(scope="module")
def produced_corpus(local_stack, local_endpoints):
    """The corpus schemas registered in Apicurio and the stream produced to a new topic."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic
    from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

    registry = SchemaRegistryClient({"url": local_endpoints.registry_url})
    ids = {
        name: registry.register_schema(f"kbqe-corpus-{name}", Schema(s.text, s.schema_type))
        for name, s in CORPUS.schemas.items()
    }
    topic = f"com.acme.corpus.t{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": local_endpoints.kafka_bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1, replication_factor=1)])[topic].result(30)
    producer = Producer(
        {
            "bootstrap.servers": local_endpoints.kafka_bootstrap,
            "enable.idempotence": True,
            "message.max.bytes": 1_000_000,
        }
    )
    offsets: list[int] = []
    for i, case in enumerate(STREAM):
        producer.produce(
            topic,
            value=case.value(ids),
            key=case.key,
            partition=0,
            headers=list(case.headers) or None,
            timestamp=BASE_TIMESTAMP_MS + i,
            on_delivery=lambda err, msg: offsets.append(-1 if err else msg.offset()),
        )
    producer.flush(30)
    assert offsets == list(range(len(STREAM)))
    return topic, ids, local_endpoints


def real_context(produced, tmp_path: Path, policy: str) -> tuple[StageContext, OffsetRange]:
    topic, _, ends = produced
    ctx = stage_context(
        KafkaSettings(ends.kafka_bootstrap),
        RegistrySettings(ends.registry_url),
        StagingLocation(str(tmp_path / "staging")),
        CORPUS.pipeline(topic, policy),
        topic,
    )
    return ctx, OffsetRange(topic, 0, 0, len(STREAM))


@pytest.mark.integration
@pytest.mark.parametrize("policy", ["dead_letter", "skip", "fail"])
def test_corpus_through_real_kafka_and_registry(produced_corpus, tmp_path, policy):
    ctx, rng = real_context(produced_corpus, tmp_path, policy)
    topic, ids, _ = produced_corpus
    store = ctx.staging.open()
    if policy == "fail":
        with pytest.raises(StageRangeFailed) as failed:
            stage_range(ctx, rng)
        first_bad = next(offset for offset, c in enumerate(STREAM) if not c.is_control)
        assert_failed_at(failed.value, STREAM[first_bad], first_bad, topic)
        assert store.list() == []  # nothing of the range is committed
        return
    result = stage_range(ctx, rng)
    assert result.committed_last == rng.last
    if policy == "dead_letter":
        assert_dead_lettered(result, store, ids, topic)
    else:
        assert_skipped(result, store, topic)
