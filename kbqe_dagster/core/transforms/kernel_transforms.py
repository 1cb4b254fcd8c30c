"""What the native kernels do for a topic's ``transforms``: the plan shared by every format
whose kernel stages transformed records (``format: json``, JSON Schema, Protobuf, Avro).

A kernel does not run transforms: it stages the record's bytes as declared, leaves out the
dropped fields' encodings, writes the int or long fields cast to string as their digits and
appends the constants' encoding; the kernels also rewrite a masked, converted or cast field's
encoding after writing it as declared (Avro: after copying it from the canonical body) and
append parts of the message (kernel/src/rewrite.rs: :class:`FieldRewrite`, :class:`MessagePart`).
:func:`kernel_transforms` says when that is exactly what the Python path's decode → transform
→ encode (formats/transform_stage.py) writes, and :class:`KernelTransforms` is what it then
tells the kernel.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from dataclasses import field as dataclass_field
from io import BytesIO
from typing import Any

from fastavro import parse_schema, schemaless_writer

from kbqe_dagster.core.transforms.specs import (
    AddField,
    CastField,
    ConvertTimestamp,
    DropFields,
    MaskField,
    MaskMethod,
    MessageSource,
    RenameField,
    TimeFormat,
)


@dataclass(frozen=True)
class KernelTransforms:
    """What the kernel does for a topic's transforms (:func:`kernel_transforms`): the declared
    fields it leaves out of every body, and the constants it appends after it (renames and
    casts change no bytes)."""

    drops: tuple[str, ...] = ()
    constants: tuple[tuple[str, Any], ...] = ()
    """``(field, value)`` of each ``add`` of a constant, in order."""
    digits: tuple[str, ...] = ()
    """Int or long fields ``cast`` to string: written as their decimal digits."""
    rewrites: tuple[FieldRewrite, ...] = ()
    """``mask`` and numeric ``timestamp`` transforms: each field's encoding rewritten after it
    is checked as declared (kernel/src/rewrite.rs)."""
    parts: tuple[MessagePart, ...] = ()
    """``add`` of a part of the message (its coordinates, timestamp, key or a header): appended
    per message, among the constants in transform order (:meth:`appended`)."""

    def digits_rewritten(self, schema: Mapping[str, Any]) -> KernelTransforms:
        """These transforms with the casts to digits as rewrites (:func:`cast_rewrite`), for
        the kernels without the JSON encoder's own (Protobuf, JSON Schema)."""
        fields = {f.get("name"): f for f in schema.get("fields") or ()}
        casts = tuple(cast_rewrite(fields[name], "string") for name in self.digits)
        assert all(casts), "cast_rewrite takes every cast cast_to_digits takes"
        return replace(self, digits=(), rewrites=(*self.rewrites, *casts))  # type: ignore[arg-type]

    def appended(
        self, output_schema: Mapping[str, Any], topic: str, partition: int
    ) -> list[tuple[str, bytes]]:
        """What the kernel's ``append_message_parts`` appends after every body when there are
        :attr:`parts`: the constants' encodings and the parts, in transform order (the
        range's topic and partition are constants of it)."""
        items: list[tuple[str, bytes]] = []

        def encode(constant: tuple[str, Any]) -> tuple[str, bytes]:
            return (
                "bytes",
                KernelTransforms(constants=(constant,)).constants_encoding(output_schema),
            )

        taken = 0
        for part in self.parts:
            items += [encode(c) for c in self.constants[taken : part.after]]
            taken = part.after
            if part.source == MessageSource.TOPIC:
                items.append(encode((part.field, topic)))
            elif part.source == MessageSource.PARTITION:
                items.append(encode((part.field, partition)))
            elif part.source in (MessageSource.OFFSET, MessageSource.TIMESTAMP):
                items.append((part.source, b""))
            elif part.header is None:
                items.append(("key", b"bytes" if part.as_bytes else b"string"))
            else:
                kind = "header:bytes" if part.as_bytes else "header:string"
                items.append((kind, part.header.encode()))
        return items + [encode(c) for c in self.constants[taken:]]

    def constants_encoding(self, output_schema: Mapping[str, Any]) -> bytes:
        """The constants' Avro encoding under their types in the derived ``output_schema``
        (its last fields, in order): what fastavro writes after the other fields."""
        types = {f["name"]: f["type"] for f in output_schema["fields"]}
        fields = [{"name": name, "type": types[name]} for name, _ in self.constants]
        record = {"type": "record", "name": "KbqeConstants", "fields": fields}
        body = BytesIO()
        schemaless_writer(body, parse_schema(record, _write_hint=False), dict(self.constants))
        return body.getvalue()


