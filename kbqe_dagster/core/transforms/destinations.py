"""One message into several tables (``topics[].destinations``, DESIGN.md §10): each
destination has its own routing, its own per-record transforms and its own projection (the
fields kept), like nrtkudu's one decoder feeding several encoders::

    topics:
      - name: fix.executions
        transforms: [...]                  # optional: applied once, before every destination
        destinations:                      # replaces the topic's own `routing:`
          - routing: {mode: static, dataset: fix, table: executions}
          - routing: {mode: static, dataset: fix, table: fills_by_symbol}
            transforms: [...]              # optional: this destination's own, after the topic's
            fields: [symbol, last_qty, last_px, transact_time]   # optional projection
            schema_names: [fix.ExecutionReport]   # optional: only records of these schemas
            when: 'exec_type == "F"'              # optional: only records where this holds

Per message and destination, in order: the topic's ``transforms``; whether the destination
takes the record (``schema_names``, decided once per schema; ``when``, per record, on the
record as the topic's transforms left it); the destination's ``transforms``; routing and
event time read that record; the projection keeps only ``fields`` (in that order) and the
result is staged. So a projected table needs to keep
neither its routing fields nor its event-time field; its rows still carry the event date and
the Kafka coordinates (enrichment). Everything about the schema (transforms, projection) is
derived once per input schema (:func:`compile_destination`); each destination's files carry
the declared-schema id of their own output schema (core/formats/source_format.py).

Rules (config errors at their key paths, all reported together):

- ``destinations`` and the topic's ``routing`` are mutually exclusive: each destination routes.
- A keyed topic takes no ``destinations`` (its one destination is a changelog, a current-state
  table and a history); ``topic_patterns`` take none either (list the topic under ``topics``).
- Two destinations of one topic may not have the same static table; a message that two
  non-static routes send to the same table is ``unroutable`` (its rows would be doubled).
- A message that no destination takes (``schema_names``, ``when``) is ``unroutable``: it is
  never dropped silently.
- Every static destination table is implicitly allowed, like a topic's static route.

**All or nothing per message.** Every destination of a message is built (transformed,
routed, dated, encoded) before any is appended; if one fails, the whole message goes to the
topic's bad-input policy once, its error naming the destination (``destinations[1]
(fix.fills_by_symbol): ...``), and nothing of it is staged anywhere. So the loaded tables
hold exactly one row per message per destination that takes it, or the message is in the
dead letters.
The range commit already covers every file of a range atomically (core/protocol/commit.py).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from simpleeval import EvalWithCompoundTypes, InvalidExpression

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.errors import TransformFailedError, TransformSchemaError
from kbqe_dagster.core.formats.avro_names import define_before_use, record_full_name
from kbqe_dagster.core.record.routing import RoutingConfig
from kbqe_dagster.core.transforms.compiler import (
    Compiled,
    MessageMeta,
    compile_transforms,
    transform_config_problems,
)
from kbqe_dagster.core.transforms.kinds import FUNCTIONS
from kbqe_dagster.core.transforms.specs import (
    FIELD_NAME_RE,
    TransformSpec,
    expression_names,
    kind_of,
    read_expression,
    read_transforms,
)

__all__ = [
    "CompiledDestination",
    "DestinationConfig",
    "compile_destination",
    "destination_config_problems",
    "read_destinations",
]


@dataclass(frozen=True)
class DestinationConfig:
    """One destination of a topic with ``destinations``."""

    routing: RoutingConfig
    """Where this destination's records go (RoutingConfig keys, core/record/routing.py); required."""
    fields: tuple[str, ...] | None = None
    """The top-level fields this destination's table keeps, in this order (a projection,
    applied after routing and event time read the record); None keeps every field."""
    transforms: tuple[TransformSpec, ...] = ()
    """This destination's own transforms (core/transforms/specs.py), applied after the topic's."""
    schema_names: tuple[str, ...] | None = None
    """Only records whose Avro schema full name (``namespace.Name``) is listed go here
    (decided once per schema, so a projection need not fit the others); None: every record."""
    when: str | None = None
    """Only records for which this expression is true go here: the ``compute`` transform's
    expression language, over the record as the topic's transforms left it (e.g.
    ``exec_type == "F"``); a result that is not true/false fails the message. None: every
    record."""

    def takes_schema(self, full_name: str | None) -> bool:
        return self.schema_names is None or full_name in self.schema_names

    def label(self, index: int) -> str:
        """``destinations[1] (fix.fills)``: how messages and dead letters name it."""
        static = self.routing.static_destination
        return f"destinations[{index}] ({static or f'routing {self.routing.mode.value}'})"


