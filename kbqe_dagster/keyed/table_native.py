"""The native kernel's driver for topics keyed by their Kafka key (``keyed.key_from: kafka_key``:
compacted topics, KTables) whose values are Confluent Avro, ``format: json``,
``format: json_schema`` or ``format: protobuf``:
:class:`TableNativeStaging`, the table stager's ``native_driver`` (keyed/table_stage.py).

It is the append kernel's loop (staging/native_kernel.py) with one thing taught differently:
the changelog layout of each key layout and value schema the kernel meets. When the kernel
stops at a message whose layout it was not given (``table_unknown``), the driver computes
that layout exactly as the Python path does — the key columns of :class:`KafkaKeys
<kbqe_dagster.keyed.table_changes.KafkaKeys>`, the :class:`TableLayout
<kbqe_dagster.keyed.table_changes.TableLayout>` of :meth:`TableStaging._layout
<kbqe_dagster.keyed.table_stage.TableStaging._layout>`, its file — and teaches the kernel its
byte actions; the kernel (kernel/src/table.rs) then reads the Kafka key, writes the key
columns, the value's fields made nullable, and stages a tombstone as the delete of its key,
dated by its Kafka timestamp. A key it cannot read, a layout whose values need converting
(Kafka Connect semantic types), anything the Python path would refuse, goes back to that
path per message, which judges it: files, dead letters, counts and tombstones are that
path's (docs/architecture.md, "Keyed change topics on the kernel").

``format: json`` values carry no header: the kernel is given the declared schema once
(``table_json_values``), encodes each value with the JSON kernel's encoder (kernel/src/json.rs,
which hands back every value it is not certain of, as on the append path), and each key layout
is taught one value layout, under the header ``b"json:"``, that of the declared schema.

``format: json_schema`` values are framed: when the kernel first stops at a schema id's header
(``table_unknown``), the driver gives it that id's registry JSON Schema and the Avro record
derived from it (``table_json_schema_id``: json_schema.rs, the append kernel's validator and
encoder, handing back every value it is not certain of), then the layout of the key layout and
that header, whose schema is the derived record: exactly what the Python path encodes
(formats/json_schema_stage.py, then ``TableStaging.place_record``) and cuts.
``format: protobuf`` values are taught in the same way per *frame prefix* (the header and the
message indexes, which pick one message type of the schema): that type's decoding program
(``table_protobuf_schema``: protobuf.rs, as the append kernel decodes, core/formats/
protobuf_program.py), then the layout of its mapped Avro record, under the header the kernel
gives that type (one 5-byte header may frame several types).

Ranges the kernel does not take (:meth:`TableNativeStaging.for_range`, said once per range at
debug level): values a user ``decoder`` decodes, transforms or destinations, and a kernel
built before this routine (or before its JSON, JSON Schema or Protobuf values).
"""

from __future__ import annotations

import json
import logging
from typing import Any

from fastavro import parse_schema

from kbqe_dagster.core.errors import KbqeError
from kbqe_dagster.core.formats.json_schema_avro import kernel_record
from kbqe_dagster.core.formats.protobuf_program import kernel_program
from kbqe_dagster.core.formats.protobuf_wire import read_message_indexes
from kbqe_dagster.core.formats.source_format import SourceFormat
from kbqe_dagster.core.keyed.contract import KeyFormat
from kbqe_dagster.core.record.wire import HEADER_SIZE
from kbqe_dagster.staging.native_kernel import NativeStaging

log = logging.getLogger(__name__)

DECODED_REASON = (
    "a topic keyed by its Kafka key whose values a format decodes into records (or transforms) "
    "stages on the Python path: the kernel's table routine takes Confluent Avro, format: json, "
    "json_schema and protobuf values"
)
JSON_SCHEMA_METHOD = "table_json_schema_id"
"""The ``StageKernel`` method of ``format: json_schema`` values (a kernel built before it leaves
them on the Python path)."""
PROTOBUF_METHOD = "table_protobuf_schema"
"""The ``StageKernel`` method of ``format: protobuf`` values (the same)."""
JSON_HEADER = b"json:"
"""The value header a ``format: json`` table topic's layouts are taught under (table.rs)."""


_KERNEL_FORMATS = {
    SourceFormat.AVRO: None,
    SourceFormat.JSON: "table_json_values",
    SourceFormat.JSON_SCHEMA: JSON_SCHEMA_METHOD,
    SourceFormat.PROTOBUF: PROTOBUF_METHOD,
}
"""The value formats the kernel's table routine takes, each with the ``StageKernel`` method a
kernel needs for it (None: any kernel with the routine)."""


