"""A table topic of customers for the tests of topics keyed by their Kafka key (the Python path's,
test_table_topic_stage.py; the kernel's, test_table_kernel.py): its pipeline, value and key
schemas and messages, and the changelog records and dead letters a stage run commits."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import fastavro

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster_tests.staging.kernel_equality import Msg, Staged, stage

TOPIC = "shop.customers"
VALUE = {"type": "record", "name": "Customer", "namespace": "shop", "fields": [
    {"name": "id", "type": "long"},
    {"name": "name", "type": "string"},
    {"name": "tier", "type": ["null", "string"], "default": None},
    {"name": "updated_at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
]}  # fmt: skip
KEY = {"type": "record", "name": "CustomerKey", "namespace": "shop",
       "fields": [{"name": "id", "type": "long"}]}  # fmt: skip
VALUE_ID, KEY_ID = 7, 8
KAFKA_MS = 1_726_238_205_123  # the test messages' Kafka timestamp


def pipeline(keyed: dict[str, Any], **topic: Any):
    return parse_pipeline_config({
        "version": 1,
        "topics": [{"name": TOPIC, "routing": {"mode": "static", "dataset": "shop",
                                               "table": "customers"},
                    "keyed": {"key_from": "kafka_key", **keyed},
                    "event_time": {"fields": [], "kafka_timestamp_fallback": True}, **topic}],
        "dead_letter": {"dataset": "dead", "table": "letters"},
    })  # fmt: skip


def avro(schema: dict, record: dict) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), record)
    return out.getvalue()


def customer(id_: int, name: str, tier: str | None = None, updated_at: int = 5) -> bytes:
    record = {"id": id_, "name": name, "tier": tier, "updated_at": updated_at}
    return encode_frame(VALUE_ID, avro(VALUE, record))


def avro_key(id_: int) -> bytes:
    return encode_frame(KEY_ID, avro(KEY, {"id": id_}))


def staged(tmp: Path, config: Any, messages: list[tuple[bytes | None, bytes | None]]) -> Staged:
    msgs = [Msg(TOPIC, 0, offset, value, key=key) for offset, (value, key) in enumerate(messages)]
    return stage(tmp, config, TOPIC, {VALUE_ID: VALUE, KEY_ID: KEY}, msgs, native=False)


def changelog(result: Staged) -> list[tuple[list[str], dict[str, Any]]]:
    """Each changelog record by offset, with its file's columns after the Kafka ones."""
    rows = []
    for name, data in result.files.items():
        if name.endswith(".avro") and "customers_changelog" in name:
            reader = fastavro.reader(io.BytesIO(data))
            columns = [f["name"] for f in reader.writer_schema["fields"]][5:]
            rows += [(columns, record) for record in reader]
    return sorted(rows, key=lambda row: row[1]["_kafka_offset"])


def dead_letters(result: Staged) -> list[tuple[str, str]]:
    out = []
    for name, data in result.files.items():
        if name.endswith(".avro") and ".dead.letters." in name:
            out += [(r["reason"], r["error"]) for r in fastavro.reader(io.BytesIO(data))]
    return out
