"""How a topic's message values are laid out (``topics[].format``), and the rules of the
formats that declare their schema in the pipeline file.

``json`` values are schemaless JSON objects, one row each, staged under the Avro record
schema the topic declares (``schema:``, inline or a file path), as kafka-delta-ingest does.
``json_schema`` values are Confluent-framed JSON whose schema is a registry JSON Schema; their
files carry the framed registry id, like Avro's (core/formats/json_schema_avro.py maps the schema).
Their staging files carry a **declared-schema id**, derived from the schema's canonical form:
stable across runs, different for every schema change, and at or above
:data:`DECLARED_SCHEMA_IDS` so it never collides with a registry id in practice (registries
count from 1). The load reads each file's schema from its header, so no registry is needed.
``protobuf`` values are Confluent-framed Protobuf (core/formats/protobuf_wire.py); a schema's first
message type stages under the framed registry id, other message types of it under the
declared-schema id of their Avro record (core/formats/protobuf_avro.py maps them).
``decoder`` topics' files carry the declared-schema id of the schema their decoder returned.
``raw`` values are never decoded: each message is one row of a fixed schema (value, key and
headers as bytes; core/formats/raw_archive.py), whose files carry its declared-schema id.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Mapping
from enum import Enum
from typing import Any

DECLARED_SCHEMA_IDS = 1 << 30


class SourceFormat(str, Enum):
    """How a topic's message values are laid out."""

    AVRO = "avro"
    """Confluent-framed Avro records, one row each (the default)."""
    DEBEZIUM = "debezium"
    """Debezium's envelope (before/after/source/op/ts_ms) or its ExtractNewRecordState form,
    Confluent-framed Avro or Kafka Connect JsonConverter JSON with the schema embedded, told
    apart per message (core/formats/connect_json_avro.py)."""
    JSON = "json"
    """Schemaless JSON objects, staged under the Avro record schema the topic declares."""
    DECODER = "decoder"
    """Anything: the topic's user decoder (``decoder: package.module:function``) turns each
    message into an Avro record and its schema (core/formats/decoders.py)."""
    JSON_SCHEMA = "json_schema"
    """Confluent-framed JSON objects validated against their registry JSON Schema, staged
    under the Avro record derived from it (core/formats/json_schema_avro.py)."""
    PROTOBUF = "protobuf"
    """Confluent-framed Protobuf (message indexes, then the binary) parsed with its registry
    ``.proto``, staged under the Avro record derived from the message type
    (core/formats/protobuf_avro.py)."""
    RAW = "raw"
    """Anything, never decoded: the value as bytes with the key, headers and Kafka timestamp,
    one row per message, dated by the Kafka timestamp (core/formats/raw_archive.py)."""


def declared_schema_id(schema: Mapping[str, Any]) -> int:
    """The id a declared schema's staging files carry (see the module docstring)."""
    canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    return DECLARED_SCHEMA_IDS + (zlib.crc32(canonical.encode()) & (DECLARED_SCHEMA_IDS - 1))
