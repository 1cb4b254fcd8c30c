"""What the native kernels do for a topic's ``transforms``: the plan shared by every format
whose kernel stages transformed records (``format: json``, JSON Schema, Protobuf, Avro).

A kernel does not run transforms: it stages the record's bytes as declared, leaves out the
dropped fields' encodings, writes the int or long fields cast to string as their digits and
appends the constants' encoding. :func:`kernel_transforms` says when that is exactly what the
Python path's decode → transform → encode (formats/transform_stage.py) writes, and
:class:`KernelTransforms` is what it then tells the kernel.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from io import BytesIO
from typing import Any

from fastavro import parse_schema, schemaless_writer

from kbqe_dagster.core.transforms.specs import AddField, CastField, DropFields, RenameField


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

    def constants_encoding(self, output_schema: Mapping[str, Any]) -> bytes:
        """The constants' Avro encoding under their types in the derived ``output_schema``
        (its last fields, in order): what fastavro writes after the other fields."""
        types = {f["name"]: f["type"] for f in output_schema["fields"]}
        fields = [{"name": name, "type": types[name]} for name, _ in self.constants]
        record = {"type": "record", "name": "KbqeConstants", "fields": fields}
        body = BytesIO()
        schemaless_writer(body, parse_schema(record, _write_hint=False), dict(self.constants))
        return body.getvalue()


def kernel_kinds(transforms: Any) -> bool:
    """Whether every one of ``transforms`` is of a kind the kernel can do (a rename, a drop,
    an ``add`` of a constant): what :func:`kernel_transforms` then checks against a schema."""
    return all(
        isinstance(spec, (RenameField, DropFields, CastField))
        or (isinstance(spec, AddField) and spec.header is None and spec.message is None)
        for spec in transforms
    )


def kernel_transforms(
    transforms: Any, schema: Mapping[str, Any], wanted: Any, *, complete: bool = False
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
    int or long to a string (:func:`cast_to_digits`), not after another cast of the field.

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
    for spec in transforms:
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
                return None
        elif isinstance(spec, AddField) and spec.header is None and spec.message is None:
            if spec.add in read:
                return None
            constants.append((spec.add, spec.value))
        else:
            return None
    return KernelTransforms(tuple(dropped), tuple(constants), tuple(digits))


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
    return widened == to or widened == ["null", to]


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
