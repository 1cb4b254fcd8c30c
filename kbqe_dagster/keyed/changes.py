"""How the change messages of one writer schema become flat changelog records (stage side).

A changelog record is the change columns (``_op``, ``_source_ts_ms``, ``_deleted``, see
core/keyed/contract.py) followed by the row fields. Avro encodes a record as its fields' encodings one
after the other, so the record's body is three small encoded values plus **a byte slice of the
message body**: the envelope's ``before``/``after`` row image, or the leading row fields of the
flattened form. The row is never decoded and re-encoded (DESIGN.md §5); the probe has already
validated the whole body and decoded the few fields read here (op, version, deleted).

One :class:`ChangeLayout` per writer schema, built by :func:`change_layout`:

- **Debezium envelope** (``before``, ``after``, ``source``, ``op``, ...): the row is ``after``,
  or ``before`` for a delete (``op = d``); the version is ``source.ts_ms``. A truncate
  (``op = t``: both images null) is a changelog row too, ``_deleted = true``, its row fields
  NULL where nullable and the type's zero value where Avro allows no null (a NOT NULL column:
  the key). The SQL never reads a truncate's row fields (keyed/merge_sql.py).
- **ExtractNewRecordState** (``__op``, ``__source_ts_ms``, ``__deleted`` after the row fields):
  the row is the fields before the first ``__`` field; the transform's fields must all come
  after the row's (it appends them), else the schema is refused.
- **plain keyed records** (``format: avro``): the row is the whole record; the version is the
  configured field (a long, or a timestamp as epoch milliseconds), ``_op`` is ``u`` (an
  upsert) or ``d`` when the configured ``delete_field`` is true.

A topic's ``transforms`` (core/transforms/keyed_rows.py) reshape the row: with them the row,
as the changelog would hold it otherwise, is decoded, transformed and encoded under the derived
row (:class:`RowTransform`), the one case besides semantic values where a row is re-encoded;
the change columns are still read from the message as it came.

A message that is valid Avro but not a row change (a message event, a delete without a before
image, a truncate in ExtractNewRecordState's form, which has no envelope to tell it apart) is
bad input with reason ``not_a_change``. The native kernel hands truncates back to this path
(kernel/src/changes.rs accepts only ``c``, ``r``, ``u`` and ``d``).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from io import BytesIO
from typing import Any

from fastavro import parse_schema, schemaless_reader, schemaless_writer

from kbqe_dagster.core.config.pipeline import TopicConfig
from kbqe_dagster.core.errors import (
    ConfigError,
    NotAChangeError,
    TransformFailedError,
    UnsupportedSchemaError,
)
from kbqe_dagster.core.formats.connect_types import SemanticMapping, semantic_mapping
from kbqe_dagster.core.keyed.contract import (
    CHANGE_COLUMNS,
    DELETED_COLUMN,
    OP_COLUMN,
    TRUNCATE_OP,
    VERSION_COLUMN,
    SourceFormat,
)
from kbqe_dagster.core.transforms.compiler import Compiled, MessageMeta, compile_transforms
from kbqe_dagster.core.transforms.keyed_rows import plain_types, read_fields, transform_row
from kbqe_dagster.keyed.avro_skip import (
    SkipCompiler,
    encode_long,
    full_name,
    read_long,
    record_skipper,
)

CHANGE_FIELDS = (
    {"name": OP_COLUMN, "type": "string"},
    {"name": VERSION_COLUMN, "type": "long"},
    {"name": DELETED_COLUMN, "type": "boolean"},
)
"""The change columns as Avro fields, in changelog order (before the row fields)."""

ROW_OPS = frozenset({"c", "r", "u"})
DELETE_OP = "d"
FLAT_PREFIX = "__"
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_OP_BYTES = {op: encode_long(1) + op.encode() for op in ("c", "r", "u", "d", TRUNCATE_OP)}
_BOOL = {False: b"\x00", True: b"\x01"}


def change_columns(op: str, version: int, deleted: bool) -> bytes:
    """The Avro encoding of the three change columns."""
    return _OP_BYTES[op] + encode_long(version) + _BOOL[deleted]


@dataclass(frozen=True)
class ChangeLayout:
    """The changelog body schema of one writer schema, and how to cut its messages."""

    schema: dict[str, Any]
    """The changelog record (change columns, then row fields), before enrichment."""
    wanted: tuple[str, ...]
    """Field paths the probe must decode for :meth:`body`."""
    row_fields: tuple[str, ...]
    semantic: SemanticMapping | None = None
    """The row's Kafka Connect semantic types (core/formats/connect_types.py) when some of
    its values must be re-encoded; None when the row's bytes are staged as sliced."""
    transform: RowTransform | None = None
    """The topic's transforms over the row (core/transforms/keyed_rows.py); None without
    transforms. With them the row is decoded, transformed and encoded again, and the native
    kernel leaves the topic to this path (keyed/native_stage.py)."""

    def body(
        self, body: bytes, fields: Mapping[str, Any], meta: MessageMeta | None = None
    ) -> bytes:
        """The changelog record of a change message (``meta``: the message's coordinates,
        key and headers, which an ``add`` transform may read)."""
        raise NotImplementedError

    def row_image(self, row: bytes, meta: MessageMeta | None) -> bytes:
        """The row image ``row`` in the changelog's form: :meth:`converted`, then transformed
        when the topic has transforms."""
        staged = self.converted(row)
        if self.transform is None:
            return staged
        assert meta is not None, "a transformed row needs its message's meta"
        return self.transform.apply(staged, meta)

    @cached_property
    def _row_codecs(self) -> tuple[Any, Any]:
        assert self.semantic is not None
        return parse_schema(self.semantic.writer), parse_schema(self.semantic.schema)

    def converted(self, row: bytes) -> bytes:
        """The row image ``row`` (bytes of the writer's row record) in the changelog's form:
        as is, or decoded, its semantic values converted, and encoded again."""
        if self.semantic is None:
            return row
        writer, staged = self._row_codecs
        out = BytesIO()
        schemaless_writer(
            out, staged, self.semantic.convert(schemaless_reader(BytesIO(row), writer, None))
        )
        return out.getvalue()

    @property
    def rewrites_values(self) -> bool:
        """Whether :meth:`body` re-encodes rows (:meth:`kernel_rewrites` says how the native
        kernel does the same)."""
        return self.semantic is not None

    def kernel_rewrites(self) -> tuple[tuple[int, str], ...]:
        """The row fields :meth:`converted` re-encodes, for the native kernel (kernel/src/
        changes.rs): (index among the row's fields, kind of kernel/src/connect_types.rs), in
        field order; empty when rows are sliced. ValueError when one is not the kernel's (the
        schema then stays on the Python path)."""
        return () if self.semantic is None else self.semantic.kernel_rewrites()

    def cut(self) -> tuple[str, tuple[int, ...], tuple[str | None, ...]]:
        """How :meth:`body` cuts, for the native kernel (kernel/src/changes.rs, which does the
        same and hands back what it is not sure of): the layout's kind, the top-level field
        indexes it cuts at, and the field paths of the values it reads, in the kernel's order."""
        raise NotImplementedError


