"""The native kernel's driver for Confluent Avro topics with ``transforms``
(formats/transform_stage.py's ``TransformRangeStager.native_driver``): the append kernel's loop
(staging/native_kernel.py) over ``kernel/src/avro_transform.rs``.

When every transform is of a kind the kernel does (formats/kernel_transforms.py,
``kernel_kinds``: renames, drops, constant adds, casts that keep bytes or turn an int or long
into its digits), this driver gives the kernel each registry schema with the plan
``kernel_transforms`` makes for it: the kernel walks the body, leaves out the dropped fields,
writes the digits and appends the constants; the files' schema, id and record name are the
derived schema's (``TransformingStager._staged_schema``). A schema the plan refuses (routing or
event time reads a transformed name, a chain, a cast that changes bytes), or that the kernel
refuses (a wanted field of a type it does not read), stays on the Python path, message by
message.

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
from typing import TYPE_CHECKING, Any

from kbqe_dagster.formats.kernel_transforms import kernel_transforms
from kbqe_dagster.staging.native_kernel import NativeStaging

if TYPE_CHECKING:
    from kbqe_dagster.formats.transform_stage import TransformRangeStager

log = logging.getLogger(__name__)


class AvroTransformKernelStaging(NativeStaging):
    """Teaches the kernel each registry schema of a transformed Avro topic with its transform
    plan (see the module docstring)."""

    stager: TransformRangeStager

    KERNEL_METHOD = "add_transformed_schema"

    def _add_schema(
        self, header: bytes, schema_id: int, decoder: Any, constant: int | None
    ) -> None:
        stager = self.stager
        done = kernel_transforms(stager.transforms, decoder.schema, stager.wanted, complete=True)
        if done is None:
            raise ValueError("transforms the kernel does not do for this schema")
        if done.rewrites or done.parts:  # the JSON, JSON Schema and Protobuf kernels' alone
            raise ValueError(
                "a mask, timestamp, cast or part of the message the Avro kernel does not do"
            )
        constants = b""
        if done.constants:
            staged = stager._staged_schema(schema_id, decoder.schema, None)
            if staged.compiled is None:  # constants come from transforms: never
                raise ValueError("constants without transforms")
            constants = done.constants_encoding(staged.compiled.output_schema)
        self.kernel.add_transformed_schema(
            header,
            json.dumps(decoder.parsed),
            constant,
            list(done.drops),
            list(done.digits),
            constants,
        )

    def _file_of(self, schema_id: int, decoder: Any) -> tuple[str | None, int, dict]:
        """The derived schema's record name, id and file schema (raises the BadInputError of
        a schema the transforms cannot apply to: the Python path's verdict)."""
        staged = self.stager._staged_schema(schema_id, decoder.schema, None)
        return staged.full_name, staged.schema_id, staged.file_schema