@dataclass(frozen=True)
class FieldRewrite:
    """A top-level field's encoding rewritten by the kernel (kernel/src/rewrite.rs) after it is
    checked and encoded as declared: a ``mask`` (``op`` ``null`` or ``hmac``), a
    ``timestamp`` between numbers (``time``; :func:`field_rewrite`) or a ``cast`` exact from
    the encoded value (:func:`cast_rewrite`), with the declared layout the kernel reads back."""

    field: str
    op: str
    """``null``, ``hmac``, ``time`` or ``cast`` (:func:`cast_rewrite`)."""
    base: str
    """The declared value: ``int``, ``long``, ``string``, ``bytes``, ``boolean``, or ``any``
    (a null mask)."""
    declared_null: int | None = None
    """The null branch of a declared ``["null", T]`` (0) or ``[T, "null"]`` (1)."""
    out_null: int | None = None
    """A null mask's derived null branch (``_nullable`` keeps a declared union's layout)."""
    per_in: int = 1
    """``time``: microseconds per input unit."""
    to: str = ""
    """``time``: ``s``, ``ms``, ``us``, ``timestamp_millis`` or ``timestamp_micros``;
    ``cast``: ``string``, ``long`` or ``double``."""
    key: bytes = dataclass_field(default=b"", repr=False)
    """``hmac``: the key (from the environment, hmac_keys); never printed nor logged."""

    def spec(self) -> str:
        """What the kernel's ``rewrite_json_field`` reads (without the key)."""
        return json.dumps({"op": self.op, "base": self.base, "declared_null": self.declared_null,
                           "out_null": self.out_null, "per_in": self.per_in, "to": self.to})  # fmt: skip


@dataclass(frozen=True)
class MessagePart:
    """An ``add`` of a part of the message (core/transforms/kinds.py ``_add_meta``,
    ``_add_raw``), which the kernel appends per message."""

    field: str
    source: str
    """A ``MessageSource`` value, or ``header``."""
    header: str | None = None
    as_bytes: bool = False
    """The key or header as ``["null", "bytes"]`` (else a UTF-8 ``["null", "string"]``)."""
    after: int = 0
    """How many of the constants come before it."""


def kernel_kinds(transforms: Any, *, rewrites: bool = False) -> bool:
    """Whether every one of ``transforms`` is of a kind the kernel can do (a rename, a drop,
    an ``add`` of a constant, a ``cast``): what :func:`kernel_transforms` then checks against
    a schema. ``rewrites``: a kernel that rewrites fields and appends parts of the message
    (JSON, JSON Schema, Protobuf, Avro) also does ``mask``, ``timestamp`` not to a string and
    ``add`` of a part of the message."""
    return all(
        isinstance(spec, (RenameField, DropFields, CastField))
        or (isinstance(spec, AddField) and spec.header is None and spec.message is None)
        or (rewrites and isinstance(spec, (MaskField, AddField)))
        or (rewrites and isinstance(spec, ConvertTimestamp) and spec.to is not TimeFormat.STRING)
        for spec in transforms
    )