@dataclass(frozen=True)
class RowTransform:
    """A keyed topic's transforms compiled over one row record (the changelog's row as it
    would be without them): decode, transform (core/transforms/keyed_rows.py, which keeps
    Debezium's unavailable value), encode under the derived row."""

    compiled: Compiled
    specs: tuple[Any, ...]
    placeholder: str | None
    """The unavailable-value placeholder in effect (``KeyedConfig.placeholder``), or None."""

    @cached_property
    def _codecs(self) -> tuple[Any, Any]:
        # The fields no transform reads stay in their Avro form (keyed_rows.plain_types): the
        # same bytes out, whatever Python's types can hold (as the native kernel copies them).
        read = read_fields(self.specs)
        return (
            parse_schema(plain_types(self.compiled.input_schema, read), _write_hint=False),
            parse_schema(plain_types(self.compiled.output_schema, read), _write_hint=False),
        )

    def apply(self, row: bytes, meta: MessageMeta) -> bytes:
        """The transformed row's bytes; :class:`TransformFailedError` names the transform."""
        reader, writer = self._codecs
        try:
            record = schemaless_reader(BytesIO(row), reader, None)
        except Exception as error:  # noqa: BLE001 - a valid encoding Python cannot hold
            # (a date past year 9999): the row cannot be transformed, the message is bad input.
            raise TransformFailedError(
                f"the row does not decode for its transforms: {type(error).__name__}: {error}"
            ) from None
        record = transform_row(self.compiled, self.specs, record, meta, self.placeholder)
        out = BytesIO()
        try:
            schemaless_writer(out, writer, record)
        except Exception as error:  # noqa: BLE001 - fastavro raises several types on a misfit
            raise TransformFailedError(
                f"transforms output does not fit the derived row: {error}"
            ) from None
        return out.getvalue()


