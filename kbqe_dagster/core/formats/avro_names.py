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
