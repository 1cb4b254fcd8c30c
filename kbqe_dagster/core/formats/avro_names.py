"""Avro's rule for the full name of a named type (record, enum, fixed), in one place: a name
with a dot is already full; otherwise the type's own ``namespace``, else the enclosing one
(the namespace of the nearest enclosing named type), else no namespace."""

from __future__ import annotations

from typing import Any, Mapping


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
