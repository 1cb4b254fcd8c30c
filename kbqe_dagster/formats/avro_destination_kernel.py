"""The native kernel's driver for Confluent Avro topics with ``destinations``
(formats/transform_stage.py's ``TransformRangeStager`` picks it for such a topic): the append
kernel's loop (staging/native_kernel.py) over ``kernel/src/destinations.rs``.

The Python path (formats/destination_stage.py, ``DestinationFanOut``) is the reference: per
message the topic's transforms, then per destination its own, its projection (``fields``) and
its derived schema's encoding, all built before any is appended. The kernel does the common
case (:func:`destination_output`): every destination routes ``static`` or by
``schema_name`` (one table per schema, decided here once), none has a ``when``, and the
topic's transforms followed by the destination's are of the kinds the Avro kernel does
(core/transforms/kernel_transforms.py, ``kernel_transforms`` over the composed list, which also
refuses a transform of a name routing or event time reads: the kernel reads them from the
original body). A projection keeps the transformed record's fields in its order: the kernel
copies the body's spans of the declared fields in that order, with the encodings of the
constants it lists in between (an Avro record is its fields' encodings one after the other).

Per registry schema, this driver gives the kernel one output per destination that takes the
schema (``schema_names``): its file slot (the destination's table, its derived schema's id
and file schema: ``DestinationFanOut._fanned``, the Python path's own), the kept fields, the
drops, digits, rewrites (masks with the destination's own hmac keys, numeric timestamps, exact
casts; a rewritten field the projection leaves out is still checked) and constants. A schema no destination takes, one whose derivation fails, two
destinations into one table, ``when``, field or function routing, and any transform the kernel
does not do: the Python path, message by message (its verdicts, its dead letters). The body is
walked in canonical mode as for transforms (formats/avro_transform_kernel.py): a body fastavro
would re-encode otherwise goes back whole, as does any message one destination's record
cannot be built for (all or nothing).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.routing import RoutingInput, RoutingMode
from kbqe_dagster.core.transforms.destinations import DestinationConfig
from kbqe_dagster.core.transforms.kernel_transforms import (
    FieldRewrite,
    KernelTransforms,
    MessagePart,
    kernel_kinds,
    kernel_transforms,
)
from kbqe_dagster.core.transforms.specs import AddField, DropFields, RenameField
from kbqe_dagster.staging.native_kernel import NativeStaging

log = logging.getLogger(__name__)

DESTINATION_REWRITES = "DESTINATION_REWRITES"
"""The ``StageKernel`` class attribute of a kernel whose destinations pieces take rewrites."""

_ROUTED_PER_SCHEMA = (RoutingMode.STATIC, RoutingMode.SCHEMA_NAME)


def destinations_on_kernel(
    transforms: Sequence[Any], destinations: Sequence[DestinationConfig]
) -> bool:
    """Whether a topic's destinations may take the kernel at all (before any schema): each
    routes per schema (static or schema_name), has no ``when``, and the topic's and its own
    transforms are of the Avro kernel's kinds (masks, numeric timestamps, exact casts and
    ``add`` of a part of the message too)."""
    return bool(destinations) and all(
        d.when is None
        and d.routing.mode in _ROUTED_PER_SCHEMA
        and kernel_kinds(tuple(transforms) + d.transforms, rewrites=True)
        for d in destinations
    )


@dataclass(frozen=True)
class Piece:
    """A piece of one destination's record as the kernel builds it (kernel/src/destinations.rs)."""

    kind: str
    """``all``: every declared field through the drops and digits, then the constants;
    ``fields``: the declared fields ``names`` in that order, the digits and rewrites among
    them; ``check``: declared fields ``names`` the projection leaves out whose rewrites still
    run (Python runs the step, which may fail) and whose output is left out; ``constants``:
    the encoding of ``constants``; ``part``: the message's :attr:`part`."""
    names: tuple[str, ...] = ()
    drops: tuple[str, ...] = ()
    digits: tuple[str, ...] = ()
    constants: tuple[tuple[str, Any], ...] = ()
    part: MessagePart | None = None
    """``part``: an ``add`` of a part of the message, appended per message."""
    rewrites: tuple[FieldRewrite, ...] = ()
    """Masks, numeric timestamps and exact casts of declared fields (by declared name)."""


