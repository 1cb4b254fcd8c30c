"""The range stager of keyed topics: change messages into ``D.T_changelog`` files.

Everything of the append path holds (framing, schema lookup, validation by the probe, event
date, enrichment, files, commit, dead letters): this class only changes what is written per
message — the change columns plus a slice of the body (keyed/changes.py) — and where (the
destination's changelog table). A Kafka tombstone (null value) is not bad input here: it is
counted and skipped (Debezium writes one after each delete, for log compaction).

A ``format: debezium`` topic also takes change events written by Kafka Connect's
``JsonConverter`` with an embedded schema: :meth:`KeyedRangeStager.decode` gives a value that
is JSON text rather than a Confluent frame to keyed/connect_json.py, which turns it into the
body the Avro converter would have written; everything after decoding is the same.

The native kernel stages these topics too (keyed/native_stage.py, kernel/src/changes.rs),
handing back to :meth:`KeyedRangeStager.add` every message it is not certain about; a topic
with ``transforms`` is this path's (its rows are decoded, transformed and encoded again:
keyed/changes.py ``RowTransform``).

**A Debezium key no transform may lose.** Without ``keyed.key`` a Debezium topic's key is
the Kafka key's fields, unknown when the pipeline file is read. With transforms, the range's
first message with a key (Confluent-framed Avro: its registry schema; JsonConverter's: its
embedded schema) tells them, and a transform that would not keep the key's identity
(core/transforms/keyed_rows.py) stops the range, naming the transform, before any row reaches
the changelog; the merge checks again against the registry's latest key schema.

**Transformed files' schema id.** A transformed changelog file carries the derived row, not
a function of the registry schema alone: a transform changed in the pipeline file would put a
new schema under an old id. Such files take the declared-schema id of their changelog schema
(``core/formats.declared_schema_id``), as transformed append files do (formats/transform_stage.py).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.formats.avro_names import record_full_name
from kbqe_dagster.core.formats.connect_json_avro import connect_key_fields, is_json_value
from kbqe_dagster.core.formats.source_format import SourceFormat, declared_schema_id
from kbqe_dagster.core.keyed.contract import changelog_table
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.enrichment import extended_schema
from kbqe_dagster.core.record.routing import Destination
from kbqe_dagster.core.record.wire import HEADER_SIZE
from kbqe_dagster.core.transforms.compiler import hmac_keys
from kbqe_dagster.core.transforms.keyed_rows import key_columns
from kbqe_dagster.core.transforms.kinds import message_meta
from kbqe_dagster.keyed.changes import ChangeLayout, change_layout
from kbqe_dagster.keyed.connect_json import ConnectJsonDecoding
from kbqe_dagster.keyed.native_stage import KeyedNativeStaging
from kbqe_dagster.staging.context import RangeResult, StageContext
from kbqe_dagster.staging.probe.record_probe import RecordProbe
from kbqe_dagster.staging.stager import Decoder, RangeStager


@dataclass
class _ChangeDecoder(Decoder):
    layout: ChangeLayout | None = None
    file_schema_id: int | None = None
    """The files' schema id when it is not the message's (transformed rows: see above)."""


class KeyedRangeStager(RangeStager):
    # Not the append kernel's records: the native kernel stages keyed topics through a driver
    # of their own (keyed/native_stage.py), which slices the row image as this class does.
    native_kernel = False
    native_driver = KeyedNativeStaging

    def __init__(self, ctx: StageContext, rng: OffsetRange, workdir: Path) -> None:
        super().__init__(ctx, rng, workdir)
        static = self.router.config.static_destination
        assert static is not None, "config: a keyed topic's routing is static"
        self.changelog = Destination(static.dataset, changelog_table(static.table))
        self.tombstones = 0
        self.connect_json = (
            ConnectJsonDecoding(self) if self.topic.format is SourceFormat.DEBEZIUM else None
        )
        # Read once per task, where it runs; a missing key stops the range (ConfigError).
        where = f"{self.pipeline.key_path(self.topic.name)}.transforms"
        self.hmac_keys = hmac_keys(self.topic.transforms, os.environ, where)
        assert self.topic.keyed is not None
        self.kafka_key_unchecked = bool(self.topic.transforms) and not self.topic.keyed.key

    def add(self, msg: Any) -> None:
        if msg.value() is None:
            self.messages += 1
            self.tombstones += 1
            return
        super().add(msg)

    def make_decoder(self, schema: dict) -> _ChangeDecoder:
        layout = change_layout(schema, self.topic, self.hmac_keys)
        wanted = tuple(dict.fromkeys(self.topic.required_fields + layout.wanted))
        return _ChangeDecoder(
            RecordProbe(schema, wanted),
            extended_schema(layout.schema, self.enrichment),
            record_full_name(schema),
            layout,
            None if layout.transform is None else declared_schema_id(layout.schema),
        )

    def decode(self, msg: Any) -> tuple[int, Any, bytes, dict]:
        """A Confluent-framed value as on the Avro path; on a ``debezium`` topic, a JSON one
        (JsonConverter's, schema embedded) through keyed/connect_json.py."""
        value = msg.value()
        if self.connect_json is not None and value and value[0] != 0 and is_json_value(value):
            return self.connect_json.decode(self.checked_value(msg))
        return super().decode(msg)

    @staticmethod
    def framed_schema_id(value: bytes | None) -> int | None:
        if value and value[0] != 0 and is_json_value(value):
            return None  # a JSON value carries no schema id
        return RangeStager.framed_schema_id(value)

    def stage(self, msg: Any) -> None:
        if self.kafka_key_unchecked:
            self.check_kafka_key(msg.key())
        schema_id, decoder, body, fields = self.decode(msg)
        meta = None if decoder.layout.transform is None else message_meta(msg)
        change = decoder.layout.body(body, fields, meta)
        self.place(
            msg,
            fields,
            change,
            schema_id if decoder.file_schema_id is None else decoder.file_schema_id,
            decoder.schema,
            decoder.full_name,
            destination=self.changelog,
        )

    def check_kafka_key(self, key: bytes | None) -> None:
        """The transforms against the key fields ``key`` tells (see the module docstring);
        ConfigError naming the transform when one would lose the key's identity. A message
        whose key tells nothing (none, a truncate's) leaves the check to the next one."""
        fields = self._kafka_key_fields(key)
        if fields is None:
            return
        self.kafka_key_unchecked = False
        where = f"{self.pipeline.key_path(self.topic.name)}.transforms"
        try:
            key_columns(self.topic.transforms, fields, where)
        except ValueError as error:
            raise ConfigError(
                f"{self.rng}: the Kafka key's fields {list(fields)}: {error}"
            ) from None

    def _kafka_key_fields(self, key: bytes | None) -> tuple[str, ...] | None:
        if not key:
            return None
        if is_json_value(key):
            return connect_key_fields(key)
        if key[0] != 0 or len(key) < HEADER_SIZE:
            return None
        registered = self.lookup.get(int.from_bytes(key[1:HEADER_SIZE], "big"))
        schema = registered.schema if registered is not None else None
        if not isinstance(schema, dict) or schema.get("type") != "record":
            return None
        return tuple(f["name"] for f in schema["fields"])

    def range_result(self, last, files, bytes_by_dataset, conflict=False) -> RangeResult:
        result = super().range_result(last, files, bytes_by_dataset, conflict)
        return replace(result, tombstones=self.tombstones)
