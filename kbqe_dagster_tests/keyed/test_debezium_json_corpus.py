"""Real Debezium PostgreSQL events (kbqe_dagster_tests/corpus/debezium_postgres/, captured by two
connectors at once from the same table of 24 column types: one with Connect's JsonConverter,
one with Apicurio's AvroConverter): the Avro schema derived from each JsonConverter message is
the one the AvroConverter registered for the same table, and the JSON events stage into the
same changelog records as the Avro ones.

The two connectors differ only in their topic prefix (``dbz_json`` / ``dbz_avro``), which
Debezium puts in the record names (``dbz_json.public.all_types.Value``); the comparison maps
one prefix to the other and nothing else."""

from __future__ import annotations

import io
import json
from pathlib import Path

import fastavro
import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.formats.connect_json_avro import connect_avro, plain_writer_schema
from kbqe_dagster.core.protocol.naming import AvroFileName, parse_name
from kbqe_dagster_tests.staging.kernel_equality import Msg, Staged, stage
from kbqe_dagster_tests.support.connect_json import canonical

CORPUS = Path(__file__).parents[1] / "corpus" / "debezium_postgres"
AVRO_SCHEMAS = json.loads((CORPUS / "avro" / "schemas.json").read_text())["by_id"]
AVRO_MESSAGES = json.loads((CORPUS / "avro" / "messages.json").read_text())
JSON_MESSAGES = json.loads((CORPUS / "json" / "messages.json").read_text())
TOPIC = "dbz.public.all_types"


def as_avro_connector(avro: object) -> object:
    """A derived schema with the JSON connector's topic prefix replaced by the Avro one's."""
    return json.loads(json.dumps(avro).replace("dbz_json.", "dbz_avro."))


def pairs() -> list[tuple[str, str, dict, dict]]:
    """(label, key/value, JsonConverter message, registered Avro schema) for every message
    with a schema (a tombstone's value and a truncate's key have none)."""
    out = []
    for avro, js in zip(AVRO_MESSAGES, JSON_MESSAGES, strict=True):
        assert avro["label"] == js["label"]
        for part in ("key", "value"):
            if js[part] is not None:
                registered = AVRO_SCHEMAS[str(avro[f"{part}_schema_id"])]
                out.append((js["label"], part, js[part], registered))
    return out


@pytest.mark.parametrize(("label", "part", "message", "registered"), pairs())
def test_the_derived_schema_is_the_one_apicurio_s_avro_converter_registered(
    label, part, message, registered
) -> None:
    derived = connect_avro(message["schema"]).avro
    # Field names, types, connect.name / connect.version / connect.parameters / connect.type,
    # logical types, nullability and defaults: all equal.
    assert canonical(as_avro_connector(derived)) == canonical(registered)


def test_the_corpus_covers_every_column_type_and_each_change_kind() -> None:
    labels = {label for label, *_ in pairs()}
    assert {"snapshot_read", "insert", "insert_nulls", "update", "delete", "truncate",
            "toast_update_unchanged_toasted_text", "pk_update_create_new_key"} <= labels  # fmt: skip
    value = connect_avro(JSON_MESSAGES[0]["value"]["schema"]).avro
    after = value["fields"][0]["type"][1]
    names = {
        (f["type"][1] if isinstance(f["type"], list) else f["type"]).get("connect.name")
        for f in after["fields"]
        if isinstance(f["type"], list) and isinstance(f["type"][1], dict)
    }
    assert {"org.apache.kafka.connect.data.Decimal", "io.debezium.data.VariableScaleDecimal",
            "io.debezium.time.MicroTimestamp", "io.debezium.time.ZonedTimestamp",
            "io.debezium.data.Json", "io.debezium.data.Enum"} <= names  # fmt: skip


