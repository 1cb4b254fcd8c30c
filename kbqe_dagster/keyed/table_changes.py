"""How the messages of a topic keyed by its Kafka key (``keyed.key_from: kafka_key``: a compacted
topic, a KTable) become changelog records (stage side; core/keyed/contract.py has the contract).

The key columns come from the **Kafka key** (:class:`KafkaKeys`): an Avro key's record fields
(Confluent-framed, its schema from the registry: the key body *is* those fields' encoding, so it
is copied as is), a string key as one ``string`` column, or a JSON key's named fields, each
encoded as its ``key_types`` says.

A changelog record (:class:`TableLayout`) is the change columns, the key columns, then the
value's fields, each made NULLABLE (a tombstone has no values) and a value field named like a
key column left out (the Kafka key is what identifies the row: compaction keeps one value per
Kafka key). The value's bytes are copied field by field with the skippers of
keyed/avro_skip.py, a null-branch index written before a field that was not nullable: never
a decode and re-encode, unless Kafka Connect semantic types need their values converted (as
the other layouts, keyed/changes.py).

A **tombstone** (null value) is the change ``_op = 'd'``, ``_deleted = true``, the key columns
and nothing else: its layout has no value fields, so its file's columns are a prefix of every
value file's, and its row's value columns load as NULL (a key-only delete: keyed/rows_sql.py
keeps the last values with soft deletes).

Each layout's files carry the declared-schema id of its changelog record
(core/formats/source_format.py): a key schema and a value schema may change independently,
and a tombstone's layout has no registry id at all.
"""

from __future__ import annotations

import copy
import json
import struct
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from io import BytesIO
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from kbqe_dagster.core.config.pipeline import TopicConfig
from kbqe_dagster.core.errors import (
    BadInputError,
    BadKeyError,
    NotAChangeError,
    UnsupportedSchemaError,
)
from kbqe_dagster.core.formats.avro_names import full_name
from kbqe_dagster.core.formats.connect_types import SemanticMapping, semantic_mapping
from kbqe_dagster.core.formats.source_format import declared_schema_id
from kbqe_dagster.core.keyed.contract import CHANGE_COLUMNS, KeyFormat, changelog_table
from kbqe_dagster.core.record.wire import HEADER_SIZE, MAGIC_BYTE
from kbqe_dagster.core.transforms.kinds import MessageMeta
from kbqe_dagster.keyed.avro_skip import SkipCompiler, encode_long, read_long
from kbqe_dagster.keyed.changes import (
    CHANGE_FIELDS,
    DELETE_OP,
    RowTransform,
    change_columns,
    check_field,
    is_orderable,
    row_transform,
)
from kbqe_dagster.staging.probe.record_probe import RecordProbe

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MS = datetime.resolution * 1000


@dataclass(frozen=True)
class KeyColumns:
    """The key columns one kind of Kafka key gives (an Avro key schema, or the configured
    string or JSON key)."""

    identity: Hashable
    """What tells this key layout apart from another of the topic's."""
    fields: tuple[dict[str, Any], ...]
    """The key columns as Avro fields (named types fully qualified)."""

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f["name"] for f in self.fields)


