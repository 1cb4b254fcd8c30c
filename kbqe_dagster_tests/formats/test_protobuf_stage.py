"""``format: protobuf``: Confluent-framed Protobuf parsed with its registry ``.proto`` (compiled
by the bundled protoc, imports of registered subjects and well-known types included), staged
under the Avro record derived once per (schema id, message indexes); files carry the registry
id for a schema's first message; every bad input with its reason (the registry is faked at the
SchemaLookup boundary; protoc and the protobuf runtime are real)."""

from __future__ import annotations

import io
from pathlib import Path

import fastavro
import pytest

from kbqe_dagster.core.errors import ConfigError, StageRangeFailed
from kbqe_dagster.core.formats.source_format import DECLARED_SCHEMA_IDS, SourceFormat
from kbqe_dagster.core.protocol.naming import parse_name
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.formats.protobuf_kernel import ProtobufKernelStaging
from kbqe_dagster.formats.protobuf_stage import ProtobufRangeStager
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import (
    RegistrySettings,
)
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stager_class
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging
from kbqe_dagster_tests.corpus.bad_input_corpus import FakeMessage
from kbqe_dagster_tests.support.protobuf_format import (
    IDS,
    ORDER_V1,
    ORDER_V2,
    REF,
    REFUND,
    TOPIC,
    fake_registry,
    framed,
    order,
    pipeline,
)


def stage(tmp_path: Path, values: list[bytes | None], **topic):
    staging = StagingLocation(str(tmp_path / "staging"))
    ctx = StageContext(
        KafkaSettings("127.0.0.1:9"),
        RegistrySettings("http://127.0.0.1:9"),
        staging,
        pipeline(**topic),
        TOPIC,
    )
    rng = OffsetRange(TOPIC, 0, 0, len(values))
    workdir = tmp_path / "work"
    workdir.mkdir()
    stager = stager_class(ctx)(ctx, rng, workdir)
    registry = stager.lookup = fake_registry()
    for offset, value in enumerate(values):
        stager.add(FakeMessage(TOPIC, 0, offset, value, b"k", [], 1_726_238_205_000 + offset))
    store = staging.open()
    return stager.commit(store, rng.end_exclusive), store, registry


def records(store, name: str) -> list[dict]:
    return list(fastavro.reader(io.BytesIO(store.read_bytes(name))))


def columns(store, name: str) -> list[str]:
    reader = fastavro.reader(io.BytesIO(store.read_bytes(name)))
    return [f["name"] for f in reader.writer_schema["fields"] if not f["name"].startswith("_")]


def test_a_protobuf_topic_has_its_own_stager_and_kernel_driver(tmp_path: Path) -> None:
    ctx = StageContext(
        KafkaSettings("127.0.0.1:9"),
        RegistrySettings("http://127.0.0.1:9"),
        StagingLocation(str(tmp_path)),
        pipeline(),
        TOPIC,
        native_kernel=False,
    )
    assert ctx.topic.format is SourceFormat.PROTOBUF
    assert stager_class(ctx) is ProtobufRangeStager
    assert ProtobufRangeStager.native_driver is ProtobufKernelStaging  # formats/protobuf_kernel.py
    stager = ProtobufRangeStager(ctx, OffsetRange(TOPIC, 0, 0, 1), tmp_path)
    assert stager.native_kernel is True  # no transforms, no destinations
    assert NativeStaging.for_stager(stager) is None  # KBQE_STAGE_KERNEL=off: the Python path


