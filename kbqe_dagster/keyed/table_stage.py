"""The range stager of topics keyed by their Kafka key (``keyed.key_from: kafka_key``: compacted
topics, KTables): every message, tombstones included, becomes a changelog record of
``D.T_changelog`` (keyed/table_changes.py says how).

The value is decoded by the topic's **format** stager, whatever it is: :func:`table_stager`
puts :class:`TableStaging` in front of it (kbqe_dagster/stager_registry.py chooses the format's class).
An Avro value is framed and probed as on the Avro path and its bytes are copied; a format that
decodes values into records (``json``, ``json_schema``, ``protobuf``, ``decoder``: a
``TransformingStager``) hands each record to ``place_record``, taken here: the record is encoded
with the Avro schema the format derived, then cut the same way. Everything after (event date,
enrichment, files, commit, dead letters) is the stage engine's.

A tombstone is dated by its Kafka timestamp (it has no fields), with the topic's date rule.

The topic's ``transforms`` reshape the value, as the changelog would hold it otherwise (Kafka
Connect semantic values converted): each layout applies them (keyed/table_changes.py), so the
changelog, the current table and the history all hold the transformed value. The key columns
are the Kafka key's, which no transform changes (the configuration refuses one that names a
key column). The format's stager is chosen without the transforms: it only decodes.

The native kernel stages these topics when their values are Confluent Avro, ``format: json``,
``json_schema`` or ``protobuf`` (keyed/table_native.py: this path computes each layout, the
kernel copies the bytes, a value of the other formats encoded first); ``decoder`` values and
topics with transforms stay on this path, said once per range.
"""

from __future__ import annotations

import logging
import os
from dataclasses import replace
from functools import cache
from io import BytesIO
from pathlib import Path
from typing import Any

from fastavro import parse_schema, schemaless_writer

from kbqe_dagster.core.errors import BadInputError, UnsupportedSchemaError
from kbqe_dagster.core.formats.avro_names import record_full_name
from kbqe_dagster.core.keyed.contract import changelog_table
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.enrichment import extended_schema
from kbqe_dagster.core.record.event_time import epoch_day, event_date
from kbqe_dagster.core.record.routing import Destination
from kbqe_dagster.core.transforms.compiler import hmac_keys
from kbqe_dagster.core.transforms.kinds import message_meta
from kbqe_dagster.keyed.table_changes import KafkaKeys, KeyColumns, TableLayout, table_layout
from kbqe_dagster.keyed.table_native import TableNativeStaging
from kbqe_dagster.staging.context import RangeResult, StageContext
from kbqe_dagster.staging.probe.record_probe import RecordProbe
from kbqe_dagster.staging.stager import Decoder, RangeStager

log = logging.getLogger(__name__)