class KafkaKeys:
    """Reads a message's Kafka key as its key columns and their Avro encoding; raises
    :class:`BadKeyError` naming what is wrong. ``lookup``: the registry (Avro keys)."""

    def __init__(self, topic: TopicConfig, lookup: Any) -> None:
        keyed = topic.keyed
        assert keyed is not None and keyed.kafka_ordered
        self.keyed = keyed
        self.lookup = lookup
        self._avro: dict[bytes, tuple[KeyColumns, RecordProbe] | BadKeyError] = {}
        if keyed.key_format is KeyFormat.STRING:
            self._fixed = KeyColumns("string", ({"name": keyed.key[0], "type": "string"},))
        elif keyed.key_format is KeyFormat.JSON:
            fields = tuple({"name": k, "type": keyed.key_type(k)} for k in keyed.key)
            self._fixed = KeyColumns("json", fields)

    def read(self, key: bytes | None) -> tuple[KeyColumns, bytes]:
        if key is None:
            raise BadKeyError("the Kafka key is null: a table topic's key identifies the row")
        key_format = self.keyed.key_format
        if key_format is KeyFormat.AVRO:
            return self._read_avro(key)
        if key_format is KeyFormat.STRING:
            try:
                key.decode("utf-8")
            except UnicodeDecodeError as error:
                raise BadKeyError(f"the Kafka key is not UTF-8 text: {error}") from None
            return self._fixed, encode_long(len(key)) + key
        return self._fixed, self._json(key)

    def _read_avro(self, key: bytes) -> tuple[KeyColumns, bytes]:
        if len(key) < HEADER_SIZE or key[0] != MAGIC_BYTE:
            raise BadKeyError(
                "the Kafka key is not Confluent-framed Avro (keyed.key_format: avro; "
                "string or json keys say so)"
            )
        header = key[:HEADER_SIZE]
        known = self._avro.get(header)
        if known is None:
            known = self._avro[header] = self._avro_columns(int.from_bytes(key[1:5], "big"))
        if isinstance(known, BadKeyError):
            raise BadKeyError(str(known))
        columns, probe = known
        body = key[HEADER_SIZE:]
        try:
            probe.probe(body)
        except BadInputError as error:
            raise BadKeyError(f"the Avro key does not decode with its schema: {error}") from None
        return columns, body

    def _avro_columns(self, schema_id: int) -> tuple[KeyColumns, RecordProbe] | BadKeyError:
        registered = self.lookup.get(schema_id)
        if registered is None:
            return BadKeyError(f"the key's schema id {schema_id} is not in the registry")
        if registered.schema_type != "AVRO":
            return BadKeyError(
                f"the key's schema id {schema_id} is a {registered.schema_type} schema"
            )
        schema = registered.schema
        if not isinstance(schema, Mapping) or schema.get("type") != "record":
            return BadKeyError(f"the key's schema id {schema_id} is not an Avro record")
        try:
            probe = RecordProbe(schema, ())
            parsed: Any = parse_schema(copy.deepcopy(dict(schema)), _write_hint=False)
        except (UnsupportedSchemaError, ValueError) as error:
            return BadKeyError(f"the key's schema id {schema_id} does not parse: {error}")
        return KeyColumns(("avro", schema_id), tuple(parsed["fields"])), probe

    def _json(self, key: bytes) -> bytes:
        try:
            value = json.loads(key)
        except (UnicodeDecodeError, ValueError) as error:
            raise BadKeyError(f"the Kafka key is not JSON: {error}") from None
        if not isinstance(value, dict):
            raise BadKeyError(f"the Kafka key is JSON {type(value).__name__}, not an object")
        out = b""
        for name in self.keyed.key:
            kind = self.keyed.key_type(name)
            out += _encode_json_field(name, value.get(name), kind)
        return out


def _encode_json_field(name: str, value: Any, kind: str) -> bytes:
    if value is None:
        raise BadKeyError(f"the JSON key has no value for key field {name!r}")
    if kind == "string" and isinstance(value, str):
        try:
            data = value.encode("utf-8")
        except UnicodeEncodeError as error:  # a lone surrogate escape (json.loads reads one)
            raise BadKeyError(
                f"the JSON key's field {name!r} is not Unicode text: {error}"
            ) from None
        return encode_long(len(data)) + data
    if kind == "long" and isinstance(value, int) and not isinstance(value, bool):
        if -(1 << 63) <= value < (1 << 63):
            return encode_long(value)
    if kind == "double" and isinstance(value, (int, float)) and not isinstance(value, bool):
        return struct.pack("<d", float(value))
    if kind == "boolean" and isinstance(value, bool):
        return b"\x01" if value else b"\x00"
    raise BadKeyError(
        f"the JSON key's field {name!r} is {json.dumps(value)}, not a {kind} (keyed.key_types)"
    )


# --- the changelog record of a key layout and a value schema ---------------------------------
_KEEP, _WRAP, _SHIFT, _DROP = range(4)


