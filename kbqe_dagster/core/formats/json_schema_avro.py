"""The Avro record a JSON Schema's values are staged as, and the converter of its values
(``topics[].format: json_schema``). Derived once per registry schema id; pure.

Mapping, node by node (``pointer`` is the node's JSON pointer in the schema):

=====================================================  ====================================
JSON Schema                                            Avro
=====================================================  ====================================
``type: object`` with ``properties``                   record, fields in ``properties`` order
``type: object``, no ``properties``,                   ``map`` of the mapped schema
``additionalProperties: {schema}``
``type: string``                                       string
``type: string, format: date-time``                    long ``timestamp-micros``
``type: string, format: date``                         int ``date``
``type: integer``                                      long
``type: number`` (or ``[integer, number]``)            double
``type: boolean``                                      boolean
``enum`` of strings                                    enum (string when a symbol is not an
                                                       Avro name); ``enum`` of integers: long
``type: array, items: {schema}``                       array of the mapped schema
``$ref: "#/..."`` (``#/definitions``, ``#/$defs``,      the target's mapping; a target used
any local JSON pointer)                                twice is one named type, referenced
``type: [T, "null"]``, a property not ``required``,    ``["null", T]`` with default null
``anyOf``/``oneOf`` of one schema and ``{type: null}``
``allOf`` of exactly one schema                        that schema's mapping
=====================================================  ====================================

Names: a record or enum is named from its ``title``, else from its ``$ref`` target's last
segment, else from its property path under the root (``Click_user_address``); the root from
its ``title`` (or its ``$ref`` target's), else the name the caller gives (the topic's). Names and field names are made
Avro-safe (every character outside ``[A-Za-z0-9_]`` becomes ``_``, a leading digit gets a
``_``); a name taken twice gets ``_2``, ``_3``. A property's ``description`` becomes the field's
``doc``. Properties a schema does not declare (``additionalProperties`` beside
``properties``) are not staged: a record has the columns its schema declares.

Property order is the schema's ``properties`` order, so a later version that appends an
optional property yields a file schema whose first fields are the older one's and the new
column comes last: BigQuery widens the table (``ALLOW_FIELD_ADDITION``) as it does for Avro.
Under BACKWARD compatibility a registry accepts that addition only for a closed content model
(``additionalProperties: false``); adding to an open model is a narrowing.

Validation-only keywords (``minimum``, ``pattern``, ``maxItems``, ``not``,
``propertyNames``, ...) do not change the shape and are left to the validator. What cannot
be mapped is refused with :class:`UnmappableJsonSchemaError`, naming the construct and its
JSON pointer: ``oneOf``/``anyOf`` other than the null idiom (a union of objects has no one
column layout), ``allOf`` of several schemas, ``patternProperties``, tuple arrays (``items``
as a list, ``prefixItems``), conditional shapes (``if``/``then``/``else``,
``dependentSchemas``, ``dependencies``), dynamic and remote ``$ref``, recursive ``$ref``,
type unions (``[string, integer]``), untyped schemas, objects with neither ``properties`` nor
an ``additionalProperties`` schema, and what BigQuery cannot store: arrays of arrays and arrays
whose items may be null. The stage step dead-letters the messages of such a schema id (reason
``unmappable_json_schema``) rather than stopping: the schema is a producer's data, like a bad
message, and other schema ids of the topic keep staging; a new registry version fixes it.

Values (:meth:`JsonSchemaMapping.convert`): one converter compiled per schema from
core/formats/json_values.py's pieces (``date-time`` → epoch microseconds, ``date`` → epoch days,
integers checked to 64 bits); a value that does not convert is a ``json_schema_mismatch``
naming its JSON pointer. Timestamps are micros, not millis: JSON date-times often carry
microseconds and BigQuery's TIMESTAMP keeps them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from kbqe_dagster.core.errors import UnmappableJsonSchemaError
from kbqe_dagster.core.formats.json_values import (
    Converter,
    ValueProblem,
    array_converter,
    days,
    escape,
    long_value,
    map_converter,
    record_converter,
    timestamp_micros,
)

_REFUSED = {
    "patternProperties": "patternProperties",
    "prefixItems": "a tuple array (prefixItems)",
    "if": "a conditional schema (if/then/else)",
    "then": "a conditional schema (if/then/else)",
    "else": "a conditional schema (if/then/else)",
    "dependentSchemas": "dependentSchemas",
    "dependencies": "dependencies",
    "$dynamicRef": "a $dynamicRef",
    "$recursiveRef": "a $recursiveRef",
}
_AVRO_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass(frozen=True)
class JsonSchemaMapping:
    """A JSON Schema's Avro record and the converter of its (validated) values."""

    avro_schema: dict[str, Any]
    _convert: Converter

    def convert(self, value: Mapping[str, Any]) -> dict[str, Any]:
        """The Avro-form record of a validated JSON object; a value that does not convert
        raises :class:`JsonSchemaMismatchError` naming its JSON pointer."""
        try:
            record: dict[str, Any] = self._convert(value)
            return record
        except ValueProblem as problem:
            raise problem.mismatch() from None


