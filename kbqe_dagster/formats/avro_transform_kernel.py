"""The native kernel's driver for Confluent Avro topics with ``transforms``
(formats/transform_stage.py's ``TransformRangeStager.native_driver``): the append kernel's loop
(staging/native_kernel.py) over ``kernel/src/avro_transform.rs``.

When every transform is of a kind the kernel does (core/transforms/kernel_transforms.py,
``kernel_kinds(..., rewrites=True)``: renames, drops, constant adds, casts that keep bytes or
whose result is exact from the encoded value, masks, timestamps between numbers, adds of parts
of the message), this driver gives the kernel each registry schema with the plan
``kernel_transforms`` makes for it: the kernel walks the body, leaves out the dropped fields,
rewrites the cast, masked and converted fields' encodings as kernel/src/rewrite.rs does for the
other formats, appends the constants, and appends the parts of the message per message
(``append_message_parts``, the constants among them); the files' schema, id and record name are
the derived schema's (``TransformingStager.staged_schema_of``). A schema the plan refuses (routing
or event time reads a transformed name, a chain, a cast that changes bytes, a timestamp from a
string), or that the kernel refuses (a wanted field of a type it does not read), stays on the
Python path, message by message; so does a message whose rewrite or part the kernel is not
certain of (an instant outside years 1-9999, a key or header that is not UTF-8 for a string).

The Python path decodes and re-encodes each record with fastavro, so the kernel's bytes are
its bytes only when that round trip gives the body back unchanged: the kernel walks such
bodies in canonical mode and hands back every message encoded otherwise (an over-long varint,
split or sized array/map blocks, a duplicate map key, an upper-case uuid, a float32
signalling NaN, a negative time, a decimal fastavro rounds or writes in another width, a
union branch fastavro's writer would not pick for the decoded value): the Python path stages
it, with its own bytes.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Protocol

from kbqe_dagster.core.transforms.kernel_transforms import kernel_kinds, kernel_transforms
from kbqe_dagster.staging.native_kernel import NativeStaging, TransformingStager

log = logging.getLogger(__name__)

REWRITES = "AVRO_REWRITES"
"""The ``StageKernel`` class attribute of a kernel whose Avro entries take ``rewrites`` and
message parts: a kernel built before leaves such topics on the Python path."""


class TransformStager(TransformingStager, Protocol):
    """What this driver reads of its stager: formats/transform_stage.py's
    ``TransformRangeStager``, which names this class as its ``native_driver``, so this module
    does not import it back."""

    def staged_schema_of(self, schema_key: Any, schema: Any, schema_id: int | None) -> Any: ...


class AvroTransformKernelStaging(NativeStaging):
    """Teaches the kernel each registry schema of a transformed Avro topic with its transform
    plan (see the module docstring)."""

    stager: TransformStager

    KERNEL_METHOD = "add_transformed_schema"

    @classmethod
    def for_range(cls, stager: Any, extension: Any) -> NativeStaging | None:
        if not cls.append_rules_allow(stager):
            return None
        if not getattr(extension.StageKernel, REWRITES, False) and not kernel_kinds(
            stager.transforms
        ):
            return None  # masks, timestamps or parts on a kernel built before them
        return cls(stager, extension)

    def _add_schema(
        self, header: bytes, schema_id: int, decoder: Any, constant: int | None
    ) -> None:
        stager = self.stager
        done = kernel_transforms(
            stager.transforms, decoder.schema, stager.wanted, stager.hmac_keys, complete=True
        )
        if done is None:
            raise ValueError("transforms the kernel does not do for this schema")
        if (done.rewrites or done.parts) and not getattr(self.kernel, REWRITES, False):
            raise ValueError("a kernel built before Avro masks, timestamps and message parts")
        staged = stager.staged_schema_of(schema_id, decoder.schema, None)
        if staged.compiled is None:  # transforms compile: never
            raise ValueError("transforms without a compiled derived schema")
        output = staged.compiled.output_schema
        constants = b""
        if done.parts:  # appended per message, the constants among them (stage.rs stage_one)
            rng = stager.rng
            self.kernel.append_message_parts(done.appended(output, rng.topic, rng.partition))
        elif done.constants:
            constants = done.constants_encoding(output)
        arguments: list[Any] = [
            header,
            json.dumps(decoder.parsed),
            constant,
            list(done.drops),
            list(done.digits),
            constants,
        ]
        if done.rewrites:  # (the key is the kernel's alone: never logged)
            arguments.append([(r.field, r.spec(), r.key) for r in done.rewrites])
        self.kernel.add_transformed_schema(*arguments)

    def _file_of(self, schema_id: int, decoder: Any) -> tuple[str | None, int, dict]:
        """The derived schema's record name, id and file schema (raises the BadInputError of
        a schema the transforms cannot apply to: the Python path's verdict)."""
        staged = self.stager.staged_schema_of(schema_id, decoder.schema, None)
        return staged.full_name, staged.schema_id, staged.file_schema
