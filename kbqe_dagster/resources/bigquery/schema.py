"""The BigQuery table schema that an Avro load job creates, derived from the Avro schema of a
staged file (its container header), as BigQuery itself derives it with
``use_avro_logical_types``.

Why derive it at all, when BigQuery reads the schema from the Avro file by itself? Because
the local BigQuery emulator does not: an Avro load into a missing table fails there unless
the job carries an explicit ``schema`` (pinned by
``test_emulator_gap_avro_load_creates_the_table_only_with_an_explicit_schema``). So the load
step sends the schema only when the destination table does not exist yet, and only then
does this mapping matter; it follows BigQuery's Avro conversion rules, so on BigQuery the
created table is the one BigQuery would have inferred. Later loads carry no schema: the
table evolves through ``ALLOW_FIELD_ADDITION``/``ALLOW_FIELD_RELAXATION`` from each file's
own schema, which an explicit (older) schema would contradict.

Mapping (BigQuery "Avro conversions", logical types on):

=============================== ======================================================
Avro                            BigQuery
=============================== ======================================================
union ``[null, T]``             T, mode NULLABLE (any other field: REQUIRED)
union of 2+ non-null types      unsupported (BigQuery refuses it too)
boolean / int, long / float,    BOOLEAN / INTEGER / FLOAT / BYTES / STRING
double / bytes / string
enum / fixed                    STRING / BYTES
record                          RECORD with its fields
array of T                      T, mode REPEATED
map of T                        REPEATED RECORD ``(key STRING, value T)``
date / time-* / timestamp-*     DATE / TIME / TIMESTAMP
local-timestamp-*               DATETIME
decimal                         NUMERIC when scale <= 9 and integer digits <= 29, else
                                BIGNUMERIC when scale <= 38 and integer digits <= 38
uuid                            STRING
string with ``sqlType: JSON``   JSON (BigQuery's annotation for JSON columns in Avro)
=============================== ======================================================

The result is the REST representation (``{"name", "type", "mode", "fields"}`` dicts), which
``google.cloud.bigquery.SchemaField.from_api_repr`` turns into schema fields. With
``keep_maps`` a map's column says ``"type": "MAP"`` instead of ``"RECORD"`` (same mode, same
``key``/``value`` fields): not a BigQuery type, but what the emulator's load path needs to
know which repeated records its files hold as DuckDB maps (``emulator_maps.py``).
"""

from __future__ import annotations

from typing import Any

from kbqe_dagster.core.errors import LoadError
from kbqe_dagster.core.formats.avro_names import NamedTypes, namespace_of

_PRIMITIVES = {
    "boolean": "BOOLEAN",
    "int": "INTEGER",
    "long": "INTEGER",
    "float": "FLOAT",
    "double": "FLOAT",
    "bytes": "BYTES",
    "string": "STRING",
}
_LOGICAL = {
    ("int", "date"): "DATE",
    ("int", "time-millis"): "TIME",
    ("long", "time-micros"): "TIME",
    ("long", "timestamp-millis"): "TIMESTAMP",
    ("long", "timestamp-micros"): "TIMESTAMP",
    ("long", "local-timestamp-millis"): "DATETIME",
    ("long", "local-timestamp-micros"): "DATETIME",
    ("string", "uuid"): "STRING",
}


def bigquery_schema_from_avro(
    schema: dict[str, Any],
    source: str = "avro file",
    *,
    keep_maps: bool = False,
) -> list[dict]:
    """The columns of a table created from records of ``schema`` (a record schema); with
    ``keep_maps``, maps marked as ``MAP`` (module docstring).

    Raises :class:`LoadError` naming ``source`` and the field for a type BigQuery cannot load.
    """
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise LoadError(f"{source}: the Avro schema is not a record schema")
    return _Converter(source, keep_maps).record_fields(schema, path="")


