"""The captured Debezium PostgreSQL corpus (``corpus/debezium_postgres/``) is what it says it
is: every Avro message is Confluent-framed with an id whose schema the corpus holds and
decodes to the recorded value, the JSON messages carry schema and payload, and both
connectors saw the same events in the same order."""

from __future__ import annotations

import io
import json
import struct
from pathlib import Path

import fastavro
import pytest

from kbqe_dagster_tests.corpus.make_debezium_postgres_corpus import EXPECTED, _plain

CORPUS = Path(__file__).parent / "debezium_postgres"
AVRO = json.loads((CORPUS / "avro" / "messages.json").read_text())
SCHEMAS = json.loads((CORPUS / "avro" / "schemas.json").read_text())
JSON = json.loads((CORPUS / "json" / "messages.json").read_text())
LABELS = [label for label, _ in EXPECTED]


def test_both_connectors_captured_the_expected_events_in_order() -> None:
    assert [m["label"] for m in AVRO] == LABELS
    assert [m["label"] for m in JSON] == LABELS


@pytest.mark.parametrize("message", AVRO, ids=LABELS)
def test_each_avro_message_is_framed_and_decodes_to_the_recorded_value(message) -> None:
    for part in ("key", "value"):
        raw_hex = message[f"{part}_hex"]
        if raw_hex is None:
            assert message[f"{part}_decoded"] is None
            continue
        raw = bytes.fromhex(raw_hex)
        magic, schema_id = struct.unpack(">bI", raw[:5])
        assert magic == 0
        assert schema_id == message[f"{part}_schema_id"]
        schema = fastavro.parse_schema(SCHEMAS["by_id"][str(schema_id)])
        decoded = fastavro.schemaless_reader(io.BytesIO(raw[5:]), schema, schema)
        assert _plain(decoded) == message[f"{part}_decoded"]


def test_the_subjects_latest_ids_are_the_ids_in_the_messages() -> None:
    ids = {SCHEMAS["subjects"][s]["id"] for s in SCHEMAS["subjects"]}
    seen = {m["value_schema_id"] for m in AVRO} | {m["key_schema_id"] for m in AVRO}
    assert ids == seen - {None}


def test_the_toasted_text_is_unavailable_in_the_update_that_did_not_touch_it() -> None:
    avro = next(m for m in AVRO if m["label"] == "toast_update_unchanged_toasted_text")
    js = next(m for m in JSON if m["label"] == "toast_update_unchanged_toasted_text")
    assert avro["value_decoded"]["after"]["c_text"] == "__debezium_unavailable_value"
    assert js["value"]["payload"]["after"]["c_text"] == "__debezium_unavailable_value"


@pytest.mark.parametrize("message", JSON, ids=LABELS)
def test_each_json_message_has_schema_and_payload(message) -> None:
    if message["key"] is not None:
        assert set(message["key"]) == {"schema", "payload"}
    if message["value"] is not None:
        assert set(message["value"]) == {"schema", "payload"}
        assert message["value"]["schema"]["name"] == "dbz_json.public.all_types.Envelope"