def row_transform(
    row: Mapping[str, Any], topic: TopicConfig, hmac_keys: Mapping[int, bytes] | None
) -> RowTransform | None:
    """The topic's transforms over the staged row record ``row`` (None without transforms);
    :class:`TransformSchemaError` (bad input for the schema's messages) when they cannot apply."""
    if not topic.transforms:
        return None
    assert topic.keyed is not None
    compiled = compile_transforms(topic.transforms, row, hmac_keys)
    return RowTransform(compiled, topic.transforms, topic.keyed.placeholder(topic.format))


def _staged_row(semantic: SemanticMapping, transform: RowTransform | None) -> dict[str, Any]:
    """The row record the changelog holds: transformed, or the semantic mapping's."""
    return semantic.schema if transform is None else transform.compiled.output_schema


def change_layout(
    writer_schema: Mapping[str, Any],
    topic: TopicConfig,
    hmac_keys: Mapping[int, bytes] | None = None,
) -> ChangeLayout:
    """The layout of ``writer_schema``'s messages on keyed ``topic``. Raises
    :class:`UnsupportedSchemaError` (bad input: the messages of this schema are dead-lettered
    with the reason) when the schema has no layout or :class:`TransformSchemaError` when the
    topic's transforms cannot apply to its row, and :class:`ConfigError` when the topic's
    ``keyed:`` names a field the schema lacks (the stage run fails, naming the key path).
    ``hmac_keys``: the keys of the topic's hmac masks by index (core/transforms/compiler.py
    ``hmac_keys``)."""
    if not isinstance(writer_schema, Mapping) or writer_schema.get("type") != "record":
        raise UnsupportedSchemaError("a keyed topic's values must be Avro records")
    names = [f["name"] for f in writer_schema["fields"]]
    if topic.format is SourceFormat.DEBEZIUM:
        if {"before", "after", "op", "source"} <= set(names):
            layout: ChangeLayout = _EnvelopeLayout.of(writer_schema, topic, hmac_keys)
        elif any(name.startswith(FLAT_PREFIX) for name in names):
            layout = _FlatLayout.of(writer_schema, topic, hmac_keys)
        else:
            raise UnsupportedSchemaError(
                f"{full_name(writer_schema, None)} is neither a Debezium envelope (before, after, "
                "source, op) nor ExtractNewRecordState's form (__op, __source_ts_ms, __deleted)"
            )
    else:
        layout = _PlainLayout.of(writer_schema, topic, hmac_keys)
    columns = [f["name"] for f in layout.schema["fields"][len(CHANGE_FIELDS) :]]
    clash = {c.lower() for c in CHANGE_COLUMNS} & {
        f.lower() for f in (*layout.row_fields, *columns)
    }
    if clash:
        raise UnsupportedSchemaError(f"row field(s) {sorted(clash)} collide with change columns")
    _check_key(layout, topic)
    return layout


def change_paths(topic: TopicConfig) -> tuple[str, ...]:
    """Every field path a layout of keyed ``topic``'s messages may read (:meth:`ChangeLayout.cut`),
    whichever writer schema comes: the native kernel reads them all."""
    if topic.format is SourceFormat.DEBEZIUM:
        return ("op", "source.ts_ms", "__op", "__source_ts_ms", "__deleted")
    assert topic.keyed is not None
    return tuple(path for path in (topic.keyed.version, topic.keyed.delete_field) if path)


def _check_key(layout: ChangeLayout, topic: TopicConfig) -> None:
    assert topic.keyed is not None
    missing = [k for k in topic.keyed.key if k not in layout.row_fields]
    if missing:
        raise ConfigError(
            f"topics[{topic.name}].keyed.key: {missing} not among the row fields "
            f"{list(layout.row_fields)} of {layout.schema.get('name')}"
        )


def _semantic(row: Mapping[str, Any], topic: TopicConfig) -> SemanticMapping:
    """The row's semantic-type mapping, or the row as sent with ``semantic_types: false``."""
    assert topic.keyed is not None
    if not topic.keyed.semantic_types:
        return SemanticMapping(dict(row), dict(row))
    return semantic_mapping(row)