class TableNativeStaging(NativeStaging):
    """The kernel's driver of a table topic's range (see the module docstring)."""

    stager: Any  # keyed/table_stage.py's TableStaging (which names this class: no import back)
    KERNEL_METHOD = "add_table_layout"

    @staticmethod
    def wanted_paths(stager: Any) -> list[str]:
        # Routing's and event time's, then the change columns' (version, delete field): the
        # probe's own paths (TableStaging.wanted).
        return list(stager.wanted)

    @classmethod
    def for_range(cls, stager: Any, extension: Any) -> TableNativeStaging | None:
        """The driver, or None when the range takes the Python path (see the module docstring;
        an HOUR table is refused by the configuration for keyed tables: defensive)."""
        source_format = stager.topic.format
        json_values = source_format is SourceFormat.JSON
        if (
            (stager.decodes_records and source_format not in _KERNEL_FORMATS)
            or stager.topic.transforms
            or stager.topic.destinations
        ):
            log.debug("%s: %s", stager.rng, DECODED_REASON)
            return None
        method = _KERNEL_FORMATS.get(source_format)
        if method is not None and not hasattr(extension.StageKernel, method):
            log.debug("%s: %s (a kernel built before them)", stager.rng, DECODED_REASON)
            return None
        changelog = stager.changelog
        if stager.pipeline.topic_may_write_hourly(stager.topic.name) or stager.pipeline.is_hourly(
            changelog.dataset, changelog.table
        ):
            return None
        driver = cls(stager, extension)
        if json_values:
            try:  # the declared schema, as the JSON append kernel takes it (json_stage.py)
                driver.kernel.table_json_values(json.dumps(stager.parsed))
            except ValueError as error:
                log.debug("%s: the JSON values stay on the Python stage path: %s", stager.rng,
                          error)  # fmt: skip
                return None
        return driver

    def __init__(self, stager: Any, extension: Any) -> None:
        super().__init__(stager, extension)
        keyed = stager.topic.keyed
        fields = []
        if keyed.key_format is KeyFormat.JSON:
            fields = [(name, keyed.key_type(name)) for name in keyed.key]
        self.kernel.stage_table(keyed.key_format.value, fields)
        self._format = stager.topic.format
        self._layouts: dict[tuple[Any, bytes | None], str | None] = {}
        """(key layout, value header) → None (taught) or why the kernel refused it."""
        self._entries: dict[bytes, str | None] = {}
        """``format: json_schema`` values: frame header → None (taught) or why the kernel
        refused its schema."""
        self._types: dict[bytes, bytes | str] = {}
        """``format: protobuf`` values: frame prefix → the header its layouts are taught under,
        or why the kernel refused its message type."""

    def stage(self, reader: Any) -> None:
        super().stage(reader)  # the kernel's messages, tombstones among them, are counted there
        self.stager.tombstones += self.kernel.tombstones

    def _teach(self, msg: Any, reason: str, unknown_route: tuple[bytes, bytes] | None) -> bool:
        """Teach the kernel the layout of the message it stopped at (``table_unknown``), as
        the Python path computes it; whether it was taught. A key, a value or a layout the
        Python path refuses is not: the message then gets that path's verdict."""
        if reason != "table_unknown":
            return False
        stager = self.stager
        key, value = msg.key(), msg.value()
        try:
            columns, _ = stager.keys.read(key)
            if value is None:
                value_header, value_schema = None, None
                layout = stager.layout_of(columns, None, None)
            elif (
                self._format is SourceFormat.JSON
            ):  # the declared schema's layout (TableStaging.place_record)
                value_header, value_schema = JSON_HEADER, None
                layout = stager.layout_of(columns, stager.schema_id, stager.value_schema)
            elif self._format is SourceFormat.JSON_SCHEMA:  # the derived record's layout (the same)
                if len(value) < HEADER_SIZE:
                    return False
                value_header = value[:HEADER_SIZE]
                schema_id, decoder = stager.frame(value)
                value_schema = decoder.mapping.avro_schema
                layout = stager.layout_of(columns, schema_id, value_schema)
                if not self._teach_entry(value_header, schema_id, decoder):
                    return False
            elif (
                self._format is SourceFormat.PROTOBUF
            ):  # the message type's mapped record (the same)
                if len(value) < HEADER_SIZE:
                    return False
                schema_id, proto = stager.frame(value)
                indexes, start = read_message_indexes(value, HEADER_SIZE)
                kind = proto.message_type(indexes)
                value_schema = kind.mapping.avro_schema
                layout = stager.layout_of(columns, (schema_id, indexes), value_schema)
                header = self._teach_type(bytes(value[:start]), kind)
                if header is None:
                    return False
                value_header = header
            else:
                if len(value) < HEADER_SIZE:
                    return False
                value_header = value[:HEADER_SIZE]
                schema_id, decoder = stager.frame(value)
                value_schema = schema_id
                layout = stager.layout_of(columns, schema_id, decoder.value_schema)
        except KbqeError:
            return False  # the Python path's verdict (a bad key, frame or schema; a config error)
        at = (columns.identity, value_header)
        if at in self._layouts:
            return False  # offered before: the kernel refused it
        try:
            self._add_layout(key, columns, value_header, value_schema, layout)
        except (KbqeError, ValueError) as error:
            self._layouts[at] = str(error)
            log.debug("%s: a changelog layout stays on the Python stage path: %s", stager.rng,
                      error)  # fmt: skip
            return False
        self._layouts[at] = None
        return True

    def _teach_entry(self, header: bytes, schema_id: int, decoder: Any) -> bool:
        """Give the kernel the registry JSON Schema of ``schema_id`` (framed by ``header``) and
        the Avro record derived from it, once; whether it took them (else its values stay on
        the Python path, which judges each)."""
        if header in self._entries:
            return self._entries[header] is None
        stager = self.stager
        registered = stager.lookup.get(schema_id)
        try:
            if registered is None:  # frame() resolved it a moment ago: the registry's to say
                raise ValueError(f"schema id {schema_id} is no longer in the registry")
            _, keyed = kernel_record(registered.schema, decoder.parsed)
            self.kernel.table_json_schema_id(header, registered.schema, keyed)
        except ValueError as error:
            self._entries[header] = str(error)
            log.debug("%s: the values of schema id %d stay on the Python stage path: %s",
                      stager.rng, schema_id, error)  # fmt: skip
            return False
        self._entries[header] = None
        return True

    def _teach_type(self, prefix: bytes, kind: Any) -> bytes | None:
        """Give the kernel the decoding program of the message type ``kind`` (framed by
        ``prefix``), once; the header its layouts are taught under, or None when the kernel
        does not decode it (its values stay on the Python path, which judges each)."""
        known = self._types.get(prefix)
        if known is None:
            try:
                program = kernel_program(kind.cls.DESCRIPTOR)
                known = bytes(self.kernel.table_protobuf_schema(prefix, program))
            except ValueError as error:  # KernelProgramRefused among them
                known = str(error)
                log.debug("%s: frame %s stays on the Python stage path: %s", self.stager.rng,
                          prefix.hex(), error)  # fmt: skip
            self._types[prefix] = known
        return known if isinstance(known, bytes) else None

    def _add_layout(self, key: bytes, columns: Any, value_header: bytes | None,
                    value_schema: int | dict | None, layout: Any) -> None:  # fmt: skip
        """Teach the kernel ``layout`` (of key ``key``'s ``columns`` and the values framed by
        ``value_header``, registry schema id ``value_schema`` — or the Avro record a
        ``format: json_schema`` or ``protobuf`` value is encoded as —; None: tombstones);
        raises ValueError for what it refuses."""
        rewrites = list(layout.kernel_rewrites())
        stager = self.stager
        key_header, key_text = b"", None
        if stager.topic.keyed.key_format is KeyFormat.AVRO:
            key_header = key[:HEADER_SIZE]
            key_text = _schema_text(stager.lookup, columns.identity[1])
        value_text: str | None = None
        if value_header == JSON_HEADER:  # the declared schema, as table_json_values took it
            value_text = json.dumps(stager.parsed)
        elif isinstance(value_schema, dict):  # the record a json_schema or protobuf value is
            value_text = json.dumps(parse_schema(value_schema, _write_hint=False))
        elif value_schema is not None:
            value_text = _schema_text(stager.lookup, value_schema)
        wanted = self.wanted
        version = wanted.index(layout.version_path) if layout.version_path else None
        delete = wanted.index(layout.delete_path) if layout.delete_path else None
        changelog = stager.changelog
        slot = self._slot(
            changelog.dataset, changelog.table, layout.schema_id, stager.file_schema(layout)
        )
        self.kernel.add_table_layout(key_header, key_text, value_header, value_text, slot,
                                     list(layout.actions), version, delete, rewrites)  # fmt: skip


def _schema_text(lookup: Any, schema_id: int) -> str:
    registered = lookup.get(schema_id)
    if registered is None:  # resolved a moment ago: the registry's to say again
        raise ValueError(f"schema id {schema_id} is no longer in the registry")
    return json.dumps(parse_schema(registered.schema, _write_hint=False))