@dataclass(frozen=True)
class TableLayout:
    """The changelog record of one key layout and one value writer schema (None: a tombstone's),
    and how to write it."""

    schema: dict[str, Any]
    """The changelog record (change columns, key columns, value fields), before enrichment."""
    schema_id: int
    """Its files' declared-schema id."""
    wanted: tuple[str, ...] = ()
    """Value field paths the change columns read (version, delete field)."""
    version_path: str | None = None
    delete_path: str | None = None
    value_fields: tuple[dict[str, Any], ...] = ()
    """The value's top-level fields, as its bytes are laid out (after semantic conversion)."""
    actions: tuple[int, ...] = ()
    namespace: str | None = None
    semantic: SemanticMapping | None = None
    transform: RowTransform | None = None
    """The topic's transforms over the value (as converted): ``value_fields`` are then their
    output's; None without transforms."""

    @cached_property
    def _skips(self) -> tuple[Any, ...]:
        compiler = SkipCompiler(self.namespace)
        return tuple(compiler.compile(f["type"]) for f in self.value_fields)

    @cached_property
    def _codecs(self) -> tuple[Any, Any]:
        assert self.semantic is not None
        return parse_schema(self.semantic.writer), parse_schema(self.semantic.schema)

    @property
    def full_name(self) -> str:
        return str(self.schema["name"])

    def version(self, fields: Mapping[str, Any], kafka_timestamp_ms: int | None) -> int:
        """``_source_ts_ms``: the version field's value, else the Kafka timestamp (0 without)."""
        if self.version_path is None:
            return kafka_timestamp_ms or 0
        value = fields.get(self.version_path)
        if value is None:
            raise NotAChangeError(f"{self.version_path} is null: the change has no version")
        return (value - _EPOCH) // _MS if isinstance(value, datetime) else int(value)

    def record(self, key: bytes, body: bytes, fields: Mapping[str, Any],
               kafka_timestamp_ms: int | None, meta: MessageMeta | None = None) -> bytes:  # fmt: skip
        """The changelog record of a value message: an upsert, or a delete when the delete
        field is true (both read from the value as it came). ``meta``: the message's Kafka
        coordinates, which an ``add`` transform may read (needed with transforms)."""
        deleted = bool(self.delete_path and fields.get(self.delete_path))
        version = self.version(fields, kafka_timestamp_ms)
        head = change_columns(DELETE_OP if deleted else "u", version, deleted) + key
        row = self._converted(body)
        if self.transform is not None:
            assert meta is not None, "a transformed value needs its message's meta"
            row = self.transform.apply(row, meta)
        return head + self._values(row)

    def kernel_rewrites(self) -> tuple[tuple[int, str], ...]:
        """The value fields :meth:`_converted` re-encodes, for the native kernel (kernel/src/
        table.rs): (index among the value's top-level fields, kind of kernel/src/
        connect_types.rs), in field order; empty when the value's bytes are copied. ValueError
        when one is not the kernel's (the layout then stays on the Python path)."""
        return () if self.semantic is None else tuple(sorted(self.semantic.kernel_rewrites()))

    @staticmethod
    def tombstone(key: bytes, kafka_timestamp_ms: int | None) -> bytes:
        """The changelog record of a tombstone, in the key-only layout."""
        return change_columns(DELETE_OP, kafka_timestamp_ms or 0, True) + key

    def _converted(self, body: bytes) -> bytes:
        if self.semantic is None:
            return body
        writer, staged = self._codecs
        out = BytesIO()
        row: Any = schemaless_reader(BytesIO(body), writer, None)
        schemaless_writer(out, staged, self.semantic.convert(row))
        return out.getvalue()

    def _values(self, body: bytes) -> bytes:
        out = bytearray()
        pos = 0
        for skip, action in zip(self._skips, self.actions, strict=True):
            end = skip(body, pos)
            if action == _KEEP:
                out += body[pos:end]
            elif action == _WRAP:
                out += b"\x02" + body[pos:end]  # branch 1 of ["null", T]
            elif action == _SHIFT:
                branch, start = read_long(body, pos)
                out += encode_long(branch + 1) + body[start:end]
            pos = end
        return bytes(out)


