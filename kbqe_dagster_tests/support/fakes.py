"""Fakes at a boundary, for unit tests of logic (DESIGN.md §7)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kbqe_dagster.resources.schema_registry import RegisteredSchema, SchemaReference


class FakeSchemaRegistry:
    """``SchemaLookup`` at the registry boundary: fixed schemas under fixed ids, counting the
    ids asked (and the references asked, for Protobuf imports)."""

    def __init__(
        self,
        schemas: Mapping[int, RegisteredSchema],
        references: Mapping[tuple[str, int], RegisteredSchema] | None = None,
    ) -> None:
        self.schemas = dict(schemas)
        self.by_reference = dict(references or {})
        self.asked: list[int] = []
        self.references: list[SchemaReference] = []

    @classmethod
    def avro(cls, schemas: Mapping[int, Any]) -> FakeSchemaRegistry:
        """Avro writer schemas by id."""
        return cls({i: RegisteredSchema(i, "AVRO", s) for i, s in schemas.items()})

    def get(self, schema_id: int) -> RegisteredSchema | None:
        self.asked.append(schema_id)
        return self.schemas.get(schema_id)

    def get_reference(self, reference: SchemaReference) -> RegisteredSchema | None:
        self.references.append(reference)
        return self.by_reference.get((reference.subject, reference.version))
