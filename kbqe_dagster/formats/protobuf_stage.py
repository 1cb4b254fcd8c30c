"""Registry Protobuf topics (``format: protobuf``): Confluent-framed Protobuf (magic byte 0, the
schema id, the message indexes of core/formats/protobuf_wire.py, the Protobuf binary) parsed with the
Python ``protobuf`` runtime and staged under the Avro record derived from the message type
(core/formats/protobuf_avro.py).

Per schema id, once: the registry's schema (an Avro or JSON id is ``non_protobuf_schema``),
its ``.proto`` text and every subject version it references, compiled by ``grpcio-tools``'
protoc into a ``FileDescriptorSet`` (resources/protobuf_compiler.py) and added to a
**fresh** ``DescriptorPool`` of its own: two versions of one schema define the same full
names, which one shared pool would refuse. A schema that does not compile, or whose reference
the registry lacks, is ``unmappable_protobuf_schema`` with protoc's diagnostics.

Per (schema id, message indexes), once: the message type the indexes name (indexes naming
no message are ``protobuf_decode_error``), its class (``message_factory.GetMessageClass``)
and its Avro mapping (``unmappable_protobuf_schema`` naming the construct). Every error is
remembered, so a bad schema's messages are dead-lettered without asking or compiling again:
the schema is a producer's data like the message bodies (the raw values stay in the dead
letters for a replay, other schema ids keep staging, a new version fixes it).

Per message: the frame as on the Avro path (``bad_magic``, ``too_short``,
``unknown_schema_id`` unchanged), the message indexes and ``ParseFromString``
(``protobuf_decode_error``), the message converted by the compiled mapping (never through
``MessageToDict``: the mapping knows each field's type and presence), then the shared step of
formats/transform_stage.py: the topic's ``transforms`` if any, fastavro encoding, routing and
event time on the converted fields (a ``Timestamp`` is an aware UTC ``datetime``), append.

**File schema ids.** A staging file's key carries one schema. A schema's first message type
(indexes ``[0]``, what nearly every topic carries) stages under the **registry id**, as Avro
does; another message type of the same schema stages under the declared-schema id of its
Avro record (core/formats.declared_schema_id: stable across runs, distinct per type and
version, above 2^30 and so apart from registry ids), since one registry id cannot name two
file schemas. With transforms every file carries its derived schema's declared id.

**The native kernel** (``kernel/src/protobuf.rs``) does the same for a topic without
destinations whose transforms, if any, only rename, drop and add constant fields as the JSON
kernel does them (core/transforms/kernel_transforms.py, ``kernel_transforms``; routing and event time read the
converted record on both paths, so no more is needed): :class:`~kbqe_dagster.formats.protobuf_kernel.ProtobufKernelStaging`, this
stager's ``native_driver``, gives it each message type's decoding program
(core/formats/protobuf_program.py) the first time a frame names it, and it decodes the binary
and encodes the Avro body in Rust. Every message it is not certain about — every one this
path would dead-letter among them — comes back here and is staged (or dead-lettered, with this
module's reasons) by :meth:`ProtobufRangeStager.stage`: the files, dead letters and counts
are this path's, byte for byte (docs/architecture.md, "The Protobuf kernel").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from google.protobuf import descriptor_pool, message, message_factory

from kbqe_dagster.core.errors import (
    BadInputError,
    NonProtobufSchemaError,
    ProtobufDecodeError,
    UnmappableProtobufSchemaError,
)
from kbqe_dagster.core.formats.protobuf_avro import (
    ProtobufMapping,
    map_protobuf_message,
    message_at,
)
from kbqe_dagster.core.formats.protobuf_wire import FIRST_MESSAGE, read_message_indexes
from kbqe_dagster.core.formats.source_format import declared_schema_id
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.wire import HEADER_SIZE
from kbqe_dagster.core.transforms.kernel_transforms import kernel_kinds
from kbqe_dagster.formats.protobuf_kernel import ProtobufKernelStaging
from kbqe_dagster.formats.transform_stage import StagedSchema, TransformingStager
from kbqe_dagster.resources.protobuf_compiler import ROOT_FILE, compile_files, registry_proto_files
from kbqe_dagster.staging.context import StageContext


@dataclass
class _MessageType:
    """One message type of one schema id: its class, mapping and files' schema id."""

    cls: Any
    mapping: ProtobufMapping
    file_schema_id: int