def kernel_transforms(
    transforms: Any,
    schema: Mapping[str, Any],
    wanted: Any,
    hmac_keys: Mapping[int, bytes] | None = None,
    *,
    complete: bool = False,
) -> KernelTransforms | None:
    """What the kernel does to stage a topic with ``transforms`` exactly, or None when it
    cannot (the Python path's). It can when they only rename and drop top-level fields and
    add constants: a rename keeps the field's position and type, a drop removes the field's
    encoding, an added field comes last, so the record's Avro bytes are the declared schema's
    without the dropped fields' and with the constants' after them; only the files' schema
    and id (the derived schema's) differ. Not when routing or event time reads a renamed,
    dropped or added name (they read the transformed record), when a renamed field has a
    default other than null (a value without the field is encoded with its default as
    declared, but as null once renamed: ``record.pop(old, None)``), or when a rename or a drop
    names a renamed or added field (a chain). A ``cast`` too when it changes no bytes
    (:func:`cast_keeps_bytes`: to the field's own type, or an ``int`` to ``long``) or casts an
    int or long to a string (:func:`cast_to_digits`), or its result is exact from the encoded
    value (:func:`cast_rewrite`), not after another cast of the field.
    A ``mask`` or a ``timestamp`` between numbers of a declared field (:func:`field_rewrite`,
    ``hmac_keys`` by transform index as core/transforms/compiler.py ``hmac_keys`` gives them),
    not after a cast, mask or timestamp of the field, nor of a field dropped later (Python
    would run the step, which may fail, before the drop).

    ``complete``: every record carries every declared field (a decoded Avro body does), so a
    field's default is never used and the rules about defaults do not apply."""
    declared = {
        f.get("name"): _no_default(f) if complete else f for f in schema.get("fields") or ()
    }
    read = {path.split(".")[0] for path in wanted}
    present = set(declared)  # declared names not yet renamed or dropped
    dropped: list[str] = []
    constants: list[tuple[str, Any]] = []
    cast: set[str] = set()
    digits: list[str] = []
    rewrites: list[FieldRewrite] = []
    rewritten: set[str] = set()
    parts: list[MessagePart] = []
    for index, spec in enumerate(transforms):
        if isinstance(spec, RenameField):
            field = declared.get(spec.rename)
            if spec.rename not in present or field is None or field.get("default") is not None:
                return None
            if spec.rename in read or spec.to in read:
                return None
            present.discard(spec.rename)
        elif isinstance(spec, DropFields):
            if any(name not in present or name in read for name in spec.drop):
                return None
            if any(name in rewritten for name in spec.drop):
                return None
            present.difference_update(spec.drop)
            dropped += spec.drop
        elif isinstance(spec, CastField):
            field = declared.get(spec.cast)
            if spec.cast not in present or field is None or spec.cast in read:
                return None
            if spec.cast in cast:
                return None  # a chain: the second reads the first's value
            cast.add(spec.cast)
            if cast_to_digits(field, spec.to.value):
                digits.append(spec.cast)
            elif not cast_keeps_bytes(field, spec.to.value):
                rewrite = cast_rewrite(field, spec.to.value)
                if rewrite is None:
                    return None
                rewritten.add(spec.cast)
                rewrites.append(rewrite)
        elif isinstance(spec, AddField) and spec.header is None and spec.message is None:
            if spec.add in read:
                return None
            constants.append((spec.add, spec.value))
        elif isinstance(spec, AddField):
            if spec.add in read:
                return None
            source = "header" if spec.header is not None else str(spec.message)
            as_bytes = spec.type == "bytes"
            parts.append(MessagePart(spec.add, source, spec.header, as_bytes, len(constants)))
        elif isinstance(spec, (MaskField, ConvertTimestamp)):
            name = spec.mask if isinstance(spec, MaskField) else spec.timestamp
            field = declared.get(name)
            if name not in present or field is None or name in read or name in cast:
                return None
            rewrite = field_rewrite(field, spec, (hmac_keys or {}).get(index))
            if rewrite is None:
                return None
            cast.add(name)
            rewritten.add(name)
            rewrites.append(rewrite)
        else:
            return None
    return KernelTransforms(
        tuple(dropped), tuple(constants), tuple(digits), tuple(rewrites), tuple(parts)
    )


_EPOCH_TO = {TimeFormat.EPOCH_S: "s", TimeFormat.EPOCH_MS: "ms", TimeFormat.EPOCH_US: "us",
             TimeFormat.TIMESTAMP_MILLIS: "timestamp_millis",
             TimeFormat.TIMESTAMP_MICROS: "timestamp_micros"}  # fmt: skip
_MICROS_PER = {"s": 10**6, "ms": 10**3, "us": 1}


def field_rewrite(
    field: Mapping[str, Any], spec: MaskField | ConvertTimestamp, key: bytes | None
) -> FieldRewrite | None:
    """The kernel's rewrite of declared ``field`` for a ``mask`` or ``timestamp`` step
    (core/transforms/kinds.py ``_mask``, ``_timestamp``), or None when it does not do it
    exactly. The declared type must be ``T``, ``["null", T]`` or ``[T, "null"]`` (the kernel
    reads the union branch back; the derived ``["null", T]`` may put the value under another
    index), and, but for a null mask, without a default other than null (absent, it would be
    encoded with its default, but the step reads None and fails or gives null). ``mask``:
    ``null`` of any such type; hmac of a plain ``int``, ``long``, ``string`` or ``bytes``
    (``str(value)``, bytes as they are) with its key. ``timestamp``: from a ``long``
    timestamp-millis/micros or an ``int``/``long`` with ``epoch_unit``, to an epoch number or
    a timestamp-millis/micros (strings, zones and formats stay Python's)."""
    name = field.get("name")
    declared = field.get("type")
    declared_null: int | None = None
    base: Any = declared
    if isinstance(declared, list):
        if len(declared) != 2 or declared.count("null") != 1:
            return None
        declared_null = declared.index("null")
        base = declared[1 - declared_null]
    if isinstance(base, dict):
        if set(base) - {"type", "logicalType"} or not isinstance(base.get("type"), str):
            return None
        primitive, logical = base["type"], base.get("logicalType")
    elif isinstance(base, str):
        primitive, logical = base, None
    else:
        return None
    if isinstance(spec, MaskField) and spec.method is MaskMethod.NULL:
        if primitive == "null":
            return None  # ["null", "null"]: no derived schema
        return FieldRewrite(str(name), "null", "any", declared_null,
                            out_null=0 if declared_null is None else declared_null)  # fmt: skip
    if field.get("default") is not None:
        return None
    if isinstance(spec, MaskField):
        if (
            key is None
            or logical is not None
            or primitive not in ("int", "long", "string", "bytes")
        ):
            return None
        return FieldRewrite(str(name), "hmac", primitive, declared_null, key=key)
    to = _EPOCH_TO.get(spec.to)
    if to is None:
        return None
    if primitive == "long" and logical in ("timestamp-millis", "timestamp-micros"):
        per_in = 10**3 if logical == "timestamp-millis" else 1
    elif primitive in ("int", "long") and logical is None and spec.epoch_unit is not None:
        per_in = _MICROS_PER[spec.epoch_unit.value]
    else:
        return None
    return FieldRewrite(str(name), "time", primitive, declared_null, per_in=per_in, to=to)