def test_messages_are_staged_per_registry_id_read_back_field_by_field(tmp_path: Path) -> None:
    later = order(ORDER_V2, 2, coupon="XMAS")
    result, store, registry = stage(
        tmp_path,
        [
            framed("v1", order()),
            framed("v2", later),
            encode_frame(IDS["v1"], b"\x02\x00" + order(i=3).SerializeToString()),
        ],
    )  # explicit [0]
    assert (result.records, result.dead_letters) == (3, {})
    names = {parse_name(n).key.schema_id: n for n, _ in result.files}
    assert set(names) == {IDS["v1"], IDS["v2"]}  # the registry ids: the schemas' first message
    assert (parse_name(names[IDS["v1"]]).key.dataset, parse_name(names[IDS["v1"]]).key.table) == (
        "shop",
        "orders",
    )
    first, third = records(store, names[IDS["v1"]])
    assert (first["id"], first["datasetName"]) == (1, "shop")
    assert first["placed_at"].isoformat() == "2024-09-13T14:36:46+00:00"
    assert first["total"] == {"currency": "EUR", "units": 10}  # from the referenced subject
    assert first["lines"] == [{"sku": "s1", "qty": 1}]
    assert str(first["_event_date"]) == "2024-09-13" and first["_kafka_offset"] == 0
    assert third["id"] == 3 and "coupon" not in third
    [second] = records(store, names[IDS["v2"]])
    assert second["coupon"] == "XMAS"
    # v2's columns are v1's, then the appended field: the table widens at the end.
    assert columns(store, names[IDS["v2"]]) == [
        "datasetName",
        "tableName",
        "id",
        "placed_at",
        "total",
        "lines",
        "coupon",
    ]
    assert sorted(registry.asked) == [IDS["v1"], IDS["v2"]]  # once per schema id
    assert registry.references == list(REF) * 2  # once per schema id that imports it


def test_another_message_type_of_a_schema_gets_a_declared_file_schema_id(tmp_path: Path) -> None:
    refund = REFUND(order_id=5)
    refund.placed_at.seconds = 1_726_238_205
    result, store, _ = stage(
        tmp_path,
        [framed("v1", order()), framed("v1", refund, (1,))],
        routing={"mode": "schema_name", "dataset": "shop"},
    )
    assert result.records == 2 and result.dead_letters == {}
    tables = {parse_name(n).key.table: parse_name(n).key.schema_id for n, _ in result.files}
    assert tables["order"] == IDS["v1"]
    assert tables["refund"] >= DECLARED_SCHEMA_IDS  # one registry id cannot name two file schemas
    [name] = [n for n, _ in result.files if ".refund." in n]
    assert records(store, name)[0]["order_id"] == 5 and columns(store, name) == [
        "order_id",
        "placed_at",
    ]


@pytest.mark.parametrize(
    ("value", "reason", "detail"),
    [
        (framed("v1", b"\xff\xff"), "protobuf_decode_error", "the body is not a acme.orders.Order"),
        (
            framed("v1", order(), (7,)),
            "protobuf_decode_error",
            "message indexes [7] name no message of kbqe_registry_schema.proto",
        ),
        (encode_frame(IDS["v1"], b"\x01"), "protobuf_decode_error", "negative count"),
        (encode_frame(IDS["v1"], b""), "protobuf_decode_error", "ends inside a varint"),
        (
            framed("v1", ORDER_V1(id=1, placed_at={"seconds": 10**12})),
            "protobuf_decode_error",
            "acme.orders.Order.placed_at: Timestamp 1000000000000s",
        ),
        (
            framed("recursive", b""),
            "unmappable_protobuf_schema",
            "schema id 23 message Node has no Avro form: a recursive message (Node → Node)",
        ),
        (
            framed("broken", b""),
            "unmappable_protobuf_schema",
            'schema id 24: does not compile: kbqe_registry_schema.proto:1:36: "Missing" is not defined.',
        ),
        (
            framed("lost_ref", b""),
            "unmappable_protobuf_schema",
            "schema id 27: its reference 'acme/common.proto' (subject 'acme-common' version 9) is not "
            "in the registry",
        ),
        (
            framed("avro", b""),
            "non_protobuf_schema",
            "schema id 25 is a AVRO schema; a protobuf topic needs a Protobuf schema",
        ),
        (framed("json", b""), "non_protobuf_schema", "schema id 26 is a JSON schema"),
        (encode_frame(99, b"\x00"), "unknown_schema_id", "schema id 99 is not in the registry"),
        (b"\x01" + framed("v1", order())[1:], "bad_magic", "bad magic byte 0x01"),
        (b"\x00\x00", "too_short", "too short"),
        (None, "tombstone", "tombstone"),
    ],
)
def test_bad_input_is_dead_lettered_with_its_reason(
    tmp_path: Path, value: bytes | None, reason: str, detail: str
) -> None:
    result, store, _ = stage(tmp_path, [framed("v1", order()), value])
    assert result.records == 1 and result.dead_letters == {reason: 1}
    [letters] = [n for n, _ in result.files if "dead_letters" in n]
    [letter] = records(store, letters)
    assert letter["reason"] == reason and detail in letter["error"], letter["error"]
    assert "shop.orders[0] offset 1" in letter["error"] and letter["raw_value"] == value