def map_json_schema(schema: Any, root_name: str) -> JsonSchemaMapping:
    """The mapping of ``schema`` (a parsed JSON Schema document); ``root_name`` names the root
    record when the schema has no ``title``. Raises :class:`UnmappableJsonSchemaError`."""
    mapper = _Mapper(schema)
    if not isinstance(schema, Mapping):
        raise UnmappableJsonSchemaError("the schema is not a JSON object, at the root")
    node, pointer, nullable = mapper.unwrap(schema, "")
    name = _title(schema) if isinstance(schema, Mapping) else None
    if (
        isinstance(node, Mapping)
        and isinstance(node.get("$ref"), str)
        and node["$ref"].startswith("#/")
    ):
        pointer = node["$ref"][1:]  # a root that is a reference to its definition
        node, pointer, nullable = mapper.unwrap(mapper.target(pointer, "/$ref"), pointer)
        name = name or avro_name(pointer.rsplit("/", 1)[-1])
    if (
        not isinstance(node, Mapping)
        or nullable
        or _allows_null(node)
        or "properties" not in node
        or _kind(node, pointer) != "object"
    ):
        raise UnmappableJsonSchemaError(
            "the root is not an object with properties (a row needs columns), at the root"
        )
    avro, convert = mapper.record(node, pointer, _title(node) or name or avro_name(root_name))
    return JsonSchemaMapping(avro, convert)