@dataclass(frozen=True)
class CompiledDestination:
    """One destination over one input schema: its transforms and projection, derived once."""

    transforms: Compiled | None
    keep: tuple[str, ...] | None
    output_schema: dict[str, Any]
    """What its files hold: the record after its transforms, projected to ``keep``."""
    condition: Callable[[Mapping[str, Any]], bool] | None = None
    """``when``, compiled: whether a record (as the topic's transforms left it) goes here."""

    def takes(self, record: Mapping[str, Any]) -> bool:
        """Whether ``record`` goes to this destination; raises
        :class:`~kbqe_dagster.core.errors.TransformFailedError` when ``when`` fails."""
        return self.condition is None or self.condition(record)

    def apply(self, record: Mapping[str, Any], meta: MessageMeta) -> Mapping[str, Any]:
        """The record routing and event time read (its transforms applied); raises
        :class:`~kbqe_dagster.core.errors.TransformFailedError`."""
        return record if self.transforms is None else self.transforms.apply(record, meta)

    def project(self, record: Mapping[str, Any]) -> Mapping[str, Any]:
        """The stored record. A field the record omits stays omitted, so the writer takes
        the schema's default as it would without a projection."""
        if self.keep is None:
            return record
        return {name: record[name] for name in self.keep if name in record}


def compile_destination(
    destination: DestinationConfig,
    input_schema: Mapping[str, Any],
    hmac_keys: Mapping[int, bytes] | None = None,
) -> CompiledDestination:
    """The destination over ``input_schema`` (the record after the topic's transforms).
    Raises :class:`TransformSchemaError` naming ``when``, ``transforms[INDEX]`` or
    ``fields[INDEX]`` (also as ``error.where``, the key path under the destination)."""
    condition = None
    if destination.when is not None:
        condition = compile_condition(destination.when, input_schema)
    compiled = None
    schema: Mapping[str, Any] = input_schema
    if destination.transforms:
        try:
            compiled = compile_transforms(destination.transforms, input_schema, hmac_keys)
        except TransformSchemaError as error:
            error.where = f"transforms[{error.index}]"
            raise
        schema = compiled.output_schema
    output = project_schema(schema, destination.fields) if destination.fields else dict(schema)
    return CompiledDestination(compiled, destination.fields, output, condition)


_CONSTANTS = {"True", "False", "None"}
_EVAL_ERRORS = (
    InvalidExpression,
    ArithmeticError,
    TypeError,
    ValueError,
    AttributeError,
    KeyError,
    IndexError,
)


def compile_condition(
    expression: str, input_schema: Mapping[str, Any]
) -> Callable[[Mapping[str, Any]], bool]:
    """``when`` over ``input_schema``: a field it reads must be in the schema
    (:class:`TransformSchemaError` otherwise); per record, a failure or a result that is not
    a boolean is :class:`TransformFailedError` (the message's bad input, never "false")."""
    known = {f["name"] for f in input_schema.get("fields", ())}
    unknown = expression_names(expression) - known - FUNCTIONS.keys() - _CONSTANTS
    if unknown:
        error = TransformSchemaError(
            f"when: the expression reads {', '.join(sorted(unknown))}, not in the record "
            f"schema {input_schema.get('name', '?')}"
        )
        error.where = "when"
        raise error
    evaluator = EvalWithCompoundTypes(functions=FUNCTIONS)
    parsed = evaluator.parse(expression.strip())

    def holds(record: Mapping[str, Any]) -> bool:
        evaluator.names = dict(record)
        try:
            value = evaluator.eval(expression, previously_parsed=parsed)
        except _EVAL_ERRORS as error:
            raise TransformFailedError(
                f"when {expression!r} failed: {type(error).__name__}: {error}"
            ) from None
        if not isinstance(value, bool):
            raise TransformFailedError(f"when {expression!r} gave {value!r}, not true or false")
        return value

    return holds


def project_schema(schema: Mapping[str, Any], keep: Sequence[str]) -> dict[str, Any]:
    """``schema`` with only the fields ``keep`` names, in that order, same record name (so
    ``schema_name`` routing is unchanged). A name not in the schema raises
    :class:`TransformSchemaError` (``error.index`` is its position in ``keep``)."""
    by_name = {f["name"]: f for f in schema.get("fields", ())}
    for index, name in enumerate(keep):
        if name not in by_name:
            error = TransformSchemaError(
                f"fields[{index}] {name!r}: not a field of the record here (record schema "
                f"{schema.get('name', '?')} has {', '.join(by_name) or 'no fields'})"
            )
            error.index = index
            error.where = f"fields[{index}]"
            raise error
    out = {k: v for k, v in schema.items() if k != "fields"}
    out["fields"] = [copy.deepcopy(by_name[name]) for name in keep]
    # A kept field may name a type a left-out (or later) field defined (avro_names.py).
    return define_before_use(out, schema)


