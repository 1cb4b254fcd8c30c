"""Schemaless JSON topics (``format: json``): each value is one JSON object, staged under the
Avro record schema the topic declares, as kafka-delta-ingest does.

Per message: parse the JSON (``json_decode_error`` when it is not one object), check it against
the declared schema and encode it with fastavro (``json_schema_mismatch``, naming the field
path, when it does not fit), then everything is the Avro path's: routing and event time read
the decoded fields, the enrichment prefix goes before the body, the files commit with the
range. Topic ``transforms`` apply to the checked record through the shared step of
``formats/transform_stage.py`` (a schema the transforms cannot apply to is a config error here:
the schema is declared). Unlike the Avro path this decodes and encodes every record — JSON has no binary form to
slice; ``bench/bench_stage.py`` reports its rate. Values are taken as JSON gives them: a
``timestamp-millis`` field wants epoch milliseconds, a ``date`` field days since 1970, as
Avro's JSON encoding does.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fastavro import parse_schema
from fastavro.validation import ValidationError, validate

from kbqe_dagster.core.errors import JsonDecodeError, JsonSchemaMismatchError
from kbqe_dagster.core.formats.source_format import declared_schema_id
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.formats.transform_stage import TransformingStager
from kbqe_dagster.staging.context import StageContext


class JsonRangeStager(TransformingStager):
    native_kernel = False  # JSON is decoded and re-encoded per record: the Python path

    def __init__(self, ctx: StageContext, rng: OffsetRange, workdir: Path) -> None:
        super().__init__(ctx, rng, workdir)
        schema = dict(self.topic.value_schema or {})
        self.value_schema = schema
        self.parsed = parse_schema(schema, _write_hint=False)
        self.schema_id = declared_schema_id(schema)

    def stage(self, msg: Any) -> None:
        record = _decode(self.checked_value(msg))  # null and oversized values as on the Avro path
        _check(record, self.parsed)
        self.place_record(msg, record, self.schema_id, self.value_schema, self.schema_id)

    @staticmethod
    def framed_schema_id(value: bytes | None) -> int | None:
        return None  # JSON values carry no schema id


def _decode(value: bytes) -> dict[str, Any]:
    try:
        record = json.loads(value)
    except (UnicodeDecodeError, ValueError) as error:
        raise JsonDecodeError(f"not JSON: {error}") from None
    if not isinstance(record, dict):
        raise JsonDecodeError(f"expected a JSON object, got {type(record).__name__}")
    return record


def _check(record: Mapping[str, Any], parsed: Any) -> None:
    try:
        validate(record, parsed, raise_errors=True)
    except ValidationError as error:
        raise JsonSchemaMismatchError(_mismatch(error)) from None


def _mismatch(error: ValidationError) -> str:
    """fastavro's error names each failing field path; keep the first, on one line."""
    details = [str(e) for e in getattr(error, "errors", ())] or [str(error)]
    first = details[0].replace("\n", " ")
    return f"does not fit the declared schema: {first}"