class _Mapper:
    def __init__(self, root: Mapping[str, Any]) -> None:
        self.root = root
        self.names: set[str] = set()
        # A $ref target mapped once: later uses reference its Avro name (Avro defines a named
        # type once) and share its converter.
        self.named: dict[str, tuple[Any, Converter | None, bool]] = {}
        self.resolving: set[str] = set()

    # --- nodes ------------------------------------------------------------------------------
    def unwrap(self, node: Any, pointer: str) -> tuple[Any, str, bool]:
        """Follow ``allOf`` of one and the null idioms to the schema that gives the shape;
        True when null is allowed on the way. ``$ref`` is followed by :meth:`value`."""
        nullable = False
        while isinstance(node, Mapping):
            _refuse_keywords(node, pointer)
            if "allOf" in node:
                branches = node["allOf"]
                if not isinstance(branches, list) or len(branches) != 1:
                    raise UnmappableJsonSchemaError(f"allOf of several schemas at {pointer}/allOf")
                node, pointer = branches[0], f"{pointer}/allOf/0"
                continue
            for keyword in ("anyOf", "oneOf"):
                if keyword in node:
                    node, pointer = _null_idiom(node[keyword], f"{pointer}/{keyword}")
                    nullable = True
                    break
            else:
                break
        return node, pointer, nullable

    def value(self, node: Any, pointer: str, name: str) -> tuple[Any, Converter | None, bool]:
        """(Avro type, converter or None for identity, nullable) of one schema node."""
        node, pointer, nullable = self.unwrap(node, pointer)
        if isinstance(node, Mapping) and "$ref" in node:
            avro, convert, ref_nullable = self.ref(node["$ref"], pointer)
            return avro, convert, nullable or ref_nullable
        if not isinstance(node, Mapping):
            raise UnmappableJsonSchemaError(f"an untyped schema ({node!r}) at {pointer or '/'}")
        kind = _kind(node, pointer)
        nullable = nullable or _allows_null(node)
        if "enum" in node:
            avro, convert = self.enum(node, pointer, name)
        elif kind == "object":
            avro, convert = self.object(node, pointer, name)
        elif kind == "array":
            avro, convert = self.array(node, pointer, name)
        else:
            avro, convert = _scalar(kind, node.get("format"))
        return avro, convert, nullable

    def ref(self, ref: Any, pointer: str) -> tuple[Any, Converter | None, bool]:
        if not isinstance(ref, str) or not ref.startswith("#/"):
            what = (
                "a remote $ref"
                if isinstance(ref, str) and not ref.startswith("#")
                else "a $ref that is not a local JSON pointer"
            )
            raise UnmappableJsonSchemaError(f"{what} ({ref!r}) at {pointer}/$ref")
        target = ref[1:]
        if target in self.named:
            avro, convert, nullable = self.named[target]
            return avro["name"], convert, nullable
        if target in self.resolving:
            raise UnmappableJsonSchemaError(f"a recursive $ref ({ref}) at {pointer}/$ref")
        self.resolving.add(target)
        node = self.target(target, f"{pointer}/$ref")
        name = _title(node) if isinstance(node, Mapping) else None
        mapped = self.value(node, target, name or avro_name(target.rsplit("/", 1)[-1]))
        self.resolving.discard(target)
        if isinstance(mapped[0], dict) and "name" in mapped[0]:
            # Only a named type is shared; anything else is mapped again at each use, so a
            # named type inside it is defined once per use under a name of its own.
            self.named[target] = mapped
        return mapped

    def target(self, target: str, where: str) -> Any:
        """The node at JSON pointer ``target`` of the document."""
        node: Any = self.root
        for part in target.split("/")[1:]:
            part = part.replace("~1", "/").replace("~0", "~")
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            elif isinstance(node, Mapping) and part in node:
                node = node[part]
            else:
                raise UnmappableJsonSchemaError(f"a $ref to nothing (#{target}) at {where}")
        return node

    def record(
        self, node: Mapping[str, Any], pointer: str, name: str
    ) -> tuple[dict[str, Any], Converter]:
        record_name = self.unique(name)
        required = set(node.get("required") or ())
        fields: list[dict[str, Any]] = []
        steps: list[tuple[str, str, Converter | None]] = []
        taken: dict[str, str] = {}
        properties = node["properties"]
        if not isinstance(properties, Mapping):
            raise UnmappableJsonSchemaError(
                f"properties that are not an object at {pointer}/properties"
            )
        for key, child in properties.items():
            field_name = avro_name(key)
            if field_name in taken:
                raise UnmappableJsonSchemaError(
                    f"properties {taken[field_name]!r} and {key!r} have the same Avro name "
                    f"{field_name!r} at {pointer}/properties"
                )
            taken[field_name] = key
            child_pointer = f"{pointer}/properties/{escape(key)}"
            avro, convert, nullable = self.value(
                child,
                child_pointer,
                (isinstance(child, Mapping) and _title(child)) or f"{record_name}_{field_name}",
            )
            field: dict[str, Any] = {"name": field_name, "type": avro}
            if nullable or key not in required:
                field = {"name": field_name, "type": ["null", avro], "default": None}
            if isinstance(child, Mapping) and isinstance(child.get("description"), str):
                field["doc"] = child["description"]
            fields.append(field)
            steps.append((key, field_name, convert))
        return {"type": "record", "name": record_name, "fields": fields}, record_converter(steps)

    def object(
        self, node: Mapping[str, Any], pointer: str, name: str
    ) -> tuple[Any, Converter | None]:
        if "properties" in node:
            return self.record(node, pointer, name)
        values = node.get("additionalProperties")
        if not isinstance(values, Mapping):
            raise UnmappableJsonSchemaError(
                "an object with neither properties nor an additionalProperties schema at "
                f"{pointer or '/'}"
            )
        avro, convert, nullable = self.value(
            values, f"{pointer}/additionalProperties", f"{name}_value"
        )
        return {"type": "map", "values": ["null", avro] if nullable else avro}, map_converter(
            convert
        )

    def array(
        self, node: Mapping[str, Any], pointer: str, name: str
    ) -> tuple[Any, Converter | None]:
        items = node.get("items")
        if isinstance(items, list):
            raise UnmappableJsonSchemaError(f"a tuple array (items as a list) at {pointer}/items")
        if not isinstance(items, Mapping):
            raise UnmappableJsonSchemaError(f"an array without an items schema at {pointer or '/'}")
        avro, convert, nullable = self.value(items, f"{pointer}/items", f"{name}_item")
        if nullable:
            raise UnmappableJsonSchemaError(
                f"an array whose items may be null (BigQuery arrays cannot hold NULL) at {pointer}/items"
            )
        if isinstance(avro, dict) and avro.get("type") == "array":
            raise UnmappableJsonSchemaError(
                f"an array of arrays (BigQuery cannot store one) at {pointer}/items"
            )
        return {"type": "array", "items": avro}, array_converter(convert)

    def enum(
        self, node: Mapping[str, Any], pointer: str, name: str
    ) -> tuple[Any, Converter | None]:
        values = [v for v in node["enum"] if v is not None]
        if values and all(isinstance(v, str) for v in values):
            if all(_AVRO_NAME.fullmatch(v) for v in values) and len(set(values)) == len(values):
                return {"type": "enum", "name": self.unique(name), "symbols": values}, None
            return "string", None
        if values and all(isinstance(v, int) and not isinstance(v, bool) for v in values):
            return "long", long_value
        raise UnmappableJsonSchemaError(
            f"an enum that is neither all strings nor all integers at {pointer}/enum"
        )

    def unique(self, name: str) -> str:
        candidate, n = name, 1
        while candidate in self.names:
            n += 1
            candidate = f"{name}_{n}"
        self.names.add(candidate)
        return candidate