# --- reading the pipeline file -----------------------------------------------------------------
def _field_name(value: Any) -> str:
    name = r.string(value)
    if not FIELD_NAME_RE.fullmatch(name):
        raise r.Invalid(f"{name!r} is not an Avro field name (a projection keeps top-level fields)")
    return name


_FIELDS = r.list_of(_field_name, non_empty=True)
_SPEC: dict[str, r.Converter] = {
    "routing": lambda v: v,
    "fields": _FIELDS,
    "transforms": lambda v: v,
    "schema_names": r.list_of(r.string, non_empty=True),
    "when": read_expression,
}


def read_destinations(
    raw: Any, path: str, problems: r.Problems,
    read_routing: Callable[[Any, str], RoutingConfig | None],
) -> tuple[DestinationConfig, ...] | None:  # fmt: skip
    """The ``destinations:`` list at ``path``; every problem is added with its key path.
    ``read_routing(raw, path)`` is the topics' own routing reader (config.py). Returns None
    when any destination is invalid."""
    if not isinstance(raw, list) or not raw:
        problems.add(path, f"expected a list of at least one destination, got {r.describe(raw)}")
        return None
    before = len(problems.items)
    out: list[DestinationConfig] = []
    tables: dict[Any, int] = {}
    for index, item in enumerate(raw):
        where = f"{path}[{index}]"
        section = r.read_section(item, where, _SPEC, problems, required=("routing",))
        routing = None
        if "routing" in section:
            routing = read_routing(section["routing"], f"{where}.routing")
        transforms = read_transforms(section.get("transforms"), f"{where}.transforms", problems)
        if routing is None:
            continue
        static = routing.static_destination
        if static is not None and static in tables:
            problems.add(
                f"{where}.routing",
                f"same table {static} as {path}[{tables[static]}]: "
                "one destination per table (each row once)",
            )
        elif static is not None:
            tables[static] = index
        out.append(
            DestinationConfig(
                routing,
                section.get("fields"),
                transforms,
                section.get("schema_names"),
                section.get("when"),
            )
        )
    return tuple(out) if len(problems.items) == before else None


def destination_config_problems(
    topic_transforms: Sequence[Any], destinations: Sequence[DestinationConfig],
    schema: Mapping[str, Any] | None,
) -> list[tuple[str, str]]:  # fmt: skip
    """``(subpath under the topic, problem)`` of what can be judged when the file is read: a
    transform (the topic's or the destination's) that removes a field the destination's
    routing reads, and, when the schema is declared (``format: json``), every schema rule of
    the transforms, ``when`` and the projection, and that some destination takes it."""
    problems: dict[tuple[str, str], None] = {}
    top = len(topic_transforms)
    for k, destination in enumerate(destinations):
        specs = tuple(topic_transforms) + destination.transforms
        for where, message in transform_config_problems(specs, destination.routing, None):
            index = int(where.strip("[]"))
            sub = (
                f"transforms[{index}]"
                if index < top
                else f"destinations[{k}].transforms[{index - top}]"
            )
            problems[(sub, message)] = None
    if schema is None:
        return list(problems)
    keys = dict.fromkeys(range(max([top] + [len(d.transforms) for d in destinations])), b"-")
    base: Mapping[str, Any] = schema
    if topic_transforms:
        try:
            base = compile_transforms(topic_transforms, schema, keys).output_schema
        except TransformSchemaError as error:
            problems[(f"transforms[{error.index}]", _problem(error, topic_transforms))] = None
            return list(problems)
    name = record_full_name(schema)
    taking = [k for k, d in enumerate(destinations) if d.takes_schema(name)]
    if not taking:
        problems[
            ("destinations", f"no destination takes the declared schema {name} (schema_names)")
        ] = None
    for k in taking:
        try:
            compile_destination(destinations[k], base, keys)
        except TransformSchemaError as error:
            where = getattr(error, "where", "")
            problems[
                (f"destinations[{k}].{where}", _problem(error, destinations[k].transforms))
            ] = None
    return list(problems)


def _problem(error: TransformSchemaError, specs: Sequence[Any]) -> str:
    """The message of a schema error without its own location (the key path says it)."""
    where = error.where
    if where == "when":
        return str(error).removeprefix("when: ")
    if where is not None and where.startswith("fields"):
        return str(error).split(" ", 1)[1]
    assert error.index is not None  # compile_transforms sets it
    return f"{kind_of(specs[error.index])} {str(error).split(' ', 2)[2]}"