def destination_output(
    specs: Sequence[Any],
    schema: Mapping[str, Any],
    wanted: Sequence[str],
    fields: Sequence[str] | None,
    hmac_keys: Mapping[int, bytes] | None = None,
    *,
    complete: bool = True,
) -> tuple[Piece, ...] | None:
    """What the kernel does for one destination over the decoded Avro ``schema``: ``specs``
    are the topic's transforms then the destination's (applied in sequence: the Python path
    compiles the destination's over the topic's output schema), ``wanted`` what its routing
    and event time read, ``fields`` its projection. The record is the pieces' encodings one
    after the other (an Avro record is its fields' encodings in order): without a projection
    the whole record; with one, each run of declared fields it lists and each constant in
    between (a part of the message there as a ``part`` piece); a rewritten field the
    projection leaves out is a ``check`` piece (its rewrite
    runs, its output is left out: the Python path runs the step before projecting). None
    when the kernel cannot do it exactly: :func:`kernel_transforms` refuses the transforms,
    or they add parts of the message. ``complete``: as for
    :func:`kernel_transforms` (a decoded Avro record has every declared field; a JSON value
    may leave out one with a default)."""
    done = kernel_transforms(specs, schema, wanted, hmac_keys, complete=complete)
    if done is None:
        return None
    parts = {part.field: part for part in done.parts}
    if fields is None:
        if not parts:
            return (Piece("all", (), done.drops, done.digits, done.constants, None, done.rewrites),)
        # The constants and parts after the declared fields, in transform order.
        whole = [Piece("all", (), done.drops, done.digits, (), None, done.rewrites)]
        taken = 0
        for part in done.parts:
            whole += [
                Piece("constants", constants=(c,)) for c in done.constants[taken : part.after]
            ]
            taken = part.after
            whole.append(Piece("part", part=part))
        whole += [Piece("constants", constants=(c,)) for c in done.constants[taken:]]
        return tuple(whole)
    # The transformed record's fields: declared ones (by their declared name, renamed in
    # place), then the constants; kernel_transforms refused chains, so each step is simple.
    names: dict[str, str | None] = {f["name"]: f["name"] for f in schema.get("fields") or ()}
    for spec in specs:
        if isinstance(spec, RenameField):
            names = {(spec.to if out == spec.rename else out): src for out, src in names.items()}
        elif isinstance(spec, DropFields):
            names = {out: src for out, src in names.items() if out not in spec.drop}
        elif isinstance(spec, AddField):
            if spec.add in names:
                return None  # the Python path's schema error
            names[spec.add] = None
    values = dict(done.constants)
    pieces: list[Piece] = []
    run: list[str] = []

    def flush() -> None:
        if run:
            digits = tuple(d for d in done.digits if d in run)
            rewrites = tuple(r for r in done.rewrites if r.field in run)
            pieces.append(Piece("fields", tuple(run), (), digits, rewrites=rewrites))
            run.clear()

    for name in fields:
        if name not in names:
            return None  # the Python path's schema error (project_schema)
        source = names[name]
        if source is None:
            flush()
            if name in parts:
                pieces.append(Piece("part", part=parts[name]))
            else:
                pieces.append(Piece("constants", constants=((name, values[name]),)))
        else:
            run.append(source)
    flush()
    # A key or header as a string the projection leaves out: Python's step still reads it
    # (and fails a value that is not UTF-8), so the kernel reads it too and leaves it out.
    for part in done.parts:
        if part.field not in fields and part.source in ("header", "key") and not part.as_bytes:
            pieces.append(Piece("check", part=part))
    kept = {names[name] for name in fields}
    left_out = tuple(r for r in done.rewrites if r.field not in kept)
    if left_out:
        checked = tuple(r.field for r in left_out)
        pieces.append(Piece("check", checked, rewrites=left_out))
    return tuple(pieces)


class DestinationStager(Protocol):
    """What this driver reads of its stager: formats/transform_stage.py's
    ``TransformRangeStager`` with destinations, which picks this class, so this module does
    not import it back."""

    rng: OffsetRange
    transforms: tuple[Any, ...]
    hmac_keys: Mapping[int, bytes]
    fan_out: Any