def _refuse_keywords(node: Mapping[str, Any], pointer: str) -> None:
    for keyword, construct in _REFUSED.items():
        if keyword in node:
            raise UnmappableJsonSchemaError(f"{construct} at {pointer}/{keyword}")


def _null_idiom(branches: Any, pointer: str) -> tuple[Any, str]:
    """``anyOf``/``oneOf`` of one schema and ``{"type": "null"}``: that schema, nullable."""
    if isinstance(branches, list):
        others = [
            (i, b)
            for i, b in enumerate(branches)
            if not (isinstance(b, Mapping) and b.get("type") == "null")
        ]
        if len(others) == 1 and len(branches) == 2:
            index, branch = others[0]
            return branch, f"{pointer}/{index}"
    raise UnmappableJsonSchemaError(
        f"{pointer.rsplit('/', 1)[-1]} of several schemas (a union has no one column layout) at {pointer}"
    )


def _kind(node: Mapping[str, Any], pointer: str) -> str:
    declared = node.get("type")
    types = [declared] if isinstance(declared, str) else list(declared or ())
    types = [t for t in types if t != "null"]
    if set(types) == {"integer", "number"}:
        return "number"
    if len(types) > 1:
        raise UnmappableJsonSchemaError(f"a type union {types} at {pointer}/type")
    if types:
        return types[0]
    if "enum" in node:
        return "enum"
    if "properties" in node or "additionalProperties" in node:
        return "object"
    if "items" in node:
        return "array"
    if declared is not None:
        raise UnmappableJsonSchemaError(f"a schema that only allows null at {pointer}/type")
    raise UnmappableJsonSchemaError(f"an untyped schema at {pointer or '/'}")