@pytest.mark.parametrize(("label", "part", "message", "registered"), pairs())
def test_the_payload_encodes_to_the_avro_converter_s_row(label, part, message, registered):
    converted = connect_avro(message["schema"])
    writer = fastavro.parse_schema(plain_writer_schema(converted.avro))
    body = io.BytesIO()
    fastavro.schemaless_writer(body, writer, converted.datum(message["payload"]))
    ours = fastavro.schemaless_reader(io.BytesIO(body.getvalue()), writer)
    [avro] = [m for m in AVRO_MESSAGES if m["label"] == label]
    framed = bytes.fromhex(avro[f"{part}_hex"])
    theirs = fastavro.schemaless_reader(
        io.BytesIO(framed[5:]), fastavro.parse_schema(plain_writer_schema(registered))
    )
    if part == "key":
        assert ours == theirs
    else:  # the source block is each connector's own (its name, its slot's LSNs)
        for image in ("before", "after", "op"):
            assert ours[image] == theirs[image], image


def pipeline():
    return parse_pipeline_config({
        "version": 1,
        "topics": [{"name": TOPIC, "format": "debezium", "keyed": {"key": ["id"]},
                    "routing": {"mode": "static", "dataset": "corpus", "table": "all_types"}}],
        "dead_letter": {"dataset": "dead", "table": "letters"},
    }, source="test")  # fmt: skip


def changelog(staged: Staged) -> list[dict]:
    records = []
    for name, data in staged.files.items():
        parsed = parse_name(name)
        if isinstance(parsed, AvroFileName) and parsed.key.table == "all_types_changelog":
            records += list(fastavro.reader(io.BytesIO(data)))
    return sorted(records, key=lambda r: r["_kafka_offset"])


def test_the_json_events_stage_into_the_avro_events_changelog_records(tmp_path) -> None:
    def encoded(message: dict | None) -> bytes | None:
        return None if message is None else json.dumps(message, separators=(",", ":")).encode()

    json_msgs = [Msg(TOPIC, 0, i, encoded(m["value"]), key=encoded(m["key"]))
                 for i, m in enumerate(JSON_MESSAGES)]  # fmt: skip
    avro_msgs = [
        Msg(TOPIC, 0, i, None if m["value_hex"] is None else bytes.fromhex(m["value_hex"]),
            key=None if m["key_hex"] is None else bytes.fromhex(m["key_hex"]))
        for i, m in enumerate(AVRO_MESSAGES)
    ]  # fmt: skip
    schemas = {int(i): s for i, s in AVRO_SCHEMAS.items()}
    by_json = stage(tmp_path / "json", pipeline(), TOPIC, {}, json_msgs, native=False)
    by_avro = stage(tmp_path / "avro", pipeline(), TOPIC, schemas, avro_msgs, native=False)
    # The tombstones are counted; the truncate is a changelog row either way (keyed/merge_sql.py
    # applies it); the three changes whose `numeric` NUMERIC cannot hold (the snapshot row, row
    # 2's insert and update) are dead-lettered either way, naming the column
    # (core/formats/connect_types.py).
    assert by_json.result.dead_letters == by_avro.result.dead_letters == {"unconvertible_value": 3}
    assert by_json.result.tombstones == by_avro.result.tombstones == 2
    ours, theirs = changelog(by_json), changelog(by_avro)
    assert len(ours) == len(theirs) == 7
    # The same rows, ops, deletes and enrichment; the version is each connector's own
    # source.ts_ms (the same WAL commit time for streamed changes, each connector's snapshot
    # time for the snapshot read); the Kafka key column holds each converter's bytes.
    own = ("_kafka_key", "_source_ts_ms")
    for mine, real in zip(ours, theirs, strict=True):
        assert {k: v for k, v in mine.items() if k not in own} == {
            k: v for k, v in real.items() if k not in own
        }
        source = JSON_MESSAGES[mine["_kafka_offset"]]["value"]["payload"]["source"]
        assert mine["_source_ts_ms"] == source["ts_ms"]
    assert [r["_source_ts_ms"] for r in ours] == [r["_source_ts_ms"] for r in theirs]