def table_layout(
    topic: TopicConfig,
    key: KeyColumns,
    value: Mapping[str, Any] | None,
    hmac_keys: Mapping[int, bytes] | None = None,
) -> TableLayout:
    """The layout of ``key``'s columns with ``value``'s fields (None: a tombstone's), the
    topic's transforms applied to the value (``hmac_keys``: their masks' keys by index). Raises
    :class:`UnsupportedSchemaError` (bad input: the schema's messages are dead-lettered) when
    the value is not a record or a column collides with a change column,
    :class:`~kbqe_dagster.core.errors.TransformSchemaError` when the transforms do not apply
    to it, and
    :class:`~kbqe_dagster.core.errors.ConfigError` when ``keyed.version`` or
    ``keyed.delete_field`` is not a field of the right type (the range fails, naming it)."""
    keyed = topic.keyed
    assert keyed is not None
    key_fields = [copy.deepcopy(f) for f in key.fields]
    _check_names(key.names, "key column")
    if value is None:
        name = changelog_table(topic.routing.static_destination.table)  # type: ignore[union-attr]
        schema = {"type": "record", "name": name, "fields": [*CHANGE_FIELDS, *key_fields]}
        return TableLayout(schema=schema, schema_id=declared_schema_id(schema))
    if not isinstance(value, Mapping) or value.get("type") != "record":
        raise UnsupportedSchemaError("a keyed topic's values must be Avro records")
    where = f"topics[{topic.name}].keyed"
    if keyed.version:
        check_field(value, keyed.version, f"{where}.version", is_orderable,
                     "a long, an int or a timestamp-millis/micros")  # fmt: skip
    if keyed.delete_field:
        check_field(value, keyed.delete_field, f"{where}.delete_field",
                     lambda t: t == "boolean", "a boolean")  # fmt: skip
    semantic = semantic_mapping(value) if keyed.semantic_types else None
    converted = semantic.schema if semantic is not None else value
    transform = row_transform(converted, topic, hmac_keys)
    record = converted if transform is None else transform.compiled.output_schema
    namespace = value.get("namespace") or full_name(value, None).rpartition(".")[0] or None
    taken = {n.lower() for n in key.names}
    actions, columns = [], []
    for field in record["fields"]:
        action, column = _nullable(field, taken)
        actions.append(action)
        if column is not None:
            columns.append(column)
    _check_names(tuple(c["name"] for c in columns), "value field")
    schema = {k: v for k, v in copy.deepcopy(dict(record)).items() if k != "fields"}
    schema.pop("namespace", None)
    schema["name"] = full_name(value, None)
    schema["fields"] = [*CHANGE_FIELDS, *key_fields, *columns]
    try:
        parse_schema(copy.deepcopy(schema), _write_hint=False)
    except Exception as error:  # noqa: BLE001 - fastavro raises several types for a bad schema
        raise UnsupportedSchemaError(
            f"the key's and the value's fields do not make one record: {error}"
        ) from None
    return TableLayout(
        schema=schema,
        schema_id=declared_schema_id(schema),
        wanted=tuple(p for p in (keyed.version, keyed.delete_field) if p),
        version_path=keyed.version,
        delete_path=keyed.delete_field,
        value_fields=tuple(record["fields"]),
        actions=tuple(actions),
        namespace=namespace,
        semantic=semantic if semantic is not None and semantic.rewrites_values else None,
        transform=transform,
    )


def _nullable(field: Mapping[str, Any], taken: set[str]) -> tuple[int, dict[str, Any] | None]:
    """What becomes of a value field: left out (named like a key column), kept (already
    nullable), or made nullable: ``T`` → ``["null", T]``, a union without null gets it first."""
    if field["name"].lower() in taken:
        return _DROP, None
    out = copy.deepcopy(dict(field))
    kind = field["type"]
    if isinstance(kind, list):
        if "null" in kind:
            return _KEEP, out
        out["type"], out["default"] = ["null", *out["type"]], None
        return _SHIFT, out
    out["type"], out["default"] = ["null", out["type"]], None
    return _WRAP, out


def _check_names(names: tuple[str, ...], what: str) -> None:
    clash = {c.lower() for c in CHANGE_COLUMNS} & {n.lower() for n in names}
    if clash:
        raise UnsupportedSchemaError(f"{what}(s) {sorted(clash)} collide with change columns")