def test_a_schema_that_does_not_compile_is_asked_and_compiled_once(tmp_path: Path) -> None:
    bad = framed("broken", b"")
    result, _, registry = stage(tmp_path, [bad, framed("v1", order()), bad, bad])
    assert result.records == 1 and result.dead_letters == {"unmappable_protobuf_schema": 3}
    assert registry.asked.count(IDS["broken"]) == 1


def test_the_fail_policy_stops_the_range_naming_the_offset(tmp_path: Path) -> None:
    with pytest.raises(StageRangeFailed, match=r"shop.orders\[0\] offset 1: protobuf_decode_error"):
        stage(tmp_path, [framed("v1", order()), framed("v1", b"\xff")], on_bad_input="fail")


def test_keyed_is_not_a_protobuf_option() -> None:
    with pytest.raises(ConfigError, match="topics\\[0\\].keyed: not with format: protobuf"):
        pipeline(
            keyed={"key": ["id"], "version": "id"},
            routing={"mode": "static", "dataset": "shop", "table": "t"},
        )


def test_transforms_apply_to_the_records_a_protobuf_schema_derives(tmp_path: Path) -> None:
    transforms = [
        {"compute": "line_count", "expression": "len(lines)", "type": "long"},
        {"drop": "lines"},
        {"rename": "id", "to": "order_id"},
    ]
    result, store, _ = stage(
        tmp_path,
        [framed("v1", order()), framed("v1", order(i=2))],
        routing={"mode": "static", "dataset": "shop", "table": "orders"},
        transforms=transforms,
    )
    assert result.records == 2 and result.dead_letters == {}
    [name] = [n for n, _ in result.files]
    assert parse_name(name).key.schema_id >= DECLARED_SCHEMA_IDS  # the derived schema's id
    first, second = records(store, name)
    assert (first["order_id"], first["line_count"], "lines" in first) == (1, 1, False)
    assert second["order_id"] == 2 and second["total"] == {"currency": "EUR", "units": 20}


def test_indexes_naming_no_message_are_refused_without_growing_the_cache(tmp_path: Path) -> None:
    ctx = StageContext(
        KafkaSettings("127.0.0.1:9"),
        RegistrySettings("http://127.0.0.1:9"),
        StagingLocation(str(tmp_path / "staging")),
        pipeline(),
        TOPIC,
    )
    stager = ProtobufRangeStager(ctx, OffsetRange(TOPIC, 0, 0, 50), tmp_path)
    stager.lookup = fake_registry()
    garbage = [framed("v1", order(), (i,)) for i in range(2, 50)]
    for offset, value in enumerate([framed("v1", order()), *garbage]):
        stager.add(FakeMessage(TOPIC, 0, offset, value, b"k", [], 1_726_238_205_000))
    assert stager.dead_letters == {"protobuf_decode_error": 48}
    assert list(stager.decoders[IDS["v1"]].types) == [(0,)]  # only the real message type
