"""The native kernel's decoding program of one Protobuf message type (``format: protobuf``):
what ``kernel/src/protobuf.rs`` needs to decode its binary and encode the Avro record
:func:`~kbqe_dagster.core.formats.protobuf_avro.map_protobuf_message` maps it to, derived
from the same descriptors (``google.protobuf.descriptor.Descriptor`` or anything with the
same attributes). Pure: no Protobuf runtime is imported.

The program is JSON::

    {"top": 0,
     "messages": [{"fields": [{"name", "number", "kind", "label", "ref"?, "wrapped"?,
                               "key"?, "oneof"?}, ...]}, ...],
     "enums": [{"symbols": [[number, Avro symbol index], ...], "default": index | null}]}

``kind`` is a scalar type name (``int32`` ... ``bytes``), ``enum`` / ``message`` (``ref``: the
index in ``enums`` / ``messages``), ``timestamp`` (``google.protobuf.Timestamp``) or
``wrapper`` (``wrapped``: the wrapped scalar); ``label`` is ``single`` (no presence: the
default when unset), ``nullable`` (``["null", T]``), ``repeated`` or ``map`` (``key``: the
key's scalar type, ``kind`` the value's). Each choice is the mapping's own, field by field.

:class:`KernelProgramRefused` names what the kernel does not implement; that type's
messages then stay on the Python path (the reference), which is never a verdict on them:
proto2's ``required`` fields (a message lacking one does not parse), groups, closed (proto2)
enums (an unknown number is an unknown field there, not an error), messages with extension
ranges.
"""

from __future__ import annotations

import json
from typing import Any

from kbqe_dagster.core.formats.protobuf_avro import TIMESTAMP

_SCALARS = {
    1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32",
    8: "bool", 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64",
    17: "sint32", 18: "sint64",
}  # fmt: skip
_GROUP, _MESSAGE, _ENUM = 10, 11, 14
_WRAPPERS = {
    "google.protobuf.DoubleValue": "double",
    "google.protobuf.FloatValue": "float",
    "google.protobuf.Int64Value": "int64",
    "google.protobuf.UInt64Value": "uint64",
    "google.protobuf.Int32Value": "int32",
    "google.protobuf.UInt32Value": "uint32",
    "google.protobuf.BoolValue": "bool",
    "google.protobuf.StringValue": "string",
    "google.protobuf.BytesValue": "bytes",
}


class KernelProgramRefused(ValueError):
    """A message type the native kernel does not decode: it stays on the Python path."""


def kernel_program(descriptor: Any) -> str:
    """The program of the message type ``descriptor`` (one the mapping accepted). Raises
    :class:`KernelProgramRefused`."""
    builder = _Builder()
    top = builder.message(descriptor)
    return json.dumps({"top": top, "messages": builder.messages, "enums": builder.enums})


class _Builder:
    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.enums: list[dict[str, Any]] = []
        self._message_at: dict[str, int] = {}
        self._enum_at: dict[str, int] = {}

    def message(self, descriptor: Any) -> int:
        name = descriptor.full_name
        if name in self._message_at:
            return self._message_at[name]
        if getattr(descriptor, "extension_ranges", None):
            raise KernelProgramRefused(f"{name} has extension ranges")
        at = self._message_at[name] = len(self.messages)
        program: dict[str, Any] = {"fields": []}
        self.messages.append(program)
        oneofs = [o.full_name for o in descriptor.oneofs]
        program["fields"] = [self.field(f, oneofs) for f in descriptor.fields]
        return at

    def field(self, field: Any, oneofs: list[str]) -> dict[str, Any]:
        path = field.full_name
        if field.is_required:
            raise KernelProgramRefused(f"{path} is required (proto2)")
        out: dict[str, Any] = {"name": field.name, "number": field.number}
        entry = field.message_type
        if field.is_repeated and entry is not None and entry.GetOptions().map_entry:
            key, value = entry.fields_by_name["key"], entry.fields_by_name["value"]
            if key.type not in _SCALARS:
                raise KernelProgramRefused(f"{path}: a map key of type {key.type}")
            out.update(self.element(value), label="map", key=_SCALARS[key.type])
            return out
        out.update(self.element(field))
        if field.is_repeated:
            out["label"] = "repeated"
        elif field.has_presence:
            out["label"] = "nullable"
            oneof = field.containing_oneof
            if oneof is not None:
                out["oneof"] = oneofs.index(oneof.full_name)
        else:
            out["label"] = "single"
        return out

    def element(self, field: Any) -> dict[str, Any]:
        kind = field.type
        if kind == _MESSAGE:
            name = field.message_type.full_name
            if name == TIMESTAMP:
                return {"kind": "timestamp"}
            if name in _WRAPPERS:
                return {"kind": "wrapper", "wrapped": _WRAPPERS[name]}
            return {"kind": "message", "ref": self.message(field.message_type)}
        if kind == _ENUM:
            return {"kind": "enum", "ref": self.enum(field.enum_type, field.full_name)}
        if kind in _SCALARS:
            return {"kind": _SCALARS[kind]}
        raise KernelProgramRefused(f"{field.full_name}: field type {kind} (groups stay in Python)")

    def enum(self, descriptor: Any, path: str) -> int:
        name = descriptor.full_name
        if name in self._enum_at:
            return self._enum_at[name]
        if getattr(descriptor, "is_closed", False):
            raise KernelProgramRefused(f"{path}: enum {name} is closed (proto2)")
        names = [v.name for v in descriptor.values]  # the Avro symbols, in this order
        first: dict[int, int] = {}
        for value in descriptor.values:  # with allow_alias, the first name of a number wins
            first.setdefault(value.number, names.index(value.name))
        at = self._enum_at[name] = len(self.enums)
        self.enums.append({"symbols": sorted(first.items()), "default": first.get(0)})
        return at
