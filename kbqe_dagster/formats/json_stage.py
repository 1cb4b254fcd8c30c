"""Schemaless JSON topics (``format: json``): each value is one JSON object, staged under the
Avro record schema the topic declares, as kafka-delta-ingest does.

Per message: parse the JSON (``json_decode_error`` when it is not one object), check it against
the declared schema and encode it with fastavro (``json_schema_mismatch``, naming the field
path, when it does not fit), then everything is the Avro path's: routing and event time read
the decoded fields, the enrichment prefix goes before the body, the files commit with the
range. Unlike the Avro path this decodes and encodes every record — JSON has no binary form to
slice; ``bench/bench_stage.py`` reports its rate. Values are taken as JSON gives them: a
``timestamp-millis`` field wants epoch milliseconds, a ``date`` field days since 1970, as
Avro's JSON encoding does.
"""

from __future__ import annotations

import json
from io import BytesIO
from pathlib import Path
from typing import Any, Mapping

from fastavro import parse_schema, schemaless_writer
from fastavro.validation import ValidationError, validate

from kbqe_dagster.core.avro_names import record_full_name
from kbqe_dagster.core.enrichment import extended_schema
from kbqe_dagster.core.errors import JsonDecodeError, JsonSchemaMismatchError
from kbqe_dagster.core.formats import declared_schema_id
from kbqe_dagster.core.offsets import OffsetRange
from kbqe_dagster.staging.task import RangeStager, StageContext


class JsonRangeStager(RangeStager):
    native_kernel = False  # JSON is decoded and re-encoded per record: the Python path

    def __init__(self, ctx: StageContext, rng: OffsetRange, workdir: Path) -> None:
        super().__init__(ctx, rng, workdir)
        schema = dict(self.topic.value_schema or {})
        self.value_schema = schema
        self.parsed = parse_schema(schema, _write_hint=False)
        self.schema_id = declared_schema_id(schema)
        self.file_schema = extended_schema(schema, self.enrichment)
        self.full_name = record_full_name(schema)
        self.wanted = self.topic.required_fields

    def _stage(self, msg: Any) -> None:
        record = _decode(self._value(msg))  # null and oversized values as on the Avro path
        body = _encode(record, self.parsed)
        fields = {path: _field(record, path) for path in self.wanted}
        self._place(msg, fields, body, self.schema_id, self.file_schema, self.full_name)

    @staticmethod
    def _framed_schema_id(value: bytes | None) -> int | None:
        return None  # JSON values carry no schema id


def _decode(value: bytes) -> dict[str, Any]:
    try:
        record = json.loads(value)
    except (UnicodeDecodeError, ValueError) as error:
        raise JsonDecodeError(f"not JSON: {error}") from None
    if not isinstance(record, dict):
        raise JsonDecodeError(f"expected a JSON object, got {type(record).__name__}")
    return record


def _encode(record: Mapping[str, Any], parsed: Any) -> bytes:
    try:
        validate(record, parsed, raise_errors=True)
    except ValidationError as error:
        raise JsonSchemaMismatchError(_mismatch(error)) from None
    out = BytesIO()
    schemaless_writer(out, parsed, record)
    return out.getvalue()


def _mismatch(error: ValidationError) -> str:
    """fastavro's error names each failing field path; keep the first, on one line."""
    details = [str(e) for e in getattr(error, "errors", ())] or [str(error)]
    first = details[0].replace("\n", " ")
    return f"does not fit the declared schema: {first}"


def _field(record: Mapping[str, Any], path: str) -> Any:
    node: Any = record
    for part in path.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node
