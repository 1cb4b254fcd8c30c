"""Topics with ``transforms``: Avro records decoded, transformed and staged under the derived
schema (its own schema id), routed and dated by the transformed fields; a record or schema the
transforms cannot apply to is dead-lettered as ``transform_failed``; ``format: json`` goes
through the same step."""

from __future__ import annotations

import hashlib
import hmac
import io
import json
from pathlib import Path

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.formats.source_format import DECLARED_SCHEMA_IDS, declared_schema_id
from kbqe_dagster.core.protocol.naming import parse_name
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.dead_letter_record import DEAD_LETTER_SCHEMA_ID
from kbqe_dagster.core.record.enrichment import extended_schema
from kbqe_dagster.formats.json_stage import JsonRangeStager
from kbqe_dagster.formats.transform_stage import TransformRangeStager
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stager_class
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster.staging.native_kernel import NativeStaging
from kbqe_dagster_tests.corpus.bad_input_corpus import FakeMessage
from kbqe_dagster_tests.support.fakes import FakeSchemaRegistry
from kbqe_dagster_tests.support.framing import avro_framed

TOPIC = "shop.orders"
KEY_ENV = "KBQE_TEST_TRANSFORM_KEY"
SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "kind", "type": "string"},
        {"name": "email", "type": "string"},
        {"name": "amount", "type": "string"},
        {"name": "created", "type": "string"},
        {"name": "debug", "type": ["null", "string"], "default": None},
    ],
}
OLD_SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "kind", "type": "string"},
    ],
}
TRANSFORMS = [
    {"compute": "tableName", "expression": "lower(kind) + 's'", "type": "string"},
    {"cast": "amount", "to": "double"},
    {"mask": "email", "key_env": KEY_ENV},
    {"timestamp": "created", "to": "timestamp_millis", "zone": "Europe/Paris"},
    {"add": "trace_id", "header": "trace-id"},
    {"rename": "id", "to": "order_id"},
    {"drop": "debug"},
]
IDS = {7: SCHEMA, 8: OLD_SCHEMA}


def framed(schema_id: int, record: dict, trailing: bytes = b"") -> bytes:
    return avro_framed(schema_id, IDS[schema_id], record, trailing)


def order(**changes) -> dict:
    return {
        "id": 1,
        "kind": "Book",
        "email": "ann@example.com",
        "amount": "12.50",
        "created": "2024-09-13T00:30:00",
        "debug": "x",
        **changes,
    }


def stage(tmp_path: Path, values, config, headers=()):
    staging = StagingLocation(str(tmp_path / "staging"))
    ctx = StageContext(
        KafkaSettings("127.0.0.1:9"),
        RegistrySettings("http://127.0.0.1:9"),
        staging,
        config,
        TOPIC,
        native_kernel=True,
    )
    rng = OffsetRange(TOPIC, 0, 0, len(values))
    workdir = tmp_path / "work"
    workdir.mkdir()
    stager = stager_class(ctx)(ctx, rng, workdir)
    stager.lookup = FakeSchemaRegistry.avro(IDS)
    for offset, value in enumerate(values):
        stager.add(
            FakeMessage(TOPIC, 0, offset, value, b"k", list(headers), 1_726_238_205_000 + offset)
        )
    store = staging.open()
    return stager, stager.commit(store, rng.end_exclusive), store


def read(store, name: str) -> tuple[dict, list[dict]]:
    reader = fastavro.reader(io.BytesIO(store.read_bytes(name)))
    return reader.writer_schema, list(reader)


def with_shop(transforms):
    return [{"add": "shop", "value": "sales"}] + transforms


@pytest.fixture
def shop_config(monkeypatch):
    monkeypatch.setenv(KEY_ENV, "k3y")

    def make(transforms=TRANSFORMS, **topic):
        return parse_pipeline_config(
            {
                "version": 1,
                "topics": [
                    {
                        "name": TOPIC,
                        "transforms": with_shop(transforms),
                        "routing": {
                            "mode": "fields",
                            "dataset_field": "shop",
                            "table_field": "tableName",
                        },
                        "event_time": {"fields": ["created"], "date_rule": "utc"},
                        **topic,
                    }
                ],
                "allowed_destinations": ["sales.*"],
            }
        )

    return make


def test_avro_records_are_staged_transformed_under_the_derived_schema_and_its_own_id(
    tmp_path: Path, shop_config
) -> None:
    values = [framed(7, order()), framed(7, order(id=2, kind="Game", amount="3"))]
    stager, result, store = stage(tmp_path, values, shop_config(), headers=[("trace-id", b"t-1")])
    assert isinstance(stager, TransformRangeStager)
    assert NativeStaging.for_stager(stager) is None  # computed, masked: the Python path
    assert (result.records, result.dead_letters) == (2, {})
    files = {parse_name(n).key.table: n for n, _ in result.files}
    assert sorted(files) == ["books", "games"]  # routed by the computed field
    schema, [book] = read(store, files["books"])
    output = stager.staged_schemas[7].compiled.output_schema
    assert (
        parse_name(files["books"]).key.schema_id
        == declared_schema_id(output)
        >= DECLARED_SCHEMA_IDS
    )
    assert [f["name"] for f in schema["fields"]] == [
        f["name"] for f in extended_schema(output, stager.enrichment)["fields"]
    ]
    assert book["order_id"] == 1 and "id" not in book and "debug" not in book
    assert book["amount"] == 12.5 and book["trace_id"] == "t-1" and book["shop"] == "sales"
    assert book["email"] == hmac.new(b"k3y", b"ann@example.com", hashlib.sha256).hexdigest()
    # 00:30 in Paris is 22:30 UTC the day before: event time reads the transformed field.
    assert book["created"].isoformat() == "2024-09-12T22:30:00+00:00"
    assert str(book["_event_date"]) == "2024-09-12"
    assert book["_kafka_offset"] == 0
    assert read(store, files["games"])[1][0]["amount"] == 3.0


