"""Per-record transforms (``topics[].transforms``): the output schema derived once per input
schema, then applied to every record of that schema (DESIGN.md §10).

:func:`compile_transforms` walks the specs (core/transforms/specs.py) over an Avro record
schema, checking each against the schema as the previous ones left it, and returns a
:class:`Compiled` with ``output_schema`` and ``apply(record, meta) -> record``. Transforms run
after decoding and before routing, event time and enrichment, so those read the transformed
fields.

Two kinds of failure, both ``transform_failed`` naming the transform as
``transforms[INDEX] (KIND)`` and the field:

- **Schema**: the transform cannot apply to the schema (renaming or casting a field that is
  not there, adding one that is, a plain number to a timestamp without ``epoch_unit``, an
  expression naming an unknown field). For ``format: json`` the schema is in the pipeline file,
  so this is a config error at ``topics[i].transforms[j]`` when the file is read. For Avro
  topics the schema comes with the first message of each schema id: :class:`TransformSchemaError`
  is raised then, and every message of that schema id goes to the bad-input policy with it
  (dead letters by default), like an ``unsupported_schema``. Dropping or renaming a field that
  routing reads is known without a schema: a config error.
- **Record**: one value cannot be transformed (a text that is not a number, a timestamp out of
  range, a function that raises, an expression that divides by zero):
  :class:`TransformFailedError` for that message only.

Only top-level fields are transformed; nested records pass through untouched. Output records
keep the input record's name and namespace, so ``schema_name`` routing is unchanged.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kbqe_dagster.core.errors import ConfigError, TransformFailedError, TransformSchemaError
from kbqe_dagster.core.formats.avro_names import define_before_use
from kbqe_dagster.core.record.routing import required_fields
from kbqe_dagster.core.transforms.kinds import COMPILERS, MessageMeta, Step, StepFailure
from kbqe_dagster.core.transforms.specs import MaskField, MaskMethod, kind_of, removed_fields

__all__ = [
    "Compiled",
    "MessageMeta",
    "compile_transforms",
    "field_values",
    "hmac_keys",
    "transform_config_problems",
]


@dataclass(frozen=True)
class Compiled:
    """The transforms of one topic over one input schema."""

    input_schema: Mapping[str, Any]
    output_schema: dict[str, Any]
    """The input record with each transform's change to its fields, same name and namespace."""
    steps: tuple[tuple[str, Step], ...]
    """``(label, step)`` per transform; the label is ``transforms[INDEX] (KIND)``."""

    def apply(self, record: Mapping[str, Any], meta: MessageMeta) -> dict[str, Any]:
        """The transformed record (a new dict; ``record`` is not changed). Raises
        :class:`TransformFailedError` naming the transform and the field."""
        out = dict(record)
        for label, step in self.steps:  # the per-record hot path: no call per step
            try:
                step(out, meta)
            except StepFailure as failure:
                raise TransformFailedError(f"{label} field {failure.field!r}: {failure}") from None
            except Exception as error:  # noqa: BLE001 - bad input must not stop the range
                raise TransformFailedError(f"{label}: {type(error).__name__}: {error}") from None
        return out

    def apply_step(self, index: int, record: dict[str, Any], meta: MessageMeta) -> None:
        """Apply transform ``index`` to ``record`` in place (core/transforms/keyed_rows.py
        steps through them itself); raises :class:`TransformFailedError` as :meth:`apply`."""
        label, step = self.steps[index]
        try:
            step(record, meta)
        except StepFailure as failure:
            raise TransformFailedError(f"{label} field {failure.field!r}: {failure}") from None
        except Exception as error:  # noqa: BLE001 - bad input must not stop the range
            raise TransformFailedError(f"{label}: {type(error).__name__}: {error}") from None


def compile_transforms(
    specs: Sequence[Any],
    input_schema: Mapping[str, Any],
    hmac_keys: Mapping[int, bytes] | None = None,
) -> Compiled:
    """Derive the output schema and the per-record steps of ``specs`` over ``input_schema``.
    ``hmac_keys`` holds the key of every hmac ``mask`` by its index (:func:`hmac_keys` reads
    them from the environment). Raises :class:`TransformSchemaError` naming the transform."""
    fields: list[dict[str, Any]] = copy.deepcopy(list(input_schema.get("fields", ())))
    steps = []
    for index, spec in enumerate(specs):
        label = f"transforms[{index}] ({kind_of(spec)})"
        try:
            step = COMPILERS[type(spec)](spec, fields, (hmac_keys or {}).get(index))
        except StepFailure as failure:
            name = input_schema.get("name", "?")
            error = TransformSchemaError(
                f"{label} field {failure.field!r}: {failure} (record schema {name})"
            )
            error.index = index
            raise error from None
        steps.append((label, step))
    output = {k: v for k, v in input_schema.items() if k != "fields"}
    output["fields"] = fields
    # A dropped or retyped field may have carried a named type a kept field uses (avro_names.py).
    return Compiled(input_schema, define_before_use(output, input_schema), tuple(steps))


def hmac_keys(specs: Sequence[Any], environ: Mapping[str, str], where: str) -> dict[int, bytes]:
    """The HMAC key of every hmac ``mask``, by index, from ``environ``. A variable that is
    unset is a :class:`ConfigError` naming the key path (``where`` is the list's, e.g.
    ``topics[0].transforms``) and the variable, never a value: the stage run stops rather than
    stage data unmasked or masked with a wrong key."""
    keys = {}
    for index, spec in enumerate(specs):
        if isinstance(spec, MaskField) and spec.method is MaskMethod.HMAC_SHA256:
            value = environ.get(spec.key_env or "")
            if not value:
                raise ConfigError(
                    f"{where}[{index}].key_env: environment variable "
                    f"{spec.key_env} is not set (or empty) where the stage runs"
                )
            keys[index] = value.encode()
    return keys


def transform_config_problems(
    specs: Sequence[Any], routing: Any, schema: Mapping[str, Any] | None
) -> list[tuple[str, str]]:
    """``([INDEX], problem)`` of what can be judged when the pipeline file is read: a transform
    that removes a field routing reads, and, when the schema is declared there (``format:
    json``), every schema rule of :func:`compile_transforms`."""
    problems = []
    removed = removed_fields(tuple(specs))
    for path in required_fields(routing):
        top = path.split(".")[0]
        if top in removed:
            kind = kind_of(specs[removed[top]])
            problems.append(
                (
                    f"[{removed[top]}]",
                    f"{kind} removes field {top!r}, which routing "
                    f"reads ({path}); route on another field or transform later",
                )
            )
    if schema is not None:
        placeholder_keys = dict.fromkeys(range(len(specs)), b"config-check")
        try:
            compile_transforms(specs, schema, placeholder_keys)
        except TransformSchemaError as error:
            text = str(error).split(" ", 2)[2]  # the key path says which transform
            assert error.index is not None  # compile_transforms sets it
            problems.append((f"[{error.index}]", f"{kind_of(specs[error.index])} {text}"))
    return problems


def field_values(record: Mapping[str, Any], paths: Sequence[str]) -> dict[str, Any]:
    """Dotted path → value (None when absent) of a decoded record: what routing and event
    time read."""
    out = {}
    for path in paths:
        node: Any = record
        for part in path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        out[path] = node
    return out