def _allows_null(node: Mapping[str, Any]) -> bool:
    declared = node.get("type")
    return (
        declared == "null"
        or (isinstance(declared, list) and "null" in declared)
        or (None in (node.get("enum") or ()))
    )


def _scalar(kind: str, fmt: Any) -> tuple[Any, Converter | None]:
    if kind == "string":
        if fmt == "date-time":
            return {"type": "long", "logicalType": "timestamp-micros"}, timestamp_micros
        if fmt == "date":
            return {"type": "int", "logicalType": "date"}, days
        return "string", None
    if kind == "integer":
        return "long", long_value
    if kind == "number":
        return "double", None
    if kind == "boolean":
        return "boolean", None
    raise UnmappableJsonSchemaError(f"type {kind!r} is not a JSON Schema type")


def _title(node: Mapping[str, Any]) -> str | None:
    title = node.get("title")
    return avro_name(title) if isinstance(title, str) and title.strip() else None


def avro_name(text: str) -> str:
    """An Avro name from any text: other characters become ``_``, a leading digit gets ``_``
    (a property's field name; and what :func:`json_property_keys` maps back to its key)."""
    name = re.sub(r"[^A-Za-z0-9_]", "_", text.strip())
    return name if name and not name[0].isdigit() else f"_{name}"


def json_property_keys(node: Any, keys: dict[str, str] | None = None) -> dict[str, str]:
    """Avro field name → the JSON property key it was made from (:func:`avro_name`), of every
    property anywhere in a JSON Schema document; ValueError when two keys have one
    Avro name (the kernel, which finds a value's members by key, could not tell them apart)."""
    keys = {} if keys is None else keys
    if isinstance(node, list):
        for item in node:
            json_property_keys(item, keys)
    elif isinstance(node, Mapping):
        properties = node.get("properties")
        if isinstance(properties, Mapping):
            for key in properties:
                name = avro_name(str(key))
                if keys.setdefault(name, key) != key:
                    raise ValueError(f"properties {keys[name]!r} and {key!r} are both {name!r}")
        for value in node.values():
            json_property_keys(value, keys)
    return keys


def named_by_json_keys(schema: Any, keys: Mapping[str, str]) -> Any:
    """The Avro schema with each record field named by its JSON key (``keys``:
    :func:`json_property_keys`), as the native kernel finds a value's members (json_schema.rs;
    names are not encoded: the bytes are the same)."""
    if isinstance(schema, list):
        return [named_by_json_keys(item, keys) for item in schema]
    if not isinstance(schema, Mapping):
        return schema
    out = {k: named_by_json_keys(v, keys) for k, v in schema.items() if k != "fields"}
    if isinstance(schema.get("fields"), list):
        out["fields"] = [
            {**named_by_json_keys(f, keys), "name": keys.get(f["name"], f["name"])}
            for f in schema["fields"]
        ]
    return out


def kernel_record(schema_text: str, parsed: Any) -> tuple[dict[str, str], str]:
    """What the native kernel takes for a registry JSON Schema (``schema_text``) and the Avro
    record derived from it (``parsed``: fastavro's form): the Avro names' JSON property keys
    (:func:`json_property_keys`), and the record's JSON with each field named by its key
    (:func:`named_by_json_keys`). ValueError when two keys share an Avro name."""
    keys = json_property_keys(json.loads(schema_text))
    return keys, json.dumps(named_by_json_keys(parsed, keys))
