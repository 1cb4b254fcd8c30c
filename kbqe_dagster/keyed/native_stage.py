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
the Python path, so files, dead letters, counts and tombstones are that path's
(docs/architecture.md, "Keyed change topics on the kernel").

A topic's ``transforms`` reshape the row (keyed/changes.py ``RowTransform``). Where
core/transforms/kernel_transforms.py finds the kernel can do them over a schema's row (renames,
drops, constants, masks, timestamps between numbers, exact casts: never a ``compute`` or a part
of the message), the kernel gets them with the cut (``add_transformed_change_schema``): it
leaves the dropped fields out, rewrites the masked, converted and cast ones, appends the
constants, and hands back a message whose rewritten field holds Debezium's unavailable-value
placeholder (which the Python path keeps "unchanged"). Other transforms leave the schema's
messages to the Python path.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any, Protocol

from fastavro import parse_schema

from kbqe_dagster.core.config.pipeline import PipelineConfig, TopicConfig
from kbqe_dagster.core.errors import BadInputError
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.routing import Destination
from kbqe_dagster.core.transforms.kernel_transforms import kernel_transforms
from kbqe_dagster.keyed.changes import change_paths
from kbqe_dagster.staging.native_kernel import NativeStaging

log = logging.getLogger(__name__)


class KeyedStager(Protocol):
    """What this driver reads of its stager (and writes: the tombstones it counted):
    keyed/stage.py's ``KeyedRangeStager``, which names this class as its ``native_driver``, so
    this module does not import it back."""

    topic: TopicConfig
    pipeline: PipelineConfig
    rng: OffsetRange
    changelog: Destination
    lookup: Any
    hmac_keys: Mapping[int, bytes]
    tombstones: int


class KeyedNativeStaging(NativeStaging):
    """The kernel's driver of a keyed topic's range (see the module docstring)."""

    stager: KeyedStager

    @staticmethod
    def wanted_paths(stager: Any) -> list[str]:
        # Routing's and event time's, then every path a layout of the topic reads: the
        # kernel's wanted paths are fixed per range, its writer schemas come later.
        return list(dict.fromkeys([*stager.topic.required_fields, *change_paths(stager.topic)]))

    KERNEL_METHOD = "count_tombstones"

    @classmethod
    def for_range(cls, stager: Any, extension: Any) -> KeyedNativeStaging | None:
        """The driver, or None when the range takes the Python path: a topic with
        ``transforms`` and a kernel built before them, or an HOUR-partitioned table (the
        event hour column is the Python path's; the configuration refuses HOUR for keyed
        tables today: defensive)."""
        if stager.topic.transforms and not hasattr(extension.StageKernel, TRANSFORMED):
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
            # A transformed row's files carry the derived record's own id (keyed/stage.py).
            file_id = schema_id if decoder.file_schema_id is None else decoder.file_schema_id
            slot = self._slot(
                stager.changelog.dataset, stager.changelog.table, file_id, decoder.schema
            )
            transform = decoder.layout.transform
            if transform is None:
                self.kernel.add_change_schema(
                    header, text, slot, kind, list(fields), slots, rewrites
                )
            else:
                self.kernel.add_transformed_change_schema(
                    header, text, slot, kind, list(fields), slots, rewrites,
                    *_row_edits(stager.topic.transforms, transform, stager.hmac_keys),
                )  # fmt: skip
        except (BadInputError, ValueError) as error:
            self._offered[header] = str(error)
            log.debug(
                "%s: schema id %d stays on the Python stage path: %s", stager.rng, schema_id, error
            )
            return
        self._offered[header] = None


TRANSFORMED = "add_transformed_change_schema"
"""The ``StageKernel`` method of keyed topics with transforms (a kernel built before it leaves
them on the Python path)."""


def _row_edits(specs: Any, transform: Any, keys: Any) -> tuple[list, list, bytes, str]:
    """What the kernel does for ``transform`` (keyed/changes.py ``RowTransform``: ``specs``
    over the row as the changelog would hold it otherwise; ``keys``: the masks' hmac keys by
    index): the dropped row fields' indexes, the rewritten ones' ``(index, spec, hmac key)``,
    the constants' encoding, the placeholder ("" for none). ValueError when the kernel cannot
    do them exactly (a ``compute``, a part of the message, a chain)."""
    row = transform.compiled.input_schema
    # Routing, event time and the change columns read the message as it came: nothing of the
    # row (``read`` empty), and a decoded row carries every field (``complete``).
    done = kernel_transforms(specs, row, (), keys, complete=True)
    if done is None or done.parts:
        raise ValueError("transforms the kernel does not do for this row")
    done = done.digits_rewritten(row)
    index = {f["name"]: i for i, f in enumerate(row["fields"])}
    drops = [index[name] for name in done.drops]
    rewrites = [(index[r.field], r.spec(), r.key) for r in done.rewrites]  # the key: never logged
    constants = done.constants_encoding(transform.compiled.output_schema) if done.constants else b""
    return drops, rewrites, constants, transform.placeholder or ""
