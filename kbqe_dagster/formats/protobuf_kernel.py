"""The native kernel's driver for ``format: protobuf`` (formats/protobuf_stage.py's
``native_driver``): the append kernel's loop (staging/native_kernel.py) over the kernel's
Protobuf decoder (``kernel/src/protobuf.rs``).

The kernel knows message types by *frame prefix*: the 5-byte header and the message indexes'
bytes as the producer wrote them. When it stops at a prefix it has not been given, this driver
asks the Python path's own sources what the frame names — the registry schema compiled by
:meth:`ProtobufRangeStager.staged_type`, the message type the indexes pick, its Avro mapping
and staged schema — and gives the kernel that type's decoding program
(core/formats/protobuf_program.py) and, for static and schema-name routing, its file slot.
A frame that does not resolve, a type the program refuses (proto2 ``required``, groups,
closed enums, extensions) or a route the router refuses is never judged here: those messages
go to the Python path, which stages or dead-letters them with its own reasons.

A topic whose transforms only rename, drop and add constant fields (core/transforms/kernel_transforms.py,
``kernel_transforms``, checked per message type against its Avro mapping) stages here too:
Python converts the whole message before its transforms, so the kernel decodes and checks as
without them, cuts the dropped fields from the body and appends the constants
(``StageKernel.add_transformed_protobuf_schema``); the files' schema and id are the derived
schema's (``staged_type``).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from kbqe_dagster.core.errors import BadInputError
from kbqe_dagster.core.formats.protobuf_program import kernel_program
from kbqe_dagster.core.formats.protobuf_wire import read_message_indexes
from kbqe_dagster.core.record.routing import Destination, RoutingInput, RoutingMode
from kbqe_dagster.core.record.wire import HEADER_SIZE
from kbqe_dagster.core.transforms.kernel_transforms import kernel_transforms
from kbqe_dagster.staging.native_kernel import NativeStaging, TransformingStager

if TYPE_CHECKING:
    from kbqe_dagster.formats.transform_stage import StagedSchema

log = logging.getLogger(__name__)

REWRITTEN = "add_rewritten_protobuf_schema"
"""The ``StageKernel`` method of message types with ``mask`` or numeric ``timestamp``
transforms."""
TRANSFORMED = "add_transformed_protobuf_schema"
"""The ``StageKernel`` method of message types with transforms: a kernel built before it
leaves a topic with transforms on the Python path."""


class ProtobufStager(TransformingStager, Protocol):
    """What this driver reads of its stager: formats/protobuf_stage.py's
    ``ProtobufRangeStager``, which names this class as its ``native_driver``, so this module
    does not import it back."""

    static_destination: Destination | None

    def staged_type(self, value: bytes) -> tuple[Any, dict[str, Any], StagedSchema]: ...

    def route(self, routing_input: RoutingInput) -> Destination: ...


class ProtobufKernelStaging(NativeStaging):
    """Teaches the kernel each message type the first time a frame prefix names it, and the
    routes the Python router accepts (see the module docstring)."""

    stager: ProtobufStager

    KERNEL_METHOD = "add_protobuf_schema"

    @classmethod
    def for_range(cls, stager: Any, extension: Any) -> NativeStaging | None:
        if not cls.append_rules_allow(stager):
            return None  # transforms or destinations, function routing
        if stager.transforms and not hasattr(extension.StageKernel, TRANSFORMED):
            return None  # a kernel built before protobuf transforms
        driver = cls(stager, extension)
        driver.kernel.stage_protobuf()
        return driver

    def __init__(self, stager: Any, extension: Any) -> None:
        super().__init__(stager, extension)
        # frame prefix → what its records stage as, or None: the kernel does not take it
        self._types: dict[bytes, StagedSchema | None] = {}

    def _teach(self, msg: Any, reason: str, unknown_route: tuple[bytes, bytes] | None) -> bool:
        if reason not in ("schema_unknown", "route_unknown"):
            return False
        value = msg.value()
        if not value or len(value) <= HEADER_SIZE:
            return False
        try:
            _, start = read_message_indexes(value, HEADER_SIZE)
        except BadInputError:
            return False  # malformed indexes: the Python path's verdict
        prefix = bytes(value[:start])
        if reason == "schema_unknown":
            if prefix in self._types:
                return False  # offered before: the kernel does not take it
            staged = self._types[prefix] = self._offer_type(prefix, msg, value)
            return staged is not None
        staged = self._types.get(prefix)
        if staged is None or unknown_route is None:
            return False
        slot = self._route_slot(
            msg, unknown_route, staged.full_name, staged.schema_id, staged.file_schema
        )
        if slot is None:
            return False
        self.kernel.learn_route(prefix, *unknown_route, slot)
        return True

    def _offer_type(self, prefix: bytes, msg: Any, value: bytes) -> StagedSchema | None:
        """Give the kernel the message type ``prefix`` frames; what it stages as, or None."""
        stager = self.stager
        try:
            descriptor, avro, staged = stager.staged_type(value)
            program = kernel_program(descriptor)
            done = None
            if stager.transforms:
                done = kernel_transforms(stager.transforms, avro, stager.wanted, stager.hmac_keys)
                if done is None:
                    raise ValueError("transforms the kernel does not do for this message type")
                done = done.digits_rewritten(avro)  # the JSON encoder's digits: rewrites here
                if done.rewrites and not hasattr(self.kernel, REWRITTEN):
                    raise ValueError("a kernel built before masks and timestamps")
            constant = None
            if self._mode is not RoutingMode.FIELDS or stager.static_destination is not None:
                destination = stager.static_destination or stager.route(
                    RoutingInput(
                        stager.rng.topic,
                        stager.rng.partition,
                        msg.offset(),
                        staged.full_name,
                        {},
                        None,
                    )
                )
                constant = self._slot(
                    destination.dataset, destination.table, staged.schema_id, staged.file_schema
                )
            if done is None:
                self.kernel.add_protobuf_schema(prefix, program, constant)
            else:
                constants = b""
                if done.parts:  # appended per message, the constants among them
                    if not hasattr(self.kernel, "append_message_parts") or staged.compiled is None:
                        raise ValueError("a kernel built before message parts")
                    output, rng = staged.compiled.output_schema, stager.rng
                    parts = done.appended(output, rng.topic, rng.partition)
                    self.kernel.append_message_parts(parts)
                elif done.constants and staged.compiled is not None:
                    constants = done.constants_encoding(staged.compiled.output_schema)
                if done.rewrites:
                    rewrites = [(r.field, r.spec(), r.key) for r in done.rewrites]
                    self.kernel.add_rewritten_protobuf_schema(
                        prefix, program, list(done.drops), constants, rewrites, constant
                    )
                else:
                    self.kernel.add_transformed_protobuf_schema(
                        prefix, program, list(done.drops), constants, constant
                    )
        except (BadInputError, ValueError) as error:
            log.debug("%s: frame %s stays on the Python stage path: %s", stager.rng, prefix.hex(), error)  # fmt: skip
            return None
        return staged
