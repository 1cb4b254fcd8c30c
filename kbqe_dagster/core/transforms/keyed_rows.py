"""Transforms on keyed topics (``keyed:`` with ``transforms:``): which transforms a key field
may take, the key's column names after them, and applying them to a change's row.

A keyed topic's transforms reshape its **row**: the Debezium envelope's ``after`` image, or
``before`` for a delete (both images are one row record: whichever a change carries is
transformed the same way), ExtractNewRecordState's leading row fields, or a plain keyed
record. They apply to the row as the changelog would hold it without them (Kafka Connect
semantic values already in their BigQuery form), so the changelog, the current table and the
history all hold the transformed row: a masked e-mail never reaches BigQuery. The change
columns, the version, ``delete_field`` and event time are read from the message as it came.
``function`` transforms stay refused on keyed topics: a function may change any field, the
key's included, and declares only the fields it adds.

**Key fields.** ``keyed.key`` names the source row's fields, as the Kafka key's schema does.
A key field's transform is refused, naming the transform and the field, unless the key keeps
its identity — equal keys stay equal (every transform is deterministic) and distinct keys stay
distinct — because the MERGE matches a change to its row by the key:

- ``rename``: allowed. The key column takes the new name in the changelog, the current table
  (clustered by it), the hard-delete memory and the history (:func:`key_columns`).
- ``mask`` with hmac (``key_env``): allowed. The same input gives the same digest, and two
  inputs one digest only through a SHA-256 collision. The HMAC key must not change: a new key
  is a new identity for every row (the current table would hold a row under each digest).
- ``cast`` to ``string``: allowed. Every value a cast reads has one text and distinct values
  distinct texts (an int's digits, a double's shortest repr, ``true``/``false``). Every other
  cast is refused: reading text collapses spellings (``"042"`` and ``"42"`` are both 42,
  ``"TRUE"`` and ``" true"`` both true), a long above 2^53 shares its double with a neighbour,
  and a double's ``-0.0`` and ``0.0`` are one long.
- ``drop``: refused (a row without its key cannot be merged). ``mask`` with ``method: null``:
  refused (every key would be NULL). ``timestamp``: refused (a coarser unit floors two instants
  into one, a text read in a zone or spelled with another offset names the same instant as
  another text). ``compute`` onto a key field: refused (the key becomes an expression's value).
- ``add`` and ``compute`` of a new field create a non-key column (``add`` cannot name an
  existing field; the key stays what it was).

The rules are checked when the pipeline file is read for a configured ``keyed.key``; a
Debezium topic without one is checked against its Kafka key's fields by each stage range
(keyed/stage.py, before anything is staged) and by the merge (keyed/merge.py).

**Debezium's unavailable value** (``keyed.unavailable_value``): a column the change did not
carry (a TOASTed column an update did not touch) holds the placeholder, which the MERGE reads
as "unchanged". Transforms keep that meaning (:func:`transform_row`): a masked or renamed
placeholder stays the placeholder, a ``compute`` of a string from it is the placeholder; a
``cast`` to another type, a ``timestamp`` or a non-string ``compute`` of it fails the change
(bad input naming the field) rather than write a value the source never had.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kbqe_dagster.core.errors import TransformFailedError
from kbqe_dagster.core.transforms.compiler import Compiled
from kbqe_dagster.core.transforms.kinds import MessageMeta
from kbqe_dagster.core.transforms.specs import (
    AddField,
    CastField,
    CastType,
    ComputeField,
    ConvertTimestamp,
    DropFields,
    FunctionTransform,
    MaskField,
    MaskMethod,
    RenameField,
    avro_type,
    expression_names,
    kind_of,
)

FUNCTION_ON_KEYED = (
    "function is not allowed on a keyed topic: a function may change any field, the key's "
    "included (use add, compute, mask, cast, rename, drop or timestamp)"
)


def keyed_transform_problems(specs: Sequence[Any], key: Sequence[str]) -> list[tuple[str, str]]:
    """``([INDEX], problem)`` of ``specs`` on a keyed topic whose key fields are ``key`` (empty:
    not known yet, a Debezium topic's Kafka key; :func:`key_columns` then checks it at stage
    time and at the merge)."""
    return _walk(specs, key)[1]


def table_transform_problems(specs: Sequence[Any], key: Sequence[str]) -> list[tuple[str, str]]:
    """``([INDEX], problem)`` of ``specs`` on a topic keyed by its Kafka key (``keyed.key_from:
    kafka_key``) whose key columns are ``key`` (empty: an Avro key's, known per key schema).
    Such a topic's transforms reshape its **value**: the key columns come from the Kafka key
    and no transform changes them, so one that names a key column — or makes a value field
    one, which the layout would then leave out — is refused, as is ``function``."""
    problems: list[tuple[str, str]] = []
    taken = {name.lower() for name in key}
    for index, spec in enumerate(specs):
        if isinstance(spec, FunctionTransform):
            problems.append((f"[{index}]", FUNCTION_ON_KEYED))
            continue
        named = [n for n in _names(spec) if n.lower() in taken]
        if named:
            problems.append((f"[{index}]", (
                f"{kind_of(spec)} of key column {named[0]!r}: a topic keyed by its Kafka key "
                "takes its key columns from the Kafka key, which transforms do not change; "
                "they apply to the value's fields")))  # fmt: skip
    return problems


def _names(spec: Any) -> tuple[str, ...]:
    """The fields a transform reads or writes by name."""
    if isinstance(spec, RenameField):
        return (spec.rename, spec.to)
    if isinstance(spec, DropFields):
        return tuple(spec.drop)
    if isinstance(spec, MaskField):
        return (spec.mask,)
    if isinstance(spec, CastField):
        return (spec.cast,)
    if isinstance(spec, ConvertTimestamp):
        return (spec.timestamp,)
    if isinstance(spec, ComputeField):
        return (spec.compute,)
    if isinstance(spec, AddField):
        return (spec.add,)
    return ()


def key_columns(specs: Sequence[Any], key: Sequence[str], where: str) -> tuple[str, ...]:
    """The changelog columns of the source key fields ``key`` after ``specs`` (a renamed key
    field's new name). ValueError naming each refused transform as ``where[INDEX]``
    (``topics[0].transforms``) and the key field."""
    columns, problems = _walk(specs, key)
    if problems:
        raise ValueError("; ".join(f"{where}{index}: {why}" for index, why in problems))
    return columns


def _walk(
    specs: Sequence[Any], key: Sequence[str]
) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    current = list(key)
    problems: list[tuple[str, str]] = []

    def refuse(index: int, spec: Any, name: str, why: str) -> None:
        problems.append((f"[{index}]", f"{kind_of(spec)} of key field {name!r}: {why}"))

    for index, spec in enumerate(specs):
        if isinstance(spec, FunctionTransform):
            problems.append((f"[{index}]", FUNCTION_ON_KEYED))
        elif isinstance(spec, RenameField):
            current = [spec.to if name == spec.rename else name for name in current]
        elif isinstance(spec, DropFields):
            for name in spec.drop:
                if name in current:
                    refuse(index, spec, name, "a row without its key cannot be merged")
        elif isinstance(spec, MaskField) and spec.mask in current:
            if spec.method is MaskMethod.NULL:
                refuse(index, spec, spec.mask, 'method "null" makes every key NULL; '
                       "mask it with hmac (key_env), which keeps its identity")  # fmt: skip
        elif isinstance(spec, CastField) and spec.cast in current:
            if spec.to is not CastType.STRING:
                refuse(index, spec, spec.cast, f"to {spec.to.value} may make two keys one; "
                       "a key field casts to string only")  # fmt: skip
        elif isinstance(spec, ConvertTimestamp) and spec.timestamp in current:
            refuse(index, spec, spec.timestamp, "a coarser unit, a zone or a format may make "
                   "two keys one")  # fmt: skip
        elif isinstance(spec, (ComputeField, AddField)):
            name = spec.compute if isinstance(spec, ComputeField) else spec.add
            if name in current:
                refuse(index, spec, name, "the key would become another value")
    return tuple(current), problems


def read_fields(specs: Sequence[Any]) -> set[str]:
    """The top-level fields whose *values* ``specs`` read (a mask's, a cast's, a timestamp's,
    a compute's and what its expression names, a function's every one), under each name they
    take through renames. The others are only moved, dropped or added."""
    read: set[str] = set()
    for spec in specs:
        if isinstance(spec, FunctionTransform):
            return {"*"}
        if isinstance(spec, MaskField):
            read.add(spec.mask)
        elif isinstance(spec, CastField):
            read.add(spec.cast)
        elif isinstance(spec, ConvertTimestamp):
            read.add(spec.timestamp)
        elif isinstance(spec, ComputeField):
            read |= {spec.compute, *expression_names(spec.expression)}
    renames = [(s.rename, s.to) for s in specs if isinstance(s, RenameField)]
    while True:  # a renamed field is read under either name
        more = {b for a, b in renames if a in read} | {a for a, b in renames if b in read}
        if more <= read:
            return read
        read |= more


def plain_types(schema: Mapping[str, Any], keep: set[str]) -> dict[str, Any]:
    """The record ``schema`` with the logical types of its top-level fields not in ``keep``
    left out: such a field decodes to its Avro value (a date's day number, a decimal's bytes)
    and encodes to the same bytes, so a row transform need not hold what it does not read —
    a date past year 9999 is a valid encoding that Python's ``date`` cannot hold."""
    if "*" in keep:
        return dict(schema)
    return {
        **schema,
        "fields": [
            field if field["name"] in keep else {**field, "type": _plain(field["type"])}
            for field in schema["fields"]
        ],
    }


def _plain(avro: Any) -> Any:
    if isinstance(avro, list):
        return [_plain(branch) for branch in avro]
    if not isinstance(avro, Mapping):
        return avro
    out = {k: _plain(v) for k, v in avro.items() if k != "logicalType"}
    if "fields" in avro:
        out["fields"] = [{**f, "type": _plain(f["type"])} for f in avro["fields"]]
    return out


def is_placeholder(value: Any, placeholder: str) -> bool:
    """Whether ``value`` means "unchanged" as the MERGE reads it (keyed/rows_sql.py): the
    placeholder string, its UTF-8 bytes, or an array holding only it."""
    if isinstance(value, str):
        return value == placeholder
    if isinstance(value, bytes):
        return value == placeholder.encode()
    if isinstance(value, list) and value:
        return all(item == placeholder for item in value)
    return False


def transform_row(
    compiled: Compiled,
    specs: Sequence[Any],
    record: Mapping[str, Any],
    meta: MessageMeta,
    placeholder: str | None,
) -> dict[str, Any]:
    """``compiled.apply(record, meta)`` keeping Debezium's unavailable value (see the module
    docstring); raises :class:`TransformFailedError` naming the transform and the field."""
    held = (
        {name for name, value in record.items() if is_placeholder(value, placeholder)}
        if placeholder
        else set()
    )
    if not held:
        return compiled.apply(record, meta)
    assert placeholder is not None
    out = dict(record)
    for index, spec in enumerate(specs):
        label = compiled.steps[index][0]
        if isinstance(spec, RenameField) and spec.rename in held:
            held.discard(spec.rename)
            held.add(spec.to)
        elif isinstance(spec, DropFields):
            held.difference_update(spec.drop)
        elif isinstance(spec, MaskField) and spec.mask in held:
            if spec.method is MaskMethod.HMAC_SHA256:
                out[spec.mask] = placeholder  # still "unchanged", now in the masked column
                continue
            held.discard(spec.mask)
        elif isinstance(spec, CastField) and spec.cast in held and spec.to is not CastType.STRING:
            raise _unconvertible(label, spec.cast)
        elif isinstance(spec, ConvertTimestamp) and spec.timestamp in held:
            raise _unconvertible(label, spec.timestamp)
        elif isinstance(spec, ComputeField):
            read = sorted(expression_names(spec.expression) & held)
            if read:
                if _string_type(spec.type):
                    out[spec.compute] = placeholder
                    held.add(spec.compute)
                    continue
                raise _unconvertible(label, read[0])
            held.discard(spec.compute)
        compiled.apply_step(index, out, meta)
    return out


def _string_type(declared: str) -> bool:
    avro: Any = avro_type(declared)
    return bool(avro == "string" or avro == ["null", "string"])


def _unconvertible(label: str, name: str) -> TransformFailedError:
    return TransformFailedError(
        f"{label} field {name!r}: holds Debezium's unavailable-value placeholder (a column the "
        "change did not carry, e.g. an unchanged TOASTed value), which has no converted value; "
        "leave the column as it comes, or give the source table REPLICA IDENTITY FULL"
    )
