"""Skip over Avro values by schema: where a value's encoding ends, without decoding it.

The keyed stage path copies a Debezium envelope's ``before``/``after`` row image into the
changelog record as a byte slice (DESIGN.md §5: no decode and re-encode), so it needs the
offsets where each field's encoding starts and ends. Bodies reaching this code were already
validated by the record probe, so these functions trust the bytes.

Two forms of the same rules: :class:`SkipCompiler` builds closures (any schema, recursive
ones included), and :func:`record_skipper` generates one flat Python function per record
schema — a few bytecodes per field instead of a call each, about 4× faster on a 16-field row
(``bench/bench_stage.py --debezium``) — falling back to the closures where a type recurses.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from kbqe_dagster.core.formats.avro_names import full_name
from kbqe_dagster.staging.avro_binary import encode_long
from kbqe_dagster.staging.avro_binary import varint as read_long

__all__ = ["SkipCompiler", "encode_long", "full_name", "read_long", "record_skipper"]

Skip = Callable[[bytes, int], int]
"""``skip(buf, pos)`` → the position just after the value encoded at ``pos``."""

_FIXED_WIDTH = {"null": 0, "boolean": 1, "float": 4, "double": 8}
_VARINT = frozenset({"int", "long", "enum"})
_LENGTH_PREFIXED = frozenset({"bytes", "string"})


def _skip_varint(buf: bytes, pos: int) -> int:
    while buf[pos] & 0x80:
        pos += 1
    return pos + 1


def _skip_length_prefixed(buf: bytes, pos: int) -> int:
    size, pos = read_long(buf, pos)
    return pos + size


class SkipCompiler:
    """Compiles skip functions for the types of one schema; named types are remembered as
    they are defined (Avro defines a name before it is referenced), so references resolve."""

    def __init__(self, namespace: str | None = None) -> None:
        self.named: dict[str, Any] = {}
        self._compiled: dict[str, Skip] = {}
        self.namespace = namespace

    def compile(self, schema: Any, namespace: str | None = None) -> Skip:
        namespace = namespace if namespace is not None else self.namespace
        if isinstance(schema, str):
            if schema in _FIXED_WIDTH:
                width = _FIXED_WIDTH[schema]
                return lambda buf, pos: pos + width
            if schema in _VARINT:
                return _skip_varint
            if schema in _LENGTH_PREFIXED:
                return _skip_length_prefixed
            return self._reference(schema, namespace)
        if isinstance(schema, list):
            branches = [self.compile(branch, namespace) for branch in schema]

            def skip_union(buf: bytes, pos: int) -> int:
                index, pos = read_long(buf, pos)
                return branches[index](buf, pos)

            return skip_union
        kind = schema["type"]
        if kind in ("record", "error", "enum", "fixed"):
            full = full_name(schema, namespace)
            self.named[full] = schema
            inner_namespace = full.rpartition(".")[0] or None
            if kind == "enum":
                skip = _skip_varint
            elif kind == "fixed":
                size = int(schema["size"])
                skip = lambda buf, pos: pos + size  # noqa: E731
            else:
                # Placeholder first: a recursive record refers to itself while compiling.
                fields: list[Skip] = []
                self._compiled[full] = lambda buf, pos: _skip_all(fields, buf, pos)
                fields.extend(self.compile(f["type"], inner_namespace) for f in schema["fields"])
                skip = self._compiled[full]
            self._compiled[full] = skip
            return skip
        if kind == "array":
            item = self.compile(schema["items"], namespace)
            return lambda buf, pos: _skip_blocks(item, buf, pos, pairs=False)
        if kind == "map":
            value = self.compile(schema["values"], namespace)
            return lambda buf, pos: _skip_blocks(value, buf, pos, pairs=True)
        return self.compile(kind, namespace)  # {"type": "long", "logicalType": ...}

    def _reference(self, name: str, namespace: str | None) -> Skip:
        for candidate in (f"{namespace}.{name}" if namespace and "." not in name else name, name):
            if candidate in self._compiled:
                compiled = self._compiled
                return lambda buf, pos: compiled[candidate](buf, pos)
        raise ValueError(f"unknown Avro type {name!r}")


def _skip_all(fields: list[Skip], buf: bytes, pos: int) -> int:
    for skip in fields:
        pos = skip(buf, pos)
    return pos


def _skip_blocks(item: Skip, buf: bytes, pos: int, *, pairs: bool) -> int:
    while True:
        count, pos = read_long(buf, pos)
        if count == 0:
            return pos
        if count < 0:  # a block written with its byte size: its items are still walked,
            _, pos = read_long(buf, pos)  # as the probe and fastavro read them (a lying
            count = -count  # size is not trusted)
        for _ in range(count):
            if pairs:
                pos = _skip_length_prefixed(buf, pos)
            pos = item(buf, pos)


# --- generated skippers ---------------------------------------------------------------------------
class _SkipGenerator:
    """Python source of one function ``skip(buf, pos) -> pos`` for a record schema."""

    def __init__(self, compiler: SkipCompiler) -> None:
        self.compiler = compiler
        self.lines: list[str] = []
        self.helpers: dict[str, Any] = {"read_long": read_long}
        self.counter = 0
        self.active: set[str] = set()

    def helper(self, skip: Skip) -> str:
        self.counter += 1
        name = f"_h{self.counter}"
        self.helpers[name] = skip
        return name

    def _defined(self, name: str, namespace: str | None) -> dict | None:
        for candidate in (f"{namespace}.{name}" if namespace and "." not in name else name, name):
            if candidate in self.compiler.named:
                return self.compiler.named[candidate]
        return None

    def _blocks(self, schema: dict, indent: int, namespace: str | None, *, pairs: bool) -> None:
        """Arrays and maps: blocks of ``count`` items until a zero count; a negative count
        carries the block's byte size, read and not trusted: the ``-count`` items are walked,
        as the record probe and fastavro read them (a size that lies would cut elsewhere)."""
        pad = "    " * indent
        self.counter += 1
        c, i = f"c{self.counter}", f"i{self.counter}"
        add = self.lines.append
        add(f"{pad}while True:")
        add(f"{pad}    {c}, pos = read_long(buf, pos)")
        add(f"{pad}    if {c} == 0: break")
        add(f"{pad}    if {c} < 0:")
        add(f"{pad}        {c} = -{c}; _, pos = read_long(buf, pos)")
        add(f"{pad}    for {i} in range({c}):")
        if pairs:
            self.emit("string", indent + 2, namespace)
        before = len(self.lines)
        self.emit(schema["values" if pairs else "items"], indent + 2, namespace)
        if len(self.lines) == before and not pairs:
            add(f"{pad}        pass")

    def emit(self, schema: Any, indent: int, namespace: str | None) -> None:
        pad = "    " * indent
        add = self.lines.append
        if isinstance(schema, dict) and schema.get("type") in ("record", "error"):
            full = full_name(schema, namespace)
            if full in self.active:  # recursion: call the closure form
                add(f"{pad}pos = {self.helper(self.compiler.compile(schema, namespace))}(buf, pos)")
                return
            # The closure form first: it registers every name the record defines, so that
            # references (and recursion) inside it resolve.
            self.compiler.compile(schema, namespace)
            self.active.add(full)
            inner = full.rpartition(".")[0] or None
            for f in schema["fields"]:
                self.emit(f["type"], indent, inner)
            self.active.discard(full)
            return
        if isinstance(schema, list):
            kind = "union"
        elif isinstance(schema, dict):
            kind = schema["type"]  # enum, fixed, array, map, or a logical type's primitive
            if kind in ("enum", "fixed"):
                self.compiler.compile(schema, namespace)  # remember the name
        else:
            kind = schema
        if kind in _FIXED_WIDTH:
            if _FIXED_WIDTH[kind]:
                add(f"{pad}pos += {_FIXED_WIDTH[kind]}")
        elif kind in _VARINT:
            add(f"{pad}while buf[pos] & 0x80: pos += 1")
            add(f"{pad}pos += 1")
        elif kind in _LENGTH_PREFIXED:
            add(f"{pad}n = buf[pos]")
            add(f"{pad}if n < 0x80: pos += 1 + (n >> 1)")
            add(f"{pad}else:")
            add(f"{pad}    n, pos = read_long(buf, pos); pos += n")
        elif kind == "fixed":
            add(f"{pad}pos += {int(schema['size'])}")
        elif kind == "union" and len(schema) < 64:  # every index fits in one varint byte
            # ... when written canonically; the probe reads an over-long one (0x80 0x00 is 0)
            # as a varint, so a body it accepted is cut here the same way.
            add(f"{pad}i = buf[pos]")
            add(f"{pad}if i < 0x80: pos += 1")
            add(f"{pad}else: i, pos = read_long(buf, pos); i <<= 1")
            for index, branch in enumerate(schema):
                add(f"{pad}{'if' if index == 0 else 'elif'} i == {index * 2}:")
                before = len(self.lines)
                self.emit(branch, indent + 1, namespace)
                if len(self.lines) == before:
                    add(f"{pad}    pass")
            add(f"{pad}else: raise ValueError('union index')")
        elif kind in ("array", "map"):
            self._blocks(schema, indent, namespace, pairs=kind == "map")
        elif isinstance(schema, str):  # a named reference: inlined, unless it recurses
            defined = self._defined(schema, namespace)
            if defined is not None and full_name(defined, namespace) not in self.active:
                self.emit(defined, indent, namespace)
            else:
                add(f"{pad}pos = {self.helper(self.compiler.compile(schema, namespace))}(buf, pos)")
        else:  # arrays and maps: the closure form
            add(f"{pad}pos = {self.helper(self.compiler.compile(schema, namespace))}(buf, pos)")


def record_skipper(
    schema: Mapping[str, Any], compiler: SkipCompiler | None = None, namespace: str | None = None
) -> Skip:
    """A generated skip function for ``schema`` (any type; records are flattened)."""
    compiler = compiler or SkipCompiler(namespace)
    gen = _SkipGenerator(compiler)
    gen.emit(schema, 1, namespace if namespace is not None else compiler.namespace)
    source = "def skip(buf, pos):\n" + "\n".join(gen.lines or ["    pass"]) + "\n    return pos\n"
    scope = dict(gen.helpers)
    exec(compile(source, "<avro skip>", "exec"), scope)  # noqa: S102 - our own generated code
    return scope["skip"]
