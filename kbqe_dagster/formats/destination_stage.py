"""Staging one decoded record into several destinations (``topics[].destinations``; the rules
are core/transforms/destinations.py's).

:class:`DestinationFanOut` is what ``TransformingStager.place_record`` hands a record to when
its topic has destinations, so every record-producing stager (Avro with the decoding stager,
``json``, ``json_schema``, ``decoder``) gets it the same way. Per input schema, once: the
topic's transforms, then per destination its transforms and projection, its output schema's
file schema and declared-schema id (a destination whose ``schema_names`` leave the schema
out has no branch for it). Per message: the topic's transforms once, then one placement per
destination that takes the record (``when``; its transforms, routing by its own
:class:`Router`, event date, enrichment prefix, encoded projected body); only when every
placement is built are they all appended. A message no destination takes is ``unroutable``. A failure of any destination raises the bad input of the whole message, naming the
destination, before anything of it is appended: one row per message per destination, or one
dead letter.

This is the reference path. A Confluent Avro topic whose destinations all route per schema,
have no ``when`` and use only the kernel's transforms is staged by the native kernel
(formats/avro_destination_kernel.py), which hands back to this class every message and schema
it is not certain about.
"""

from __future__ import annotations

import os
from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from fastavro import parse_schema, schemaless_writer

from kbqe_dagster.core.errors import BadInputError, TransformFailedError, UnroutableError
from kbqe_dagster.core.formats.avro_names import record_full_name
from kbqe_dagster.core.formats.source_format import declared_schema_id
from kbqe_dagster.core.record.enrichment import extended_schema
from kbqe_dagster.core.record.routing import Destination, Router, RoutingInput, required_fields
from kbqe_dagster.core.transforms.compiler import (
    Compiled,
    MessageMeta,
    compile_transforms,
    field_values,
    hmac_keys,
)
from kbqe_dagster.core.transforms.destinations import CompiledDestination, compile_destination
from kbqe_dagster.core.transforms.kinds import message_meta


@dataclass(frozen=True)
class _Branch:
    """One destination over one input schema, derived once."""

    compiled: CompiledDestination
    parsed: Any
    file_schema: dict
    schema_id: int
    full_name: str | None


@dataclass(frozen=True)
class _Fanned:
    """One input schema: the topic's transforms over it, and every destination's branch."""

    top: Compiled | None
    branches: tuple[_Branch | None, ...]
    """Per destination; None where its ``schema_names`` leave this schema out."""


@dataclass(frozen=True)
class _Placement:
    destination: Destination
    branch: _Branch
    prefix: bytes
    body: bytes
    day: int
    hour: int | None


