"""Debezium change events written by Kafka Connect's ``JsonConverter`` with an embedded schema
(``schemas.enable=true``), on a ``format: debezium`` topic: the keyed stager's decode step for
JSON values (:meth:`KeyedRangeStager.decode <kbqe_dagster.keyed.stage.KeyedRangeStager.decode>`).

A value whose first byte is the Confluent magic byte 0x00 takes the Avro path; one that is JSON
text of an object (``{`` after optional whitespace) comes here, so a topic may even mix both.
Each distinct Connect schema becomes, once (core/formats/connect_json_avro.py), the Avro schema
the Avro converter would have registered for it, its changelog layout (keyed/changes.py, through
the stager's ``make_decoder``) and a declared-schema id; each payload is encoded with that
schema and from then on is a body like any other: probed, cut into a change, enriched, appended.
The changelog, current and history tables are therefore those of the same events written by
the Avro converter.

The native kernel never takes these messages: it stages Confluent-framed values only and
hands back any other (keyed/native_stage.py; a JSON value's first five bytes resolve to no
schema, so the driver cannot teach the kernel one and the message comes here).
"""

from __future__ import annotations

from dataclasses import dataclass
from io import BytesIO
from typing import Any

from fastavro import parse_schema, schemaless_writer

from kbqe_dagster.core.errors import JsonSchemaMismatchError, NotAChangeError
from kbqe_dagster.core.formats.connect_json_avro import (
    ConnectAvro,
    ConnectJsonReader,
    plain_writer_schema,
)


@dataclass(frozen=True)
class _JsonSchema:
    """What one Connect schema stages with."""

    converted: ConnectAvro
    decoder: Any
    """The keyed stager's decoder of the derived Avro schema (probe, layout, file schema)."""
    writer: Any
    """The parsed writer schema the payload is encoded with (logical types left out)."""


class ConnectJsonDecoding:
    """Decodes the JSON values of one keyed stager's range (see the module docstring)."""

    def __init__(self, stager: Any) -> None:
        self.stager = stager
        self.reader = ConnectJsonReader(self._schema)

    def _schema(self, converted: ConnectAvro) -> _JsonSchema:
        decoder = self.stager.make_decoder(converted.avro)
        writer = parse_schema(plain_writer_schema(converted.avro), _write_hint=False)
        return _JsonSchema(converted, decoder, writer)

    def decode(self, value: bytes) -> tuple[int, Any, bytes, dict]:
        """The declared-schema id, decoder, encoded body and probed fields of one JSON value,
        as ``RangeStager.decode`` gives them for a framed one; raises its BadInputError."""
        known, payload = self.reader.read(value)
        if payload is None:
            raise NotAChangeError("the JSON value's payload is null: no change to stage")
        datum = known.converted.datum(payload)
        out = BytesIO()
        try:
            schemaless_writer(out, known.writer, datum)
        except (TypeError, ValueError, OverflowError) as error:  # defensive: datum() checks
            raise JsonSchemaMismatchError(f"payload does not encode: {error}") from None
        body = out.getvalue()
        return known.converted.schema_id, known.decoder, body, known.decoder.probe.probe(body)
