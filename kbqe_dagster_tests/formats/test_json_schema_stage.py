"""``format: json_schema``: Confluent-framed JSON validated against its registry JSON Schema,
staged under the Avro record derived once per schema id, files carrying the registry id;
every bad input with its reason (the registry is faked at the SchemaLookup boundary)."""

from __future__ import annotations

import io
from pathlib import Path

import fastavro
import pytest

from kbqe_dagster.core.errors import ConfigError, StageRangeFailed
from kbqe_dagster.core.formats.source_format import SourceFormat
from kbqe_dagster.core.protocol.naming import AvroFileName, parse_name
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.formats.json_schema_stage import JsonSchemaKernelStaging, JsonSchemaRangeStager
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stager_class
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging, kernel_built
from kbqe_dagster_tests.corpus.bad_input_corpus import FakeMessage
from kbqe_dagster_tests.support.json_schema_format import (
    GOOD,
    IDS,
    TOPIC,
    fake_registry,
    framed,
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


def _kernel_class() -> type:
    import kbqe_dagster_kernel  # built: kernel_built() said so

    return kbqe_dagster_kernel.StageKernel


@pytest.mark.parametrize("native", [False, True])
def test_a_json_schema_topic_has_its_own_stager_and_kernel_driver(tmp_path: Path, native) -> None:
    """Its own stager, and the native kernel's driver of its own when the kernel is built and
    switched on (``KBQE_STAGE_KERNEL=off`` forces the Python path); transforms the kernel
    does not do (a computed field, say) keep it on the Python path, a drop need not (each schema id's
    drop is then the kernel's or not: test_json_schema_kernel.py)."""
    ctx = StageContext(
        KafkaSettings("127.0.0.1:9"),
        RegistrySettings("http://127.0.0.1:9"),
        StagingLocation(str(tmp_path)),
        pipeline(),
        TOPIC,
        native_kernel=native,
    )
    assert ctx.topic.format is SourceFormat.JSON_SCHEMA
    assert stager_class(ctx) is JsonSchemaRangeStager
    stager = JsonSchemaRangeStager(ctx, OffsetRange(TOPIC, 0, 0, 1), tmp_path)
    assert stager.native_driver is JsonSchemaKernelStaging
    driver = NativeStaging.for_stager(stager)
    if native and kernel_built() and hasattr(_kernel_class(), "add_json_schema_id"):
        assert isinstance(driver, JsonSchemaKernelStaging)
    else:
        assert driver is None
    reshaped = StageContext(ctx.kafka, ctx.registry, ctx.staging,
                            pipeline(transforms=[{"compute": "n", "expression": "1", "type": "long"}]), TOPIC, native_kernel=native)  # fmt: skip
    assert (
        NativeStaging.for_stager(
            JsonSchemaRangeStager(reshaped, OffsetRange(TOPIC, 0, 0, 1), tmp_path)
        )
        is None
    )
    dropping = StageContext(ctx.kafka, ctx.registry, ctx.staging,
                            pipeline(transforms=[{"drop": "lines"}]), TOPIC, native_kernel=native)  # fmt: skip
    driver = NativeStaging.for_stager(
        JsonSchemaRangeStager(dropping, OffsetRange(TOPIC, 0, 0, 1), tmp_path)
    )
    takes_drops = kernel_built() and hasattr(_kernel_class(), "add_transformed_json_schema_id")
    assert isinstance(driver, JsonSchemaKernelStaging) is (native and takes_drops)


def test_values_are_staged_per_registry_id_read_back_field_by_field(tmp_path: Path) -> None:
    later = {**GOOD, "id": 2, "placed_at": "2024-09-14T00:30:00Z", "coupon": "XMAS", "lines": []}
    result, store, registry = stage(
        tmp_path, [framed("v1", GOOD), framed("v2", later), framed("v1", {**GOOD, "id": 3})]
    )
    assert (result.records, result.dead_letters) == (3, {})
    names = {parse_name(n).key.schema_id: n for n, _ in result.files}
    assert set(names) == {IDS["v1"], IDS["v2"]}
    name = parse_name(names[IDS["v1"]])
    assert isinstance(name, AvroFileName) and (name.key.dataset, name.key.table) == (
        "shop",
        "orders",
    )
    first, third = records(store, names[IDS["v1"]])
    assert first["id"] == 1 and first["lines"] == [{"sku": "a", "qty": 2}]
    assert first["placed_at"].isoformat() == "2024-09-13T12:36:45.123000+00:00"
    assert str(first["_event_date"]) == "2024-09-13" and first["_kafka_offset"] == 0
    assert third["id"] == 3 and "coupon" not in third
    [second] = records(store, names[IDS["v2"]])
    assert second["coupon"] == "XMAS" and str(second["_event_date"]) == "2024-09-14"
    # The v2 file's record columns are v1's, then the new property: the table widens at the
    # end (the enrichment columns are a prefix of every file).
    reader = fastavro.reader(io.BytesIO(store.read_bytes(names[IDS["v2"]])))
    columns = [f["name"] for f in reader.writer_schema["fields"] if not f["name"].startswith("_")]
    assert columns == ["datasetName", "tableName", "id", "placed_at", "lines", "coupon"]
    assert sorted(registry.asked) == [IDS["v1"], IDS["v2"]]  # once per schema id


@pytest.mark.parametrize(
    ("value", "reason", "detail"),
    [
        (framed("v1", b"{oops"), "json_decode_error", "not JSON"),
        (framed("v1", b"\xff\xfe{}"), "json_decode_error", "not UTF-8"),
        (framed("v1", b'{"id": NaN}'), "json_decode_error", "NaN is not JSON"),
        (
            framed("v1", {**GOOD, "id": "one"}),
            "json_schema_mismatch",
            "at /id: 'one' is not of type 'integer'",
        ),
        (
            framed("v1", {**GOOD, "id": 0}),
            "json_schema_mismatch",
            "at /id: 0 is less than the minimum of 1",
        ),
        (
            framed("v1", {k: v for k, v in GOOD.items() if k != "id"}),
            "json_schema_mismatch",
            "at the root: 'id' is a required property",
        ),
        (
            framed("v1", {**GOOD, "lines": [{"sku": "a", "qty": 1}, {"sku": "b"}]}),
            "json_schema_mismatch",
            "at /lines/1: 'qty' is a required property",
        ),
        (framed("v1", {**GOOD, "coupon": "x"}), "json_schema_mismatch", "Additional properties"),
        (framed("v1", [1, 2]), "json_schema_mismatch", "at the root"),
        (
            framed("v1", {**GOOD, "placed_at": "2024-09-13 noon"}),
            "json_schema_mismatch",
            "is not an RFC 3339 date-time at /placed_at",
        ),
        (
            framed("unmappable", {"pay": {"card": "x"}}),
            "unmappable_json_schema",
            "schema id 13 has no Avro form: oneOf of several schemas (a union has no one column "
            "layout) at /properties/pay/oneOf",
        ),
        (
            framed("invalid", {}),
            "unmappable_json_schema",
            "schema id 15 is not a valid JSON Schema",
        ),
        (
            framed("avro", {"id": 1}),
            "non_json_schema",
            "schema id 14 is a AVRO schema; a json_schema topic needs a JSON Schema",
        ),
        (encode_frame(99, b"{}"), "unknown_schema_id", "schema id 99 is not in the registry"),
        (b"\x01" + framed("v1", GOOD)[1:], "bad_magic", "bad magic byte 0x01"),
        (b"\x00\x00", "too_short", "too short"),
        (None, "tombstone", "tombstone"),
    ],
)
def test_bad_input_is_dead_lettered_with_its_reason(
    tmp_path: Path, value: bytes | None, reason: str, detail: str
) -> None:
    result, store, _ = stage(tmp_path, [framed("v1", GOOD), value])
    assert result.records == 1 and result.dead_letters == {reason: 1}
    [letters] = [n for n, _ in result.files if "dead_letters" in n]
    [letter] = records(store, letters)
    assert letter["reason"] == reason and detail in letter["error"], letter["error"]
    assert "shop.orders[0] offset 1" in letter["error"] and letter["raw_value"] == value


def test_a_schema_id_without_avro_form_dead_letters_each_message_asking_once(
    tmp_path: Path,
) -> None:
    bad = framed("unmappable", {"pay": {"card": "x"}})
    result, _, registry = stage(tmp_path, [bad, framed("v1", GOOD), bad, bad])
    assert result.records == 1 and result.dead_letters == {"unmappable_json_schema": 3}
    assert registry.asked.count(IDS["unmappable"]) == 1


def test_the_dead_letter_carries_the_framed_schema_id(tmp_path: Path) -> None:
    result, store, _ = stage(tmp_path, [framed("v2", {**GOOD, "id": -1})])
    [letters] = [n for n, _ in result.files if "dead_letters" in n]
    assert records(store, letters)[0]["schema_id"] == IDS["v2"]


def test_the_fail_policy_stops_the_range_naming_the_offset(tmp_path: Path) -> None:
    with pytest.raises(StageRangeFailed, match=r"shop.orders\[0\] offset 1: json_schema_mismatch"):
        stage(
            tmp_path, [framed("v1", GOOD), framed("v1", {**GOOD, "id": "x"})], on_bad_input="fail"
        )


def test_routing_by_schema_name_reads_the_title_as_the_avro_record_name(tmp_path: Path) -> None:
    result, _, _ = stage(
        tmp_path, [framed("v1", GOOD)], routing={"mode": "schema_name", "dataset": "shop"}
    )
    assert [parse_name(n).key.table for n, _ in result.files] == ["order"]


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        (
            {"schema": {"type": "record", "name": "R", "fields": []}},
            "topics[0].schema: only with format: json",
        ),
        (
            {
                "keyed": {"key": ["id"], "version": "id"},
                "routing": {"mode": "static", "dataset": "shop", "table": "t"},
            },
            "topics[0].keyed: not with format: json_schema",
        ),
    ],
)
def test_json_schema_topic_mistakes_are_config_errors(topic, expected) -> None:
    with pytest.raises(ConfigError) as caught:
        pipeline(**topic)
    assert expected in str(caught.value)


def test_transforms_apply_to_the_records_a_json_schema_derives(tmp_path: Path) -> None:
    """With ``transforms``, the Avro form of each value takes the shared transform step: the
    files carry the derived schema's own id, and a value a transform cannot take is
    dead-lettered as ``transform_failed``."""
    transforms = [
        {"compute": "line_count", "expression": "len(lines)", "type": "long"},
        {"drop": "lines"},
        {"rename": "id", "to": "order_id"},
    ]
    result, store, _ = stage(
        tmp_path,
        [
            framed("v1", GOOD),
            framed("v1", {**GOOD, "id": 2, "lines": []}),
            framed("v1", {key: v for key, v in GOOD.items() if key != "lines"}),
        ],
        routing={"mode": "static", "dataset": "shop", "table": "orders"},
        transforms=transforms,
    )
    assert result.records == 2 and result.dead_letters == {"transform_failed": 1}
    [name] = [n for n, _ in result.files if ".shop.orders." in n]
    assert parse_name(name).key.schema_id not in IDS.values()  # the derived schema's id
    first, second = records(store, name)
    assert (first["order_id"], first["line_count"], "lines" in first) == (1, 1, False)
    assert (second["order_id"], second["line_count"]) == (2, 0)