class _Converter:
    def __init__(self, source: str, keep_maps: bool = False) -> None:
        self.source = source
        self.map_type = "MAP" if keep_maps else "RECORD"
        self.names = NamedTypes()  # named types met so far, for references by name

    def record_fields(self, record: dict[str, Any], path: str) -> list[dict]:
        self.names.remember(record, None)
        namespace = namespace_of(record, None)
        return [
            self.column(f["name"], f["type"], f"{path}{f['name']}", namespace)
            for f in record.get("fields", [])
        ]

    def column(self, name: str, avro: Any, path: str, namespace: str | None) -> dict:
        mode = "REQUIRED"
        if isinstance(avro, list):
            branches = [b for b in avro if b != "null"]
            if len(branches) != 1:
                raise LoadError(
                    f"{self.source}: field {path} is a union of {len(branches)} non-null types; "
                    "BigQuery loads only [null, T] unions"
                )
            mode = "NULLABLE" if len(avro) > 1 else "REQUIRED"
            avro = branches[0]
        avro = self.names.resolve(avro, namespace)
        if isinstance(avro, dict) and avro.get("type") == "array":
            item = avro["items"]
            if isinstance(item, list):  # BigQuery has no NULL inside an array: [null, T] → T
                item = [b for b in item if b != "null"]
                item = item[0] if len(item) == 1 else item
            inner = self.column(name, item, f"{path}[]", namespace)
            if inner["mode"] == "REPEATED":
                raise LoadError(f"{self.source}: field {path} is an array of arrays")
            return {**inner, "mode": "REPEATED"}
        if isinstance(avro, dict) and avro.get("type") == "map":
            value = self.column("value", avro["values"], f"{path}{{}}", namespace)
            key = {"name": "key", "type": "STRING", "mode": "REQUIRED"}
            return {"name": name, "type": self.map_type, "mode": "REPEATED", "fields": [key, value]}
        return {"name": name, **self._type(avro, path, namespace), "mode": mode}

    def _type(self, avro: Any, path: str, namespace: str | None) -> dict:
        if isinstance(avro, str):
            if avro in _PRIMITIVES:
                return {"type": _PRIMITIVES[avro]}
            raise LoadError(f"{self.source}: field {path} has unknown Avro type {avro!r}")
        kind = avro.get("type")
        if kind == "record":
            self.names.remember(avro, namespace)
            inner_ns = namespace_of(avro, namespace)
            fields = [
                self.column(f["name"], f["type"], f"{path}.{f['name']}", inner_ns)
                for f in avro.get("fields", [])
            ]
            return {"type": "RECORD", "fields": fields}
        if kind == "enum":
            self.names.remember(avro, namespace)
            return {"type": "STRING"}
        if kind == "fixed":
            self.names.remember(avro, namespace)
            if avro.get("logicalType") == "decimal":
                return _decimal(avro, path, self.source)
            return {"type": "BYTES"}
        logical = avro.get("logicalType")
        if kind == "bytes" and logical == "decimal":
            return _decimal(avro, path, self.source)
        if (kind, logical) in _LOGICAL:
            return {"type": _LOGICAL[(kind, logical)]}
        if kind == "string" and avro.get("sqlType") == "JSON":
            return {"type": "JSON"}
        if isinstance(kind, (str, dict, list)):  # {"type": "long"}, or an unknown logical type
            return self._type(self.names.resolve(kind, namespace), path, namespace)
        raise LoadError(f"{self.source}: field {path} has an unreadable Avro type {avro!r}")


def _decimal(avro: dict[str, Any], path: str, source: str) -> dict:
    precision = int(avro.get("precision", 0))
    scale = int(avro.get("scale", 0))
    digits = precision - scale
    if 0 <= scale <= 9 and 1 <= digits <= 29:
        return {"type": "NUMERIC"}
    if 0 <= scale <= 38 and 1 <= digits <= 38:
        return {"type": "BIGNUMERIC"}
    raise LoadError(
        f"{source}: field {path} is decimal({precision}, {scale}); BigQuery's NUMERIC and "
        "BIGNUMERIC cannot hold it"
    )
