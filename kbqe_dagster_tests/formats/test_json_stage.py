"""``format: json``: schemaless JSON objects staged under the topic's declared Avro schema,
routed and dated like Avro records, with the JSON reasons in the dead letters."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.formats.source_format import (
    DECLARED_SCHEMA_IDS,
    SourceFormat,
    declared_schema_id,
)
from kbqe_dagster.core.protocol.naming import AvroFileName, parse_name
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.stager_registry import stager_class
from kbqe_dagster.staging.context import StageContext
from kbqe_dagster_tests.corpus.bad_input_corpus import FakeMessage
from kbqe_dagster_tests.support.json_format import GOOD, SCHEMA, TOPIC, pipeline


def stage(tmp_path: Path, values: list[bytes | None]):
    config = pipeline()
    staging = StagingLocation(str(tmp_path / "staging"))
    ctx = StageContext(
        KafkaSettings("127.0.0.1:9"), RegistrySettings("http://127.0.0.1:9"), staging, config, TOPIC
    )
    rng = OffsetRange(TOPIC, 0, 0, len(values))
    workdir = tmp_path / "work"
    workdir.mkdir()
    stager = stager_class(ctx)(ctx, rng, workdir)
    for offset, value in enumerate(values):
        stager.add(FakeMessage(TOPIC, 0, offset, value, b"k", [], 1_726_238_205_000 + offset))
    store = staging.open()
    return stager.commit(store, rng.end_exclusive), store


def records(store, name: str) -> list[dict]:
    return list(fastavro.reader(io.BytesIO(store.read_bytes(name))))


def test_json_objects_are_staged_under_the_declared_schema_and_routed_by_their_fields(
    tmp_path: Path,
) -> None:
    other = {**GOOD, "tableName": "visits", "url": "/b", "user": None}
    result, store = stage(tmp_path, [json.dumps(GOOD).encode(), json.dumps(other).encode()])
    assert (result.records, result.dead_letters) == (2, {})
    files = {parse_name(n).key.table: n for n, _ in result.files}
    [click] = records(store, files["clicks"])
    assert click["url"] == "/a" and click["user"] == {"id": 7}
    assert click["_kafka_offset"] == 0 and str(click["_event_date"]) == "2024-09-13"
    assert records(store, files["visits"])[0]["user"] is None
    name = parse_name(files["clicks"])
    assert isinstance(name, AvroFileName)
    assert name.key.schema_id == declared_schema_id(SCHEMA) >= DECLARED_SCHEMA_IDS


@pytest.mark.parametrize(
    ("value", "reason", "detail"),
    [
        (b"{not json", "json_decode_error", "not JSON"),
        (b"[1, 2]", "json_decode_error", "expected a JSON object, got list"),
        (b"\xff\xfe", "json_decode_error", "not JSON"),
        (json.dumps({**GOOD, "at": "yesterday"}).encode(), "json_schema_mismatch", "at"),
        (
            json.dumps({k: v for k, v in GOOD.items() if k != "url"}).encode(),
            "json_schema_mismatch",
            "url",
        ),
        (json.dumps({**GOOD, "user": {"id": "seven"}}).encode(), "json_schema_mismatch", "id"),
        (None, "tombstone", "tombstone"),
    ],
)
def test_values_that_do_not_fit_are_dead_lettered_with_their_reason(
    tmp_path: Path, value: bytes | None, reason: str, detail: str
) -> None:
    result, store = stage(tmp_path, [json.dumps(GOOD).encode(), value])
    assert result.records == 1 and result.dead_letters == {reason: 1}
    [letters] = [n for n, _ in result.files if "dead_letters" in n]
    [letter] = records(store, letters)
    assert letter["reason"] == reason and detail in letter["error"]
    assert "shop.clicks[0] offset 1" in letter["error"] and letter["schema_id"] is None


def test_the_schema_is_declared_inline_or_in_a_file_and_checked_with_the_config(
    tmp_path: Path,
) -> None:
    (tmp_path / "click.avsc").write_text(json.dumps(SCHEMA))
    (tmp_path / "pipeline.yaml").write_text(
        json.dumps(
            {
                "version": 1,
                "topics": [
                    {
                        "name": TOPIC,
                        "format": "json",
                        "schema": "click.avsc",
                        "routing": {"mode": "static", "dataset": "web", "table": "clicks"},
                        "event_time": {"fields": ["at"]},
                    }
                ],
            }
        )
    )
    from kbqe_dagster.core.config.pipeline import load_pipeline_config

    topic = load_pipeline_config(tmp_path / "pipeline.yaml").topics[0]
    assert topic.format is SourceFormat.JSON and topic.value_schema == SCHEMA


@pytest.mark.parametrize(
    ("topic", "expected"),
    [
        ({"format": "json"}, "topics[0].schema: required with format: json"),
        (
            {"format": "json", "schema": {"type": "string"}},
            "topics[0].schema: expected an Avro record schema",
        ),
        (
            {
                "format": "json",
                "schema": {
                    "type": "record",
                    "name": "R",
                    "fields": [{"name": "a", "type": "nope"}],
                },
            },
            "topics[0].schema: not a valid Avro schema",
        ),
        ({"format": "json", "schema": "missing.avsc"}, "topics[0].schema: cannot read"),
        ({"schema": SCHEMA}, "topics[0].schema: only with format: json"),
        (
            {
                "format": "json",
                "schema": SCHEMA,
                "keyed": {"key": ["url"], "version": "at"},
                "routing": {"mode": "static", "dataset": "web", "table": "t"},
            },
            "topics[0].keyed: not with format: json",
        ),
    ],
)
def test_json_topic_mistakes_are_config_errors_at_their_key_path(topic, expected) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_pipeline_config(
            {
                "version": 1,
                "topics": [{"name": TOPIC, "event_time": {"fields": ["at"]}, **topic}],
                "allowed_destinations": ["web.*"],
            }
        )
    assert expected in str(caught.value)