def cast_keeps_bytes(field: Mapping[str, Any], to: str) -> bool:
    """Whether ``{cast: field, to: to}`` leaves every record's bytes as declared. The step
    (core/transforms/kinds.py ``_cast``) types the field ``to`` (``["null", to]`` when it may
    be null) and converts each non-null value; a value that is the same (``to`` is its own
    type: the identity) or encodes the same (an ``int`` as a ``long``: both zig-zag varints,
    and every int is a long) gives the same bytes only when the derived type has the declared
    union layout (``["long", "null"]`` becomes ``["null", "long"]``: another branch index).
    Not a field with a default other than null: absent, it is encoded with its default as
    declared, but the step fails it (``is missing from the record``)."""
    if field.get("default") is not None:
        return False
    declared = field.get("type")
    if isinstance(declared, list):
        widened: Any = ["long" if t == "int" else t for t in declared]
    else:
        widened = "long" if declared == "int" else declared
    return bool(widened == to or widened == ["null", to])


_CAST_REWRITES = {("boolean", "string"), ("boolean", "long"), ("boolean", "double"),
                  ("int", "double"), ("long", "double"), ("int", "string"), ("long", "string")}  # fmt: skip


def cast_rewrite(field: Mapping[str, Any], to: str) -> FieldRewrite | None:
    """The kernel's rewrite of ``{cast: field, to: to}`` when the result is exact from the
    encoded value (core/transforms/values.py ``converter``): a boolean to ``"true"`` /
    ``"false"``, 1 / 0 or 1.0 / 0.0; an int or long to a double (``float``: round to nearest
    even, as Rust's ``as``) or to its digits (the layouts :func:`cast_to_digits` does not
    keep: ``[T, "null"]`` becomes ``["null", "string"]``). The declared type is ``T``,
    ``["null", T]`` or ``[T, "null"]`` with no default other than null (see
    :func:`cast_keeps_bytes`). A JSON boolean is a Python bool and a JSON integer that fits
    an int or long a Python int, so the step's value is the encoded one."""
    if field.get("default") is not None:
        return None
    declared = field.get("type")
    declared_null: int | None = None
    base = declared
    if isinstance(declared, list):
        if len(declared) != 2 or declared.count("null") != 1:
            return None
        declared_null = declared.index("null")
        base = declared[1 - declared_null]
    if not isinstance(base, str) or (base, to) not in _CAST_REWRITES:
        return None
    return FieldRewrite(str(field.get("name")), "cast", base, declared_null, to=to)


def cast_to_digits(field: Mapping[str, Any], to: str) -> bool:
    """Whether ``{cast: field, to: to}`` turns an int or long (``["null", T]`` too: the derived
    ``["null", "string"]`` keeps its branch indexes) into the string ``str(value)``, which the
    kernel writes as the digits of the value it checked as declared. A JSON integer that fits
    the type is a Python int (fastavro's validator takes no bool or float for it), so ``str``
    is its digits. Not a field with a default other than null (see :func:`cast_keeps_bytes`)."""
    if to != "string" or field.get("default") is not None:
        return False
    declared = field.get("type")
    return declared in ("int", "long", ["null", "int"], ["null", "long"])


def _no_default(field: Mapping[str, Any]) -> Mapping[str, Any]:
    return {key: value for key, value in field.items() if key != "default"}
