"""Skip over Avro values by schema: where a value's encoding ends, without decoding it.

The keyed stage path copies a Debezium envelope's ``before``/``after`` row image into the
changelog record as a byte slice (DESIGN.md §5: no decode and re-encode), so it needs the
offsets where each field's encoding starts and ends. Bodies reaching this code were already
validated by the record probe, so these functions trust the bytes.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

Skip = Callable[[bytes, int], int]
"""``skip(buf, pos)`` → the position just after the value encoded at ``pos``."""

_FIXED_WIDTH = {"null": 0, "boolean": 1, "float": 4, "double": 8}
_VARINT = frozenset({"int", "long", "enum"})
_LENGTH_PREFIXED = frozenset({"bytes", "string"})


def read_long(buf: bytes, pos: int) -> tuple[int, int]:
    """The zig-zag varint at ``pos`` and the position after it."""
    byte = buf[pos]
    pos += 1
    n = byte & 0x7F
    shift = 7
    while byte & 0x80:
        byte = buf[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        shift += 7
    return (n >> 1) ^ -(n & 1), pos


def encode_long(value: int) -> bytes:
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


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
        if count < 0:  # a block written with its byte size: jump over it
            size, pos = read_long(buf, pos)
            pos += size
            continue
        for _ in range(count):
            if pairs:
                pos = _skip_length_prefixed(buf, pos)
            pos = item(buf, pos)


def full_name(schema: Mapping[str, Any], namespace: str | None) -> str:
    name = schema["name"]
    if "." in name:
        return name
    own = schema.get("namespace", namespace)
    return f"{own}.{name}" if own else name