class DestinationFanOut:
    """The destinations of one topic in one stage task (see the module docstring)."""

    def __init__(self, stager: Any, key_path: str) -> None:
        self.stager = stager  # a TransformingStager: its prefix, open_file, transforms, hmac_keys
        topic = stager.topic
        self.destinations = topic.destinations
        allowed = stager.router.allowed  # the topic's allow-list, its static tables included
        self.routers = tuple(Router(d.routing, allowed) for d in self.destinations)
        # A static table that is allowed is every record's; one that is not is still asked per
        # message, so its error names each offset (as RangeStager does).
        self.statics = tuple(
            s if (s := d.routing.static_destination) and allowed.allows(*s) else None
            for d in self.destinations
        )
        self.wanted = tuple(
            tuple(dict.fromkeys(required_fields(d.routing) + topic.event_time.fields))
            for d in self.destinations
        )
        self.labels = tuple(d.label(k) for k, d in enumerate(self.destinations))
        where = f"{key_path}.destinations"
        # Read once per task, where it runs; a missing key stops the range (ConfigError).
        self.hmac_keys = tuple(
            hmac_keys(d.transforms, os.environ, f"{where}[{k}].transforms")
            for k, d in enumerate(self.destinations)
        )
        self.schemas: dict[Hashable, _Fanned | BadInputError] = {}

    def place(
        self,
        msg: Any,
        record: Mapping[str, Any],
        schema_key: Hashable,
        schema: Mapping[str, Any],
        schema_id: int | None,
    ) -> None:
        """Stage ``record`` (of ``schema``, identified by ``schema_key``) into every
        destination, or raise the message's bad input with nothing appended. ``schema_id``:
        the files' id for a destination that changes nothing (default: the declared id)."""
        fanned = self._fanned(schema_key, schema, schema_id)
        meta = message_meta(msg)
        if fanned.top is not None:
            record = fanned.top.apply(record, meta)
        placements = []
        for k, branch in enumerate(fanned.branches):
            if branch is None:
                continue
            try:
                if branch.compiled.takes(record):
                    placements.append(self._placement(k, branch, msg, record, meta))
            except BadInputError as error:
                raise type(error)(f"{self.labels[k]}: {error}") from None
        if not placements:
            raise UnroutableError(
                "no destination takes this record (each destination's when is false)"
            )
        seen: dict[Destination, int] = {}
        for k, placement in enumerate(placements):
            other = seen.setdefault(placement.destination, k)
            if other != k:
                raise UnroutableError(
                    f"{self.labels[other]} and {self.labels[k]} both route "
                    f"to {placement.destination}: a row would be doubled"
                )
        file = self.stager.open_file
        for placement in placements:
            branch = placement.branch
            file(
                placement.destination.dataset,
                placement.destination.table,
                branch.schema_id,
                branch.file_schema,
            ).append(placement.prefix, placement.body, placement.day, placement.hour)

    def _placement(
        self, k: int, branch: _Branch, msg: Any, record: Mapping[str, Any], meta: MessageMeta
    ) -> _Placement:
        routed = branch.compiled.apply(record, meta)
        fields = field_values(routed, self.wanted[k])
        offset, key = meta.offset, meta.key
        destination = self.statics[k] or self.routers[k].route(
            RoutingInput(meta.topic, meta.partition, offset, branch.full_name, fields, key)
        )
        body = BytesIO()
        try:
            schemaless_writer(body, branch.parsed, branch.compiled.project(routed))
        except Exception as error:  # noqa: BLE001 - fastavro raises several types on a misfit
            raise TransformFailedError(
                f"the record does not fit the destination's schema: {error}"
            ) from None
        prefix, day, hour = self.stager.prefix(msg, fields, offset, key, destination)
        return _Placement(destination, branch, prefix, body.getvalue(), day, hour)

    def _fanned(
        self, schema_key: Hashable, schema: Mapping[str, Any], schema_id: int | None
    ) -> _Fanned:
        known = self.schemas.get(schema_key)
        if isinstance(known, _Fanned):
            return known
        if isinstance(known, BadInputError):
            raise type(known)(str(known))
        try:
            fanned = self._derive(schema, schema_id)
        except BadInputError as error:
            self.schemas[schema_key] = error  # every message of this schema: the same error
            raise
        self.schemas[schema_key] = fanned
        return fanned

    def _derive(self, schema: Mapping[str, Any], schema_id: int | None) -> _Fanned:
        stager = self.stager
        top = None
        base: Mapping[str, Any] = schema
        if stager.transforms:
            top = compile_transforms(stager.transforms, schema, stager.hmac_keys)
            base = top.output_schema
        branches: list[_Branch | None] = []
        name = record_full_name(schema)
        for k, destination in enumerate(self.destinations):
            if not destination.takes_schema(name):
                branches.append(None)
                continue
            try:
                compiled = compile_destination(destination, base, self.hmac_keys[k])
                output = compiled.output_schema
                file_schema = extended_schema(output, stager.enrichment)
            except BadInputError as error:
                raise type(error)(f"{self.labels[k]}: {error}") from None
            unchanged = schema_id is not None and output == dict(schema)
            branches.append(
                _Branch(
                    compiled,
                    parse_schema(dict(output), _write_hint=False),
                    file_schema,
                    schema_id if unchanged else declared_schema_id(output),
                    record_full_name(output),
                )
            )
        if not any(branches):
            raise UnroutableError(
                f"no destination takes records of schema {name} (their schema_names)"
            )
        return _Fanned(top, tuple(branches))