class TableStaging:
    """Stages a table topic's messages as changes; put in front of its format's stager by
    :func:`table_stager` (see the module docstring)."""

    native_kernel = False
    native_driver = TableNativeStaging

    # The attributes of the RangeStager this is mixed into, for the type checker.
    topic: Any
    pipeline: Any
    rng: Any
    router: Any
    lookup: Any
    enrichment: Any
    encoder: Any
    messages: int
    open_file: Any
    place: Any
    decode: Any
    frame: Any
    decodes_records: bool = False
    """Whether the format stager decodes values into records (``place_record``)."""

    def __init__(self, ctx: StageContext, rng: OffsetRange, workdir: Path) -> None:
        super().__init__(ctx, rng, workdir)  # type: ignore[call-arg]
        self.native_kernel = False  # the format stager may have said otherwise
        self.reshapes = True  # a record-decoding format hands every record to place_record
        static = self.router.config.static_destination
        assert static is not None, "config: a keyed topic's routing is static"
        self.changelog = Destination(static.dataset, changelog_table(static.table))
        # Read once per task, where it runs; a missing key stops the range (ConfigError).
        where = f"{self.pipeline.key_path(self.topic.name)}.transforms"
        self.hmac_keys = hmac_keys(self.topic.transforms, os.environ, where)
        self.keys = KafkaKeys(self.topic, self.lookup)
        self.tombstones = 0
        self._layouts: dict[tuple[Any, Any], TableLayout | BadInputError] = {}
        self._values: dict[Any, tuple[Any, RecordProbe]] = {}
        self._file_schemas: dict[int, dict] = {}
        self._tombstone_time = replace(
            self.topic.event_time, fields=(), kafka_timestamp_fallback=True
        )
        keyed = self.topic.keyed
        # Routing's and event time's fields, then the change columns' (version, delete field).
        self.wanted = tuple(
            dict.fromkeys(
                [*self.topic.required_fields]
                + [p for p in (keyed.version, keyed.delete_field) if p]
            )
        )

    # --- per message ------------------------------------------------------------------------
    def stage(self, msg: Any) -> None:
        if msg.value() is None:
            self._stage_tombstone(msg)
        elif self.decodes_records:
            super().stage(msg)  # type: ignore[misc]  # the format's, through place_record
        else:
            schema_id, decoder, body, fields = self.decode(msg)
            self._stage_value(msg, schema_id, decoder.value_schema, body, fields)

    def make_decoder(self, schema: dict) -> Decoder:
        """An Avro value's decoder: the probe reads routing's, event time's and the change
        columns' fields; the value schema is kept for the layout."""
        decoder = Decoder(
            RecordProbe(schema, self.wanted),
            extended_schema(schema, self.enrichment),
            record_full_name(schema),
        )
        decoder.value_schema = schema  # type: ignore[attr-defined]
        return decoder

    def place_record(self, msg: Any, record: Any, schema_key: Any, schema: Any,
                     schema_id: int | None = None) -> None:  # fmt: skip
        """A record a format decoded (``schema``: its Avro record; ``schema_key`` identifies
        it): encoded with that schema, then staged as an Avro value is."""
        parsed, probe = self._value_codec(schema_key, schema)
        out = BytesIO()
        try:
            schemaless_writer(out, parsed, record)
        except Exception as error:  # noqa: BLE001 - fastavro raises several types on a misfit
            raise UnsupportedSchemaError(f"the record does not fit its schema: {error}") from None
        body = out.getvalue()
        self._stage_value(msg, schema_key, schema, body, probe.probe(body))

    def _value_codec(self, schema_key: Any, schema: Any) -> tuple[Any, RecordProbe]:
        known = self._values.get(schema_key)
        if known is None:
            known = self._values[schema_key] = (
                parse_schema(dict(schema), _write_hint=False),
                RecordProbe(schema, self.wanted),
            )
        return known

    def _stage_value(self, msg: Any, value_key: Any, value: Any, body: bytes, fields: dict) -> None:
        columns, key = self.keys.read(msg.key())
        layout = self.layout_of(columns, value_key, value)
        meta = message_meta(msg) if layout.transform is not None else None
        change = layout.record(key, body, fields, _kafka_ms(msg), meta)
        self._append(msg, fields, change, layout, tombstone=False)

    def _stage_tombstone(self, msg: Any) -> None:
        self.tombstones += 1
        columns, key = self.keys.read(msg.key())
        layout = self.layout_of(columns, None, None)
        self._append(msg, {}, layout.tombstone(key, _kafka_ms(msg)), layout, tombstone=True)

    def _append(self, msg: Any, fields: dict, change: bytes, layout: TableLayout, *,
                tombstone: bool) -> None:  # fmt: skip
        file_schema = self.file_schema(layout)
        if tombstone:  # no fields to date it by: its Kafka timestamp, the topic's date rule
            ts = _kafka_ms(msg)
            day = epoch_day(event_date(self._tombstone_time, {}, ts))
            headers = msg.headers() if self.enrichment.headers_column is not None else None
            prefix = self.encoder.encode(day, msg.offset(), ts, msg.key(), headers)
            self.open_file(
                self.changelog.dataset, self.changelog.table, layout.schema_id, file_schema
            ).append(prefix, change, day, None)
            return
        self.place(
            msg, fields, change, layout.schema_id, file_schema, layout.full_name,
            destination=self.changelog,
        )  # fmt: skip

    def file_schema(self, layout: TableLayout) -> dict:
        """The file schema of ``layout``'s records (the changelog record, enriched)."""
        file_schema = self._file_schemas.get(layout.schema_id)
        if file_schema is None:
            file_schema = self._file_schemas[layout.schema_id] = extended_schema(
                layout.schema, self.enrichment
            )
        return file_schema

    def layout_of(self, columns: KeyColumns, value_key: Any, value: Any) -> TableLayout:
        """The layout of a key layout and a value schema, made once per range; a schema with
        no layout is the bad input of each of its messages."""
        at = (columns.identity, value_key)
        known = self._layouts.get(at)
        if isinstance(known, BadInputError):
            raise type(known)(str(known))
        if known is None:
            try:
                known = table_layout(self.topic, columns, value, self.hmac_keys)
            except BadInputError as error:
                self._layouts[at] = error
                raise
            self._layouts[at] = known
        return known

    def range_result(self, last, files, bytes_by_dataset, conflict=False) -> RangeResult:
        result = super().range_result(last, files, bytes_by_dataset, conflict)  # type: ignore[misc]
        return replace(result, tombstones=self.tombstones)


def _kafka_ms(msg: Any) -> int | None:
    ts_type, ts = msg.timestamp()
    return ts if ts_type != 0 else None


@cache
def table_stager(format_stager: type[RangeStager]) -> type[RangeStager]:
    """The stager of a table topic whose format ``format_stager`` stages (the Avro path's
    ``RangeStager`` or a record-decoding format's); one class per format, module-level
    cached so a range's stager class is the same object each time it is asked."""
    decodes = hasattr(format_stager, "place_record")
    name = f"Table{format_stager.__name__}"
    return type(name, (TableStaging, format_stager), {"decodes_records": decodes})
