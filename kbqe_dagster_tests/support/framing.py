"""A Kafka message value as a producer writes it: Confluent-framed Avro, Protobuf or JSON."""

from __future__ import annotations

import io
import json
from typing import Any

import fastavro

from kbqe_dagster.core.formats.protobuf_wire import encode_message_indexes
from kbqe_dagster.core.record.wire import encode_frame


def avro_body(schema: Any, record: dict) -> bytes:
    """``record`` written with the Avro ``schema``, unframed (schemaless, as in a Confluent frame)."""
    body = io.BytesIO()
    fastavro.schemaless_writer(body, fastavro.parse_schema(schema), record)
    return body.getvalue()


def avro_framed(schema_id: int, schema: Any, record: dict, trailing: bytes = b"") -> bytes:
    """``record`` written with the Avro ``schema`` registered under ``schema_id``;
    ``trailing``: bytes after the body (a body that does not decode to exactly its length)."""
    return encode_frame(schema_id, avro_body(schema, record) + trailing)


def protobuf_framed(schema_id: int, message: Any, indexes: tuple[int, ...] = (0,)) -> bytes:
    """A Protobuf ``message`` (or its serialized bytes) of the message type at ``indexes``."""
    body = message if isinstance(message, bytes) else message.SerializeToString()
    return encode_frame(schema_id, encode_message_indexes(indexes) + body)


def json_framed(schema_id: int, record: Any) -> bytes:
    """A JSON ``record`` (or raw bytes, to frame something that is not JSON)."""
    text = record if isinstance(record, bytes) else json.dumps(record).encode()
    return encode_frame(schema_id, text)