def _changelog_schema(row: Mapping[str, Any], fields: list[Any], namespace: str | None) -> dict:
    schema = {k: v for k, v in copy.deepcopy(dict(row)).items() if k != "fields"}
    schema["name"] = full_name(row, namespace)
    schema.pop("namespace", None)
    schema["fields"] = [dict(f) for f in CHANGE_FIELDS] + copy.deepcopy(fields)
    return schema


def _checked_types(types: Sequence[Any], namespace: str | None) -> SkipCompiler:
    """A compiler that has seen ``types`` as closures: every name they define is known (the
    row record an image refers to by name) and an unknown reference refused, as the generated
    skippers of :func:`_skippers` would, at ~2 % of their cost (bench envelope: 12 µs)."""
    compiler = SkipCompiler(namespace)
    for avro in types:
        compiler.compile(avro)
    return compiler


def _skippers(types: Sequence[Any], namespace: str | None) -> tuple[Any, ...]:
    """The generated skippers of ``types`` (one per top-level field :meth:`ChangeLayout.body`
    walks). Generating and compiling their Python is most of a layout's cost (~0.75 ms of
    ~0.9 ms for the bench envelope, every range), and only the Python path's ``body`` needs
    them: the layouts compile them on its first call, and a range the native kernel stages
    whole never does."""
    compiler = SkipCompiler(namespace)
    return tuple(record_skipper(avro, compiler) for avro in types)


# --- the Debezium envelope ---------------------------------------------------------------------
@dataclass(frozen=True)
class _EnvelopeLayout(ChangeLayout):
    skipped: tuple[Any, ...] = ()
    """The types of the envelope's fields up to the later image, which :meth:`body` skips."""
    namespace: str | None = None
    before_index: int = 0
    after_index: int = 1
    empty_row: bytes = b""
    """A truncate's row: every field NULL, or its type's zero value where it cannot be."""

    @cached_property
    def skips(self) -> tuple[Any, ...]:
        return _skippers(self.skipped, self.namespace)

    @classmethod
    def of(
        cls, envelope: Mapping[str, Any], topic: TopicConfig, hmac_keys: Mapping[int, bytes] | None
    ) -> _EnvelopeLayout:
        namespace = envelope.get("namespace") or full_name(envelope, None).rpartition(".")[0]
        fields = envelope["fields"]
        index = {f["name"]: i for i, f in enumerate(fields)}
        last = max(index["before"], index["after"])
        skipped = tuple(f["type"] for f in fields[: last + 1])
        compiler = _checked_types(skipped, namespace or None)
        row = _row_record(
            fields[index["before"]]["type"], fields[index["after"]]["type"], compiler, namespace
        )
        semantic = _semantic(row, topic)
        transform = row_transform(semantic.schema, topic, hmac_keys)
        staged = _staged_row(semantic, transform)
        if transform is not None:  # a truncate's row is the derived row's NULLs and zeros
            row, compiler = staged, _checked_types((staged,), namespace or None)
        return cls(
            schema=_changelog_schema(semantic.schema, staged["fields"], namespace),
            wanted=("op", "source.ts_ms"),
            row_fields=tuple(f["name"] for f in semantic.writer["fields"]),
            semantic=semantic if semantic.rewrites_values else None,
            transform=transform,
            skipped=skipped,
            namespace=namespace or None,
            before_index=index["before"],
            after_index=index["after"],
            empty_row=b"".join(
                _empty_value(f["type"], compiler, namespace or None) for f in row["fields"]
            ),
        )

    def cut(self) -> tuple[str, tuple[int, ...], tuple[str | None, ...]]:
        return "envelope", (self.before_index, self.after_index), ("op", "source.ts_ms")

    def body(
        self, body: bytes, fields: Mapping[str, Any], meta: MessageMeta | None = None
    ) -> bytes:
        op = fields.get("op")
        version = fields.get("source.ts_ms")
        if op not in ROW_OPS and op != DELETE_OP and op != TRUNCATE_OP:
            raise NotAChangeError(f"op {op!r} is not a row change (c, r, u, d or t)")
        if version is None:
            raise NotAChangeError("source.ts_ms is null: the change has no version")
        if op == TRUNCATE_OP:
            return change_columns(op, version, True) + self.empty_row
        wanted = self.before_index if op == DELETE_OP else self.after_index
        pos = 0
        for i, skip in enumerate(self.skips):
            if i == wanted:
                branch, start = read_long(body, pos)
                end = skip(body, pos)
                if start == end:  # the null branch
                    image = "before" if op == DELETE_OP else "after"
                    raise NotAChangeError(f"op {op!r} without a {image} image")
                row = self.row_image(body[start:end], meta)
                return change_columns(op, version, op == DELETE_OP) + row
            pos = skip(body, pos)
        raise AssertionError("unreachable: the wanted field is among the skips")


