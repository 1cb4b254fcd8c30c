"""Enrichment columns: the extended schema and the bytes put before every staged record.

An Avro record's binary encoding is its fields' encodings concatenated, so the encoding of a
few extra fields followed by the body of a Confluent message (written with schema *W*) is a
valid record of the *extended* schema: the enrichment fields, then *W*'s fields. That is how
the stage job writes records without decoding and re-encoding them (DESIGN.md §5): it appends
``encode(enrichment) + body`` to an Avro container whose schema is ``extended_schema(W)``.

Why first and not last (DESIGN.md §5 allows both): schemas evolve by adding fields at the end
(BACKWARD compatibility). With the enrichment first, a newer schema's file has the older
file's columns in the same positions plus the new ones at the end, so readers that match Avro
columns by position (the BigQuery emulator, DuckDB, Hive-style tools) line up across schema
versions. BigQuery itself matches by name and does not care.

Enrichment fields, in this order (a disabled optional column is left out):

================== ============================================ ==============================
column             Avro type                                    value
================== ============================================ ==============================
event date         ``int`` / ``date``                           the record's event day
topic              ``string``                                   Kafka topic
partition          ``int``                                      Kafka partition
offset             ``long``                                     Kafka offset
timestamp          ``["null", long/timestamp-millis]``          Kafka timestamp, null if -1
key (optional)     ``["null", "bytes"]``                        message key, null if absent
headers (optional) ``array<{key: string, value: [null, bytes]}>``  message headers, in order
event hour (HOUR)  ``long`` / ``timestamp-millis``              the event instant's UTC hour
================== ============================================ ==============================

The event hour is written only into the files of HOUR-partitioned tables
(core/record/partitioning.py): BigQuery partitions by hour on a TIMESTAMP column, and a DAY table
has no use for it. It comes last among the enrichment columns, so an HOUR table's prefix is a
DAY table's prefix plus one long (:func:`event_hour_suffix`), and every file of one table has
the same layout.

The Kafka timestamp is nullable because Kafka reports ``-1`` when a message has none (old
producers, ``NO_TIMESTAMP_TYPE``); writing 1969-12-31T23:59:59.999 instead would be a lie that
looks like data. A producer-set timestamp past year 9999 is null too: BigQuery would refuse
the whole file. Headers are a plain (never null) array: BigQuery's REPEATED columns cannot be
NULL, an empty array is what "no headers" means there.

Extended schemas are deterministic: the same writer schema and config give the same dict and,
through :func:`schema_json`, the same JSON text, because the staging file key is the schema id
and every file of one key must carry one schema.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from functools import lru_cache
from typing import Any

from kbqe_dagster.core.errors import ConfigError, UnsupportedSchemaError
from kbqe_dagster.core.formats.avro_names import full_name
from kbqe_dagster.core.record.dead_letter_record import MAX_TIMESTAMP_MS

__all__ = [
    "EnrichmentConfig",
    "EnrichmentEncoder",
    "HEADER_RECORD_NAME",
    "encode_enrichment",
    "event_hour_suffix",
    "extended_schema",
    "schema_json",
    "with_event_hour",
]

# Full name of the headers' item record. A namespace of our own, so it cannot clash with a
# short name in the writer's schema; a clash on the full name is still checked.
HEADER_RECORD_NAME = "kbqe_dagster.enrichment.KafkaHeader"

# Avro field names; BigQuery column names are the same set (and case-insensitive).
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class EnrichmentConfig:
    """Names of the enrichment columns put before the fields of every staged record.

    The four required columns make every row traceable to its Kafka message and duplicates
    detectable in the warehouse; the optional ones are disabled with ``None``.
    """

    event_date_column: str = "_event_date"
    """Event date, Avro ``int`` with logicalType ``date`` (BigQuery DATE, the DAY partition
    column). Required."""
    topic_column: str = "_kafka_topic"
    """Kafka topic, ``string``. Required."""
    partition_column: str = "_kafka_partition"
    """Kafka partition, ``int``. Required."""
    offset_column: str = "_kafka_offset"
    """Kafka offset, ``long``. Required."""
    timestamp_column: str | None = "_kafka_timestamp"
    """Kafka message timestamp, ``["null", {long, timestamp-millis}]``: null when Kafka has no
    timestamp (-1) or the producer set one past year 9999. ``None`` leaves the column out."""
    key_column: str | None = None
    """Message key, ``["null", "bytes"]``. ``None`` (default) leaves the column out."""
    headers_column: str | None = None
    """Message headers, ``array`` of ``{key: string, value: ["null", "bytes"]}`` in Kafka's
    order (keys may repeat). ``None`` (default) leaves the column out."""
    event_hour_column: str = "_event_hour"
    """Event hour, ``long`` with logicalType ``timestamp-millis`` (BigQuery TIMESTAMP): the
    event instant truncated to the hour, UTC; the HOUR partition column. Written only into
    the files of HOUR-partitioned tables (``tables:``). Required."""

    def __post_init__(self) -> None:
        problem = _config_problem(self)
        if problem:
            raise ConfigError(f"enrichment: {problem}")

    @classmethod
    def from_mapping(
        cls, raw: Mapping[str, Any] | None, path: str = "enrichment"
    ) -> EnrichmentConfig:
        """Build from a configuration mapping (missing keys take their defaults).

        Errors are :class:`ConfigError` naming ``path.key``: unknown keys, non-string names,
        ``null`` for a required column, invalid or duplicate column names.
        """
        if raw is None:
            return cls()
        if not isinstance(raw, Mapping):
            raise ConfigError(f"{path}: expected a mapping, got {type(raw).__name__}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(raw) - set(known))
        if unknown:
            raise ConfigError(f"{path}: unknown key(s) {unknown}; known keys: {sorted(known)}")
        for key, value in raw.items():
            if value is None and key in _REQUIRED:
                raise ConfigError(f"{path}.{key}: this column is required, it cannot be null")
            if value is not None and not isinstance(value, str):
                raise ConfigError(f"{path}.{key}: expected a column name, got {value!r}")
        try:
            return cls(**raw)
        except ConfigError as exc:
            raise ConfigError(f"{path}: {exc}") from None

    @property
    def columns(self) -> tuple[str, ...]:
        """The enabled column names of a DAY table's files, in the order they are written
        (before the record's fields); an HOUR table's files add :attr:`event_hour_column`."""
        return tuple(name for name, _ in _enrichment_fields(self))

    def columns_of(self, hourly: bool) -> tuple[str, ...]:
        """The enrichment columns of a DAY (``hourly`` False) or HOUR table's files."""
        return self.columns + ((self.event_hour_column,) if hourly else ())


_REQUIRED = (
    "event_date_column",
    "topic_column",
    "partition_column",
    "offset_column",
    "event_hour_column",
)


def _config_problem(config: EnrichmentConfig) -> str | None:
    seen: dict[str, str] = {}
    for f in fields(config):
        name = getattr(config, f.name)
        if name is None:
            if f.name in _REQUIRED:
                return f"{f.name} is required"
            continue
        if not isinstance(name, str) or not _NAME_RE.match(name):
            return f"{f.name}={name!r} is not a valid Avro/BigQuery column name"
        folded = name.lower()  # BigQuery column names are case-insensitive
        if folded in seen:
            return f"{f.name} and {seen[folded]} both name column {name!r}"
        seen[folded] = f.name
    return None


# --- schema ----------------------------------------------------------------------------------
_TIMESTAMP_TYPE = {"type": "long", "logicalType": "timestamp-millis"}


def _enrichment_fields(
    config: EnrichmentConfig, hourly: bool = False
) -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = [
        (config.event_date_column, {"type": {"type": "int", "logicalType": "date"}}),
        (config.topic_column, {"type": "string"}),
        (config.partition_column, {"type": "int"}),
        (config.offset_column, {"type": "long"}),
    ]
    if config.timestamp_column:
        out.append((config.timestamp_column, {"type": ["null", _TIMESTAMP_TYPE], "default": None}))
    if config.key_column:
        out.append((config.key_column, {"type": ["null", "bytes"], "default": None}))
    if config.headers_column:
        header = {
            "type": "record",
            "name": HEADER_RECORD_NAME.rsplit(".", 1)[1],
            "namespace": HEADER_RECORD_NAME.rsplit(".", 1)[0],
            "fields": [
                {"name": "key", "type": "string"},
                {"name": "value", "type": ["null", "bytes"], "default": None},
            ],
        }
        out.append(
            (config.headers_column, {"type": {"type": "array", "items": header}, "default": []})
        )
    if hourly:
        out.append((config.event_hour_column, {"type": _TIMESTAMP_TYPE}))
    return out


def extended_schema(
    writer_schema: Mapping[str, Any], config: EnrichmentConfig, hourly: bool = False
) -> dict[str, Any]:
    """The writer's record schema with the enrichment fields first (see the module docstring);
    ``hourly``: of an HOUR table's files, with the event hour column last among them.

    Name, namespace, doc, aliases and every other attribute of the writer's record are kept,
    and its fields keep their order after the enrichment columns. The input is not modified. Raises :class:`UnsupportedSchemaError` when the schema is not a
    record, or when an enrichment column collides (case-insensitively, as BigQuery compares
    column names) with one of its fields, or the headers record name with one of its types.
    """
    if not isinstance(writer_schema, Mapping) or writer_schema.get("type") not in (
        "record",
        "error",
    ):
        kind = writer_schema.get("type") if isinstance(writer_schema, Mapping) else writer_schema
        raise UnsupportedSchemaError(
            f"only record schemas can be staged with enrichment columns, got type {kind!r}"
        )
    original = writer_schema.get("fields")
    if not isinstance(original, list):
        raise UnsupportedSchemaError(
            f"record schema {full_name(writer_schema)!r} has no field list"
        )
    existing = {
        str(f.get("name", "")).lower(): f.get("name") for f in original if isinstance(f, Mapping)
    }
    for column in config.columns_of(hourly):
        if column.lower() in existing:
            raise UnsupportedSchemaError(
                f"enrichment column {column!r} collides with field {existing[column.lower()]!r} of "
                f"{full_name(writer_schema)!r}; rename the column in the enrichment config"
            )
    if config.headers_column and HEADER_RECORD_NAME in _named_types(writer_schema):
        raise UnsupportedSchemaError(
            f"{full_name(writer_schema)!r} defines type {HEADER_RECORD_NAME!r}, the enrichment "
            "headers record; disable the headers column"
        )
    extended = copy.deepcopy(dict(writer_schema))
    extended["fields"] = [
        {"name": name, **spec} for name, spec in _enrichment_fields(config, hourly)
    ] + list(extended["fields"])
    return extended


def with_event_hour(extended: Mapping[str, Any], config: EnrichmentConfig) -> dict[str, Any]:
    """An HOUR table's file schema from a DAY table's (``extended_schema(W, config)`` or a
    format's equivalent with the same enrichment prefix): the event hour column inserted
    after the other enrichment columns. Raises :class:`UnsupportedSchemaError` when a record
    field already has its name."""
    fields_ = list(extended.get("fields") or ())
    at = len(config.columns)
    column = config.event_hour_column
    clash = [
        f.get("name") for f in fields_[at:] if str(f.get("name", "")).lower() == column.lower()
    ]
    if clash:
        raise UnsupportedSchemaError(
            f"enrichment column {column!r} collides with field {clash[0]!r} of "
            f"{full_name(extended)!r}; rename enrichment.event_hour_column"
        )
    hourly = dict(extended)
    column_field = {"name": column, "type": dict(_TIMESTAMP_TYPE)}
    hourly["fields"] = fields_[:at] + [column_field] + fields_[at:]
    return hourly


def schema_json(schema: Mapping[str, Any]) -> str:
    """Compact, deterministic JSON text of a schema, as written into container headers."""
    return json.dumps(schema, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def _named_types(schema: Any, namespace: str | None = None) -> set[str]:
    """Full names of the named types a schema defines (good enough for a collision check)."""
    found: set[str] = set()
    if isinstance(schema, list):
        for branch in schema:
            found |= _named_types(branch, namespace)
    elif isinstance(schema, Mapping):
        if schema.get("type") in ("record", "error", "enum", "fixed") and "name" in schema:
            name = str(schema["name"])
            ns = schema.get("namespace", namespace) if "." not in name else name.rsplit(".", 1)[0]
            found.add(name if "." in name or not ns else f"{ns}.{name}")
            namespace = ns
        for f in schema.get("fields", ()) or ():
            if isinstance(f, Mapping):
                found |= _named_types(f.get("type"), namespace)
        for key in ("items", "values"):
            if key in schema:
                found |= _named_types(schema[key], namespace)
        if isinstance(schema.get("type"), (list, Mapping)):
            found |= _named_types(schema["type"], namespace)
    return found


# --- encoding --------------------------------------------------------------------------------
# Varints of zigzagged values: a table for the 1–2 byte ones, a table of 14-bit groups with
# continuation bits for the rest. Offsets and millisecond timestamps take 5–6 bytes; a Python
# loop per byte costs about three times this.
_FINAL14 = [bytes([n]) if n < 0x80 else bytes([(n & 0x7F) | 0x80, n >> 7]) for n in range(1 << 14)]
_CONT14 = [bytes([(n & 0x7F) | 0x80, (n >> 7) | 0x80]) for n in range(1 << 14)]


def _varint(n: int) -> bytes:
    """Avro varint of a non-negative (already zigzagged) integer."""
    if n < 0x4000:
        return _FINAL14[n]
    if n < 0x10000000:
        return _CONT14[n & 0x3FFF] + _FINAL14[n >> 14]
    if n < 0x40000000000:
        return _CONT14[n & 0x3FFF] + _CONT14[(n >> 14) & 0x3FFF] + _FINAL14[n >> 28]
    out = b""
    while n >= 0x4000:
        out += _CONT14[n & 0x3FFF]
        n >>= 14
    return out + _FINAL14[n]


def _long(value: int) -> bytes:
    """Avro ``long`` (zigzag varint). Values outside int64 are a caller bug."""
    return _varint((value << 1) ^ (value >> 63))


def _string(value: str) -> bytes:
    raw = value.encode("utf-8")
    return _varint(len(raw) << 1) + raw


def _bytes(value: bytes) -> bytes:
    return _varint(len(value) << 1) + bytes(value)


_NULL = b"\x00"
_SECOND_BRANCH = b"\x02"
_INT32 = (-(1 << 31), (1 << 31) - 1)
# Kafka's CreateTime is whatever the producer wrote; a value past BigQuery's last instant
# would make the whole file unloadable.
_MAX_TIMESTAMP_MS = MAX_TIMESTAMP_MS


class EnrichmentEncoder:
    """Encodes the enrichment prefix of the records of one topic-partition.

    The topic and partition are constant for a staged file, so their encoding is computed
    once. Per record the event day (cached: days repeat), offset and timestamp are encoded.
    Offsets are consecutive and timestamps close, so their varints share everything above
    the low 14 bits with the previous record's: that part is cached too, and a record costs
    two table lookups and one join.
    """

    __slots__ = ("config", "topic", "partition", "_constant", "_days", "_with_ts", "_with_key",
                 "_with_headers", "_offset_high", "_offset_tail", "_ts_high", "_ts_tail")  # fmt: skip

    def __init__(self, config: EnrichmentConfig, topic: str, partition: int) -> None:
        if not _INT32[0] <= partition <= _INT32[1]:
            raise ValueError(f"partition {partition} does not fit an Avro int")
        self.config = config
        self.topic = topic
        self.partition = partition
        self._constant = _string(topic) + _long(partition)
        self._days: dict[int, bytes] = {}
        self._with_ts = config.timestamp_column is not None
        self._with_key = config.key_column is not None
        self._with_headers = config.headers_column is not None
        self._offset_high = self._ts_high = 0
        self._offset_tail = self._ts_tail = b""

    def encode(
        self,
        event_day: int,
        offset: int,
        timestamp_ms: int | None = None,
        key: bytes | None = None,
        headers: Iterable[tuple[str, bytes | None]] | None = None,
    ) -> bytes:
        """The prefix for one record: ``event_day`` is days since 1970-01-01; a timestamp
        that is ``None``, negative (Kafka's -1) or past year 9999 is written as null.
        ``key``/``headers`` are ignored when their column is disabled."""
        day = self._days.get(event_day)
        if day is None:
            if len(self._days) >= 4096:  # a bounded cache: event days cluster, garbage does not
                self._days.clear()
            day = self._days[event_day] = _long(event_day)
        n = offset << 1  # zigzag of a non-negative long
        high = n >> 14
        if high > 0:
            if high != self._offset_high:
                self._offset_high, self._offset_tail = high, _varint(high)
            parts = [day, self._constant, _CONT14[n & 0x3FFF], self._offset_tail]
        elif n >= 0:
            parts = [day, self._constant, _FINAL14[n]]
        else:
            raise ValueError(f"negative Kafka offset {offset}")
        if self._with_ts:
            if timestamp_ms is None or not 0 <= timestamp_ms <= _MAX_TIMESTAMP_MS:
                parts.append(_NULL)
            else:
                n = timestamp_ms << 1
                high = n >> 14
                if high:
                    if high != self._ts_high:
                        self._ts_high, self._ts_tail = high, _varint(high)
                    parts += (_SECOND_BRANCH, _CONT14[n & 0x3FFF], self._ts_tail)
                else:
                    parts += (_SECOND_BRANCH, _FINAL14[n])
        if self._with_key:
            parts.append(_NULL if key is None else _SECOND_BRANCH + _bytes(key))
        if self._with_headers:
            parts.append(_headers(headers))
        return b"".join(parts)


def _headers(headers: Iterable[tuple[str, bytes | None]] | None) -> bytes:
    items = list(headers) if headers else []
    if not items:
        return _NULL
    out = _long(len(items))
    for key, value in items:
        out += _string(key)
        out += _NULL if value is None else _SECOND_BRANCH + _bytes(value)
    return out + _NULL


def event_hour_suffix(epoch_hour: int) -> bytes:
    """The event hour column's encoding (hours since 1970 UTC → its first millisecond), put
    after a record's enrichment prefix in an HOUR table's files."""
    return _long(epoch_hour * 3_600_000)


@lru_cache(maxsize=256)
def _encoder(config: EnrichmentConfig, topic: str, partition: int) -> EnrichmentEncoder:
    return EnrichmentEncoder(config, topic, partition)


def encode_enrichment(
    event_day: int,
    topic: str,
    partition: int,
    offset: int,
    timestamp_ms: int | None,
    key: bytes | None,
    headers: Iterable[tuple[str, bytes | None]] | None,
    config: EnrichmentConfig,
) -> bytes:
    """One record's enrichment prefix. Convenience over :class:`EnrichmentEncoder`, which a
    hot loop should hold on to instead (this looks the encoder up in a small cache)."""
    return _encoder(config, topic, partition).encode(event_day, offset, timestamp_ms, key, headers)