@dataclass
class _ProtobufSchema:
    """One registry schema id compiled: its root file and the message types met so far."""

    schema_id: int
    pool: Any
    root: Any
    types: dict[tuple[int, ...], _MessageType | BadInputError] = field(default_factory=dict)

    def message_type(self, indexes: tuple[int, ...]) -> _MessageType:
        known = self.types.get(indexes)
        if isinstance(known, BadInputError):
            raise type(known)(str(known))
        if known is not None:
            return known
        try:
            known = self._make(indexes)
        except UnmappableProtobufSchemaError as error:
            self.types[indexes] = error
            raise
        self.types[indexes] = known
        return known

    def _make(self, indexes: tuple[int, ...]) -> _MessageType:
        # Indexes naming no message raise here, uncached: garbage indexes are cheap to refuse
        # again and must not grow the cache; a refused mapping is cached (one per real type).
        descriptor = message_at(self.root, indexes)
        try:
            mapping = map_protobuf_message(descriptor)
        except UnmappableProtobufSchemaError as error:
            raise UnmappableProtobufSchemaError(
                f"schema id {self.schema_id} message {descriptor.full_name} has no Avro form: {error}"
            ) from None
        file_id = (
            self.schema_id if indexes == FIRST_MESSAGE else declared_schema_id(mapping.avro_schema)
        )
        return _MessageType(message_factory.GetMessageClass(descriptor), mapping, file_id)


class ProtobufRangeStager(TransformingStager):
    """Parse with the registry ``.proto``, convert to the derived Avro record, then the shared
    step of formats/transform_stage.py (transforms, encoding, routing, event time)."""

    native_driver = ProtobufKernelStaging

    def __init__(self, ctx: StageContext, rng: OffsetRange, workdir: Path) -> None:
        super().__init__(ctx, rng, workdir)
        # Transforms and destinations reshape records in Python: those topics stay here.
        # Transforms and destinations reshape records in Python: those topics stay here, but
        # for renames, drops and constants the kernel stages exactly (kernel_transforms, per
        # message type: ProtobufKernelStaging._offer_type).
        self.native_kernel = not self.reshapes or (
            self.fan_out is None and kernel_kinds(self.transforms, rewrites=True)
        )

    def staged_type(self, value: bytes) -> tuple[Any, dict[str, Any], StagedSchema]:
        """The message type a framed ``value`` names (its descriptor), its mapped Avro record
        (before transforms) and what its records stage as, or the BadInputError :meth:`stage`
        would give it (for the native kernel's driver: formats/protobuf_kernel.py)."""
        schema_id, schema = self.frame(value)
        indexes, _ = read_message_indexes(value, HEADER_SIZE)
        kind = schema.message_type(indexes)
        staged = self.staged_schema_of(
            (schema_id, indexes), kind.mapping.avro_schema, kind.file_schema_id
        )
        return kind.cls.DESCRIPTOR, kind.mapping.avro_schema, staged

    def stage(self, msg: Any) -> None:
        value = self.checked_value(msg)  # null and oversized values as on the Avro path
        known = self.frame(value)  # frame reasons as on the Avro path
        schema_id, schema = known
        indexes, start = read_message_indexes(value, HEADER_SIZE)
        kind = schema.message_type(indexes)
        try:
            parsed = kind.cls.FromString(value[start:])
        except message.DecodeError as error:
            raise ProtobufDecodeError(
                f"the body is not a {kind.cls.DESCRIPTOR.full_name}: {error}"
            ) from None
        self.place_record(
            msg,
            kind.mapping.convert(parsed),
            (schema_id, indexes),
            kind.mapping.avro_schema,
            kind.file_schema_id,
        )

    def new_decoder(self, schema_id: int) -> _ProtobufSchema:
        registered = self.registered_schema(
            schema_id,
            "PROTOBUF",
            NonProtobufSchemaError,
            "; a protobuf topic needs a Protobuf schema",
        )
        try:
            files = compile_files(registry_proto_files(self.lookup, registered)).file
            pool = descriptor_pool.DescriptorPool()  # per schema id: versions share full names
            for proto in files:
                pool.Add(proto)
            root = pool.FindFileByName(ROOT_FILE)
        except UnmappableProtobufSchemaError as error:
            raise UnmappableProtobufSchemaError(f"schema id {schema_id}: {error}") from None
        except (TypeError, KeyError) as error:  # the runtime refusing what protoc accepted
            raise UnmappableProtobufSchemaError(
                f"schema id {schema_id}: its descriptors do not load: {error}"
            ) from None
        if not root.message_types_by_name:
            raise UnmappableProtobufSchemaError(f"schema id {schema_id} declares no message")
        return _ProtobufSchema(schema_id, pool, root)
