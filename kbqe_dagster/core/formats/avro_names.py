"""Avro's rules for named types (record, enum, fixed), in one place: the full name (a name with
a dot is already full; otherwise the type's own ``namespace``, else the enclosing one, the
namespace of the nearest enclosing named type, else no namespace), and the resolution of a
reference by name to the definition met earlier in the same schema (:class:`NamedTypes`, for
every walker of a schema: the BigQuery columns of a file, its Storage Write proto rows)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def full_name(named: Mapping[str, Any], enclosing: str | None = None) -> str:
    name = str(named.get("name", ""))
    if "." in name:
        return name
    namespace = named.get("namespace", enclosing)
    return f"{namespace}.{name}" if namespace else name


def record_full_name(schema: Any) -> str | None:
    """The full name of a record schema (what ``schema_name`` routing reads); None for any
    other schema."""
    if not isinstance(schema, Mapping) or schema.get("type") != "record":
        return None
    return full_name(schema)


AVRO_PRIMITIVES = frozenset(
    {"null", "boolean", "int", "long", "float", "double", "bytes", "string"}
)


def namespace_of(named: Mapping[str, Any], enclosing: str | None) -> str | None:
    """The namespace a named type gives the types inside it."""
    name = str(named.get("name", ""))
    if "." in name:
        return name.rpartition(".")[0]
    namespace: str | None = named.get("namespace", enclosing)
    return namespace


class NamedTypes:
    """The named types met while walking one schema, by full name and by short name, so that
    a later reference by name resolves to its definition."""

    def __init__(self) -> None:
        self.by_name: dict[str, Mapping[str, Any]] = {}

    def remember(self, named: Mapping[str, Any], enclosing: str | None) -> None:
        if named.get("name"):
            self.by_name[full_name(named, enclosing)] = named
            self.by_name.setdefault(str(named["name"]), named)

    def resolve(self, avro: Any, namespace: str | None) -> Any:
        """The definition ``avro`` names (qualified by ``namespace`` first), else ``avro``."""
        if isinstance(avro, str) and avro not in AVRO_PRIMITIVES:
            qualified = f"{namespace}.{avro}" if namespace and "." not in avro else avro
            for candidate in (qualified, avro):
                if candidate in self.by_name:
                    return self.by_name[candidate]
        return avro


_NAMED = ("record", "enum", "fixed")


def define_before_use(schema: Mapping[str, Any], source: Mapping[str, Any]) -> dict[str, Any]:
    """``schema``, a record derived from the record ``source`` (by transforms or a projection),
    with every named type defined where it is first used.

    Avro defines a named type once, where it first appears, and refers to it by name after.
    A ``drop`` or a projection that leaves out the field carrying a definition, or a projection
    that puts a referring field first, leaves a reference to a type the derived schema never
    defines: fastavro refuses it (``UnknownType``), and before this the range failed on every
    retry. Here the first use gets the definition (named by its full name, so the namespace it
    gives the types inside it is the same wherever it lands) and a later definition of the same
    name becomes a reference. A schema that was already in order comes back equal."""
    definitions: dict[str, Mapping[str, Any]] = {}
    _collect(source, None, definitions)
    top_namespace = namespace_of(schema, None)
    defined = {full_name(schema)}
    out = dict(schema)
    out["fields"] = [
        _placed_field(field, top_namespace, definitions, defined) for field in schema["fields"]
    ]
    return out


def _collect(avro: Any, enclosing: str | None, definitions: dict[str, Mapping[str, Any]]) -> None:
    if isinstance(avro, list):
        for branch in avro:
            _collect(branch, enclosing, definitions)
    elif isinstance(avro, Mapping):
        kind = avro.get("type")
        if kind in _NAMED and avro.get("name"):
            definitions.setdefault(full_name(avro, enclosing), avro)
            if kind == "record":
                inner = namespace_of(avro, enclosing)
                for field in avro.get("fields", ()):
                    _collect(field.get("type"), inner, definitions)
        elif kind == "array":
            _collect(avro.get("items"), enclosing, definitions)
        elif kind == "map":
            _collect(avro.get("values"), enclosing, definitions)
        elif isinstance(kind, (list, Mapping)):
            _collect(kind, enclosing, definitions)


def _placed_field(
    field: Mapping[str, Any],
    enclosing: str | None,
    definitions: Mapping[str, Mapping[str, Any]],
    defined: set[str],
) -> dict[str, Any]:
    out = dict(field)
    out["type"] = _placed(field.get("type"), enclosing, definitions, defined)
    return out


def _placed(
    avro: Any,
    enclosing: str | None,
    definitions: Mapping[str, Mapping[str, Any]],
    defined: set[str],
) -> Any:
    if isinstance(avro, str):
        if avro in AVRO_PRIMITIVES:
            return avro
        qualified = f"{enclosing}.{avro}" if enclosing and "." not in avro else avro
        for candidate in (qualified, avro):
            if candidate in defined:
                return avro
        for candidate in (qualified, avro):
            if candidate in definitions:
                moved = {k: v for k, v in definitions[candidate].items() if k != "namespace"}
                moved["name"] = candidate
                return _placed(moved, enclosing, definitions, defined)
        return avro  # not a name of the source: fastavro's verdict
    if isinstance(avro, list):
        return [_placed(branch, enclosing, definitions, defined) for branch in avro]
    if not isinstance(avro, Mapping):
        return avro
    kind = avro.get("type")
    out = dict(avro)
    if kind in _NAMED and avro.get("name"):
        name = full_name(avro, enclosing)
        if name in defined:
            return name  # defined earlier (moved there): a reference here
        defined.add(name)
        if kind == "record":
            inner = namespace_of(avro, enclosing)
            out["fields"] = [
                _placed_field(field, inner, definitions, defined) for field in avro["fields"]
            ]
    elif kind == "array":
        out["items"] = _placed(avro.get("items"), enclosing, definitions, defined)
    elif kind == "map":
        out["values"] = _placed(avro.get("values"), enclosing, definitions, defined)
    elif isinstance(kind, (list, Mapping)):
        out["type"] = _placed(kind, enclosing, definitions, defined)
    return out
