"""The native kernel's driver for keyed change topics (Debezium envelopes, ExtractNewRecordState's
flat form, keyed ``format: avro`` records): :class:`KeyedNativeStaging`, the keyed stager's
``native_driver``.

It is the append kernel's loop (staging/native_kernel.py) with one difference per writer
schema: what the kernel is taught. With a schema it gets the schema's changelog layout's cut
(:meth:`ChangeLayout.cut <kbqe_dagster.keyed.changes.ChangeLayout.cut>`: which top-level fields
hold the row image, which values give the change columns) and the changelog table's file slot;
the kernel (kernel/src/changes.rs) then writes the change columns plus the row's bytes sliced
from the validated body, as :meth:`ChangeLayout.body` does, re-encoding the row fields of Kafka
Connect semantic types whose bytes change (:meth:`ChangeLayout.kernel_rewrites`); it counts and skips tombstones (null
values) as :meth:`KeyedRangeStager.add` does. Whatever it is not certain about — a message that
is not a row change, a schema whose layout or types it does not implement — is handed back to
the Python path, and a topic with ``transforms`` is left to it whole (:meth:`for_range`), so files, dead letters, counts and tombstones are that path's
(docs/architecture.md, "Keyed change topics on the kernel").
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from fastavro import parse_schema

from kbqe_dagster.core.errors import BadInputError
from kbqe_dagster.keyed.changes import change_paths
from kbqe_dagster.staging.native_kernel import NativeStaging

if TYPE_CHECKING:
    from kbqe_dagster.keyed.stage import KeyedRangeStager

log = logging.getLogger(__name__)


class KeyedNativeStaging(NativeStaging):
    """The kernel's driver of a keyed topic's range (see the module docstring)."""

    stager: KeyedRangeStager

    @staticmethod
    def wanted_paths(stager: Any) -> list[str]:
        # Routing's and event time's, then every path a layout of the topic reads: the
        # kernel's wanted paths are fixed per range, its writer schemas come later.
        return list(dict.fromkeys([*stager.topic.required_fields, *change_paths(stager.topic)]))

    KERNEL_METHOD = "count_tombstones"

    @classmethod
    def for_range(cls, stager: Any, extension: Any) -> KeyedNativeStaging | None:
        """The driver, or None when the range takes the Python path: a topic with
        ``transforms`` (the kernel slices rows; a transformed row is decoded, transformed and
        encoded again by keyed/changes.py ``RowTransform``), or an HOUR-partitioned table (the
        event hour column is the Python path's; the configuration refuses HOUR for keyed
        tables today: defensive)."""
        if stager.topic.transforms:
            return None
        changelog = stager.changelog
        if stager.pipeline.topic_may_write_hourly(stager.topic.name) or stager.pipeline.is_hourly(
            changelog.dataset, changelog.table
        ):
            return None
        return cls(stager, extension)

    def __init__(self, stager: Any, extension: Any) -> None:
        super().__init__(stager, extension)
        self.kernel.count_tombstones()  # counted and skipped natively, as KeyedRangeStager.add

    def stage(self, reader: Any) -> None:
        super().stage(reader)  # the kernel's messages, tombstones among them, are counted there
        self.stager.tombstones += self.kernel.tombstones

    def _offer(self, header: bytes, msg: Any, known: tuple[int, Any]) -> None:
        """Teach the kernel the writer schema framed by ``header`` with its changelog layout's
        cut, every record to the changelog table; a layout or schema it refuses leaves the
        schema's messages to the Python path (noted at debug level)."""
        schema_id, decoder = known
        stager = self.stager
        try:
            rewrites = list(decoder.layout.kernel_rewrites())
            kind, fields, paths = decoder.layout.cut()
            wanted = self.wanted
            slots = [None if path is None else wanted.index(path) for path in paths]
            registered = stager.lookup.get(schema_id)
            if registered is None:  # resolved a moment ago: the registry's to say again
                raise ValueError(f"schema id {schema_id} is no longer in the registry")
            text = json.dumps(parse_schema(registered.schema, _write_hint=False))
            slot = self._slot(
                stager.changelog.dataset, stager.changelog.table, schema_id, decoder.schema
            )
            self.kernel.add_change_schema(header, text, slot, kind, list(fields), slots, rewrites)
        except (BadInputError, ValueError) as error:
            self._offered[header] = str(error)
            log.debug(
                "%s: schema id %d stays on the Python stage path: %s", stager.rng, schema_id, error
            )
            return
        self._offered[header] = None