class AvroDestinationKernelStaging(NativeStaging):
    """Teaches the kernel each registry schema of an Avro topic with destinations: one output
    per destination that takes it (see the module docstring)."""

    stager: DestinationStager

    KERNEL_METHOD = "add_destination_schema"

    def _offer(self, header: bytes, msg: Any, known: tuple[int, Any]) -> None:
        schema_id, decoder = known
        try:
            outputs = kernel_outputs(self, msg.offset(), schema_id, decoder.schema, None, True)
            self.kernel.add_destination_schema(header, json.dumps(decoder.parsed), outputs)
        except ValueError as error:
            self._offered[header] = str(error)
            log.debug("%s: schema id %d stays on the Python stage path: %s",
                      self.stager.rng, schema_id, error)  # fmt: skip
            return
        self._offered[header] = None


def kernel_outputs(
    driver: NativeStaging,
    offset: int,
    schema_key: Any,
    schema: Mapping[str, Any],
    schema_id: int | None,
    complete: bool,
) -> list[tuple]:
    """What ``add_destination_schema`` (and ``add_json_destinations``) take for records of
    ``schema`` (``schema_key``, ``schema_id``: as the stager's ``place_record`` gets them):
    per destination that takes the schema, its file slot and pieces. ``complete``: every
    record carries every declared field (a decoded Avro body; not JSON). Raises ValueError
    when the kernel cannot stage the schema's records exactly (see the module docstring)."""
    stager = driver.stager
    fan_out = stager.fan_out
    assert fan_out is not None  # these drivers are only picked for destinations
    try:
        # The Python path's own derivation (its files' schemas and ids, its verdicts).
        fanned = fan_out._fanned(schema_key, schema, schema_id)
    except Exception as error:  # noqa: BLE001 - a BadInputError: the Python path's verdict
        raise ValueError(f"the schema's destinations do not derive: {error}") from None
    outputs: list[tuple] = []
    tables: set[tuple[str, str]] = set()
    top = len(stager.transforms)
    for k, branch in enumerate(fanned.branches):
        if branch is None:
            continue  # its schema_names leave this schema out
        destination = fan_out.destinations[k]
        keys = {**stager.hmac_keys, **{top + i: v for i, v in fan_out.hmac_keys[k].items()}}
        output = destination_output(
            tuple(stager.transforms) + destination.transforms, schema,
            fan_out.wanted[k], destination.fields, keys, complete=complete,
        )  # fmt: skip
        if output is None:
            raise ValueError(f"{fan_out.labels[k]}: transforms the kernel does not do here")
        try:
            routed = fan_out.statics[k] or fan_out.routers[k].route(
                RoutingInput(
                    stager.rng.topic, stager.rng.partition, offset, branch.full_name, {}, None
                )  # fmt: skip
            )
            slot = driver._slot(routed.dataset, routed.table, branch.schema_id, branch.file_schema)
        except Exception as error:  # noqa: BLE001 - a BadInputError: the Python path's
            raise ValueError(f"{fan_out.labels[k]}: {error}") from None
        if (routed.dataset, routed.table) in tables:
            raise ValueError("two destinations route to one table (Python: unroutable)")
        tables.add((routed.dataset, routed.table))
        encoded: list[tuple] = []
        for piece in output:
            constants = b""
            if piece.constants:
                constants = KernelTransforms(constants=piece.constants).constants_encoding(
                    branch.compiled.output_schema
                )
            kind = "bytes" if piece.kind == "constants" else piece.kind
            if piece.part is not None:
                # Its encoding (topic, partition: constants of the range) or what the kernel
                # reads per message (KernelTransforms.appended's items).
                ((kind, constants),) = KernelTransforms(
                    parts=(replace(piece.part, after=0),)
                ).appended(branch.compiled.output_schema, stager.rng.topic, stager.rng.partition)
                kind = kind if kind == "bytes" else f"{piece.kind}:{kind}"
            item = (kind, list(piece.names), list(piece.drops), list(piece.digits), constants)
            if getattr(driver.kernel, DESTINATION_REWRITES, False):
                encoded.append((*item, [(r.field, r.spec(), r.key) for r in piece.rewrites]))
            elif piece.rewrites or piece.kind in ("check", "part"):
                raise ValueError("a kernel built before masks, timestamps and exact casts here")
            else:
                encoded.append(item)
        outputs.append((slot, encoded))
    if not outputs:
        raise ValueError("no destination takes the schema (Python: unroutable)")
    return outputs