def test_a_record_that_does_not_transform_is_dead_lettered_naming_transform_and_field(
    tmp_path: Path, shop_config
) -> None:
    values = [framed(7, order()), framed(7, order(amount="twelve")), framed(7, order(), b"\x00")]
    _, result, store = stage(tmp_path, values, shop_config())
    assert result.records == 1
    assert result.dead_letters == {"transform_failed": 1, "body_decode_error": 1}
    [dead_name] = [
        n for n, _ in result.files if parse_name(n).key.schema_id == DEAD_LETTER_SCHEMA_ID
    ]
    letters = {letter["offset"]: letter for letter in read(store, dead_name)[1]}
    assert letters[1]["reason"] == "transform_failed"
    assert "transforms[2] (cast) field 'amount': 'twelve' is not a double" in letters[1]["error"]
    assert letters[1]["raw_value"] == values[1]
    assert letters[2]["reason"] == "body_decode_error"
    assert "1 byte(s) left after the record" in letters[2]["error"]


def test_a_schema_the_transforms_cannot_apply_to_dead_letters_its_messages_and_asks_once(
    tmp_path: Path, shop_config
) -> None:
    values = [
        framed(8, {"id": 1, "kind": "Book"}),
        framed(8, {"id": 2, "kind": "Book"}),
        framed(7, order()),
    ]
    stager, result, store = stage(tmp_path, values, shop_config())
    assert result.records == 1 and result.dead_letters == {"transform_failed": 2}
    assert stager.lookup.asked == [8, 7]
    [dead_name] = [
        n for n, _ in result.files if parse_name(n).key.schema_id == DEAD_LETTER_SCHEMA_ID
    ]
    errors = [letter["error"] for letter in read(store, dead_name)[1]]
    assert all(
        "transforms[2] (cast) field 'amount': is not in the record schema at this point "
        "(record schema Order)" in error
        for error in errors
    )


def test_a_missing_hmac_key_stops_the_range_naming_the_variable_not_a_value(
    tmp_path: Path, shop_config, monkeypatch
) -> None:
    config = shop_config()
    monkeypatch.delenv(KEY_ENV)
    with pytest.raises(
        ConfigError,
        match=rf"topics\[0\]\.transforms\[3\]\.key_env: environment "
        rf"variable {KEY_ENV} is not set",
    ):
        stage(tmp_path, [framed(7, order())], config)


def test_json_topics_apply_transforms_through_the_same_step(tmp_path: Path) -> None:
    json_schema = {
        "type": "record",
        "name": "Click",
        "namespace": "web",
        "fields": [
            {"name": "url", "type": "string"},
            {"name": "ms", "type": "long"},
            {"name": "user", "type": "string"},
        ],
    }
    config = parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": TOPIC,
                    "format": "json",
                    "schema": json_schema,
                    "routing": {"mode": "static", "dataset": "web", "table": "clicks"},
                    "transforms": [
                        {"timestamp": "ms", "epoch_unit": "ms", "to": "timestamp_micros"},
                        {"mask": "user", "method": None},
                        {"add": "source", "message": "topic"},
                    ],
                    "event_time": {"fields": ["ms"]},
                }
            ],
        }
    )
    value = json.dumps({"url": "/a", "ms": 1_726_238_205_123, "user": "ann"}).encode()
    stager, result, store = stage(tmp_path, [value], config)
    assert isinstance(stager, JsonRangeStager)
    [(name, _)] = result.files
    output = stager.staged_schemas[declared_schema_id(json_schema)].compiled.output_schema
    assert (
        parse_name(name).key.schema_id
        == declared_schema_id(output)
        != declared_schema_id(json_schema)
    )
    schema, [click] = read(store, name)
    assert click["ms"].isoformat() == "2024-09-13T14:36:45.123000+00:00"
    assert click["user"] is None and click["source"] == TOPIC
    assert str(click["_event_date"]) == "2024-09-13"


NAMED = {
    "type": "record",
    "name": "Order",
    "namespace": "shop",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "kind", "type": "string"},
        {"name": "created", "type": "string"},
        {"name": "status", "type": {"type": "enum", "name": "Status", "symbols": ["NEW", "OLD"]}},
        {"name": "previous", "type": "Status"},
    ],
}


def test_dropping_the_field_that_defines_a_named_type_stages_the_records(
    tmp_path: Path, shop_config, monkeypatch
) -> None:
    """The derived schema defines Status where ``previous`` uses it: the records stage (before,
    fastavro refused the derived schema and the range failed on every retry)."""
    monkeypatch.setitem(IDS, 9, NAMED)
    record = {"id": 1, "kind": "Book", "created": "2024-09-13T00:30:00",
              "status": "NEW", "previous": "OLD"}  # fmt: skip
    config = shop_config([{"add": "tableName", "value": "books"}, {"drop": "status"}])
    stager, result, store = stage(tmp_path, [framed(9, record)], config)
    assert (result.records, result.dead_letters) == (1, {})
    [(name, _)] = result.files
    schema, [row] = read(store, name)
    assert row["previous"] == "OLD" and "status" not in row