_ZERO = {
    "boolean": b"\x00",
    "int": b"\x00",
    "long": b"\x00",
    "float": bytes(4),
    "double": bytes(8),
    "bytes": b"\x00",
    "string": b"\x00",
    "null": b"",
}


def _empty_value(avro: Any, compiler: SkipCompiler, namespace: str | None) -> bytes:
    """The encoding of NULL in ``avro`` (a union with null: its null branch), else of the
    type's zero value (0, "", false, empty array/map, the first symbol, zero bytes)."""
    if isinstance(avro, list):
        if "null" in avro:
            return encode_long(avro.index("null"))
        return encode_long(0) + _empty_value(avro[0], compiler, namespace)
    if isinstance(avro, str):
        if avro in _ZERO:
            return _ZERO[avro]
        for candidate in (f"{namespace}.{avro}" if namespace and "." not in avro else avro, avro):
            if candidate in compiler.named:
                return _empty_value(compiler.named[candidate], compiler, namespace)
        raise UnsupportedSchemaError(f"unknown type {avro!r} in the row record")
    kind = avro["type"]
    if kind in ("record", "error"):
        inner = full_name(avro, namespace).rpartition(".")[0] or None
        return b"".join(_empty_value(f["type"], compiler, inner) for f in avro["fields"])
    if kind == "fixed":
        return bytes(int(avro["size"]))
    if kind in ("enum", "array", "map"):
        return b"\x00"
    return _empty_value(kind, compiler, namespace)


def _row_record(before: Any, after: Any, compiler: SkipCompiler, namespace: str | None) -> dict:
    """The row record: the record branch of ``before``/``after`` (defined in the first)."""
    for union in (before, after):
        for branch in union if isinstance(union, list) else [union]:
            if isinstance(branch, dict) and branch.get("type") == "record":
                return branch
    for union in (before, after):
        for branch in union if isinstance(union, list) else [union]:
            if isinstance(branch, str) and branch != "null":
                for candidate in (f"{namespace}.{branch}", branch):
                    if candidate in compiler.named:
                        return compiler.named[candidate]
    raise UnsupportedSchemaError("the envelope's before/after are not records")


# --- ExtractNewRecordState ---------------------------------------------------------------------
@dataclass(frozen=True)
class _FlatLayout(ChangeLayout):
    skipped: tuple[Any, ...] = ()
    """The leading row fields as one record, which :meth:`body` skips."""
    namespace: str | None = None

    @cached_property
    def skips(self) -> tuple[Any, ...]:
        return _skippers(self.skipped, self.namespace)

    @classmethod
    def of(
        cls, record: Mapping[str, Any], topic: TopicConfig, hmac_keys: Mapping[int, bytes] | None
    ) -> _FlatLayout:
        fields = record["fields"]
        names = [f["name"] for f in fields]
        first = next(i for i, n in enumerate(names) if n.startswith(FLAT_PREFIX))
        late = [n for n in names[first:] if not n.startswith(FLAT_PREFIX)]
        if late:
            raise UnsupportedSchemaError(
                f"row field(s) {late} follow the transform's __ fields; ExtractNewRecordState "
                "appends its fields after the row's"
            )
        if "__source_ts_ms" not in names:
            raise UnsupportedSchemaError(
                "no __source_ts_ms field: configure ExtractNewRecordState with "
                "add.fields=op,source.ts_ms (the version of each change)"
            )
        namespace = record.get("namespace") or full_name(record, None).rpartition(".")[0]
        row_fields = fields[:first]
        row = {**record, "fields": row_fields}  # the leading row fields, skipped as one record
        _checked_types((row,), namespace or None)
        semantic = _semantic(row, topic)
        transform = row_transform(semantic.schema, topic, hmac_keys)
        return cls(
            schema=_changelog_schema(record, _staged_row(semantic, transform)["fields"], namespace),
            semantic=semantic if semantic.rewrites_values else None,
            transform=transform,
            wanted=("__op", "__source_ts_ms", "__deleted"),
            row_fields=tuple(names[:first]),
            skipped=(row,),
            namespace=namespace or None,
        )

    def cut(self) -> tuple[str, tuple[int, ...], tuple[str | None, ...]]:
        return "flat", (len(self.row_fields),), ("__op", "__source_ts_ms", "__deleted")

    def body(
        self, body: bytes, fields: Mapping[str, Any], meta: MessageMeta | None = None
    ) -> bytes:
        version = fields.get("__source_ts_ms")
        if version is None:
            raise NotAChangeError("__source_ts_ms is null: the change has no version")
        deleted = fields.get("__deleted") in (True, "true")
        op = fields.get("__op") or (DELETE_OP if deleted else "u")
        if op not in ROW_OPS and op != DELETE_OP:
            raise NotAChangeError(f"__op {op!r} is not a row change (c, r, u or d)")
        deleted = deleted or op == DELETE_OP
        pos = 0
        for skip in self.skips:
            pos = skip(body, pos)
        return change_columns(op, version, deleted) + self.row_image(body[:pos], meta)


