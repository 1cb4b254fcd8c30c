"""Avro records read back through the Storage Write API's row encoding: encoded as Protobuf rows,
parsed by a message class of the derived descriptor, as Python values (set fields only)."""

from __future__ import annotations

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from kbqe_dagster.core.formats.avro_proto import (
    encode_rows,
    proto_schema,
)

F = descriptor_pb2.FieldDescriptorProto


def message_class(descriptor: descriptor_pb2.DescriptorProto):
    """A message class built from the descriptor alone, as the API (and the emulator) do."""
    pool = descriptor_pool.DescriptorPool()
    file = descriptor_pb2.FileDescriptorProto(name="test_row.proto", syntax="proto2")
    file.message_type.add().CopyFrom(descriptor)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName(descriptor.name))


def parsed(schema, records) -> list[dict]:
    cls = message_class(proto_schema(schema))
    out = []
    for raw in encode_rows(schema, records):
        message = cls()
        message.ParseFromString(raw)
        out.append(as_python(message))
    return out


def as_python(message) -> dict:
    """Set fields only (an unset optional field is NULL), repeated as lists."""
    out = {}
    for field, value in message.ListFields():
        if field.type == F.TYPE_MESSAGE:
            value = [as_python(v) for v in value] if field.is_repeated else as_python(value)
        elif field.is_repeated:
            value = list(value)
        out[field.name] = value
    return out