# --- plain keyed records ----------------------------------------------------------------------
@dataclass(frozen=True)
class _PlainLayout(ChangeLayout):
    version_path: str = ""
    delete_path: str | None = None

    @classmethod
    def of(
        cls, record: Mapping[str, Any], topic: TopicConfig, hmac_keys: Mapping[int, bytes] | None
    ) -> _PlainLayout:
        keyed = topic.keyed
        assert keyed is not None and keyed.version
        where = f"topics[{topic.name}].keyed"
        check_field(
            record,
            keyed.version,
            f"{where}.version",
            is_orderable,
            "a long, an int or a timestamp-millis/micros",
        )
        if keyed.delete_field:
            check_field(
                record,
                keyed.delete_field,
                f"{where}.delete_field",
                lambda t: t == "boolean",
                "a boolean",
            )
        namespace = record.get("namespace")
        wanted = (keyed.version,) + ((keyed.delete_field,) if keyed.delete_field else ())
        semantic = _semantic(record, topic)
        transform = row_transform(semantic.schema, topic, hmac_keys)
        return cls(
            schema=_changelog_schema(record, _staged_row(semantic, transform)["fields"], namespace),
            semantic=semantic if semantic.rewrites_values else None,
            transform=transform,
            wanted=wanted,
            row_fields=tuple(f["name"] for f in record["fields"]),
            version_path=keyed.version,
            delete_path=keyed.delete_field,
        )

    def cut(self) -> tuple[str, tuple[int, ...], tuple[str | None, ...]]:
        return "plain", (), (self.version_path, self.delete_path)

    def body(
        self, body: bytes, fields: Mapping[str, Any], meta: MessageMeta | None = None
    ) -> bytes:
        value = fields.get(self.version_path)
        if value is None:
            raise NotAChangeError(f"{self.version_path} is null: the change has no version")
        version = (value - _EPOCH) // _MS if isinstance(value, datetime) else int(value)
        deleted = bool(self.delete_path and fields.get(self.delete_path))
        op = DELETE_OP if deleted else "u"
        return change_columns(op, version, deleted) + self.row_image(body, meta)


_MS = datetime.resolution * 1000


def _field_type(record: Mapping[str, Any], path: str) -> Any:
    node: Any = record
    for part in path.split("."):
        branches = node if isinstance(node, list) else [node]
        records = [b for b in branches if isinstance(b, dict) and b.get("type") == "record"]
        match = [f for r in records for f in r["fields"] if f["name"] == part]
        if not match:
            return None
        node = match[0]["type"]
    return node


def _simple_types(avro: Any) -> set[str]:
    """The non-null branch types, logical types by name (``timestamp-millis``)."""
    out = set()
    for branch in avro if isinstance(avro, list) else [avro]:
        if isinstance(branch, dict):
            out.add(branch.get("logicalType") or branch.get("type"))
        elif branch != "null":
            out.add(branch)
    return out


def is_orderable(kind: str) -> bool:
    return kind in ("long", "int", "timestamp-millis", "timestamp-micros")


def check_field(record: Mapping[str, Any], path: str, where: str, ok: Any, wanted: str) -> None:
    avro = _field_type(record, path)
    if avro is None:
        raise ConfigError(f"{where}: field {path!r} is not in {full_name(record, None)}")
    kinds = _simple_types(avro)
    if not kinds or not all(ok(k) for k in kinds):
        raise ConfigError(f"{where}: field {path!r} is {sorted(kinds)}, expected {wanted}")
