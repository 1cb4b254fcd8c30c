"""A regular expression per writer schema: the probe's fast path, matched at C speed.

Most records of a schema share a simple shape: short ASCII strings, small counts, small
integers. Over such bodies Avro's binary encoding is a regular language, because every
length, count and index is a single varint byte that selects one alternative:

* a string of ``n`` < 64 ASCII bytes is ``chr(2n)`` followed by ``n`` bytes ``[\\x00-\\x7f]``
  (ASCII is valid UTF-8, so validation is part of the match);
* a union or enum index ``i`` < 64 is the byte ``2i``; an array block of ``k`` < 64 items is
  ``chr(2k)`` then ``k`` items; a block count of 0 ends the array;
* an ``int`` of at most 4 varint bytes (below 2**27) and a ``long`` of at most 9 bytes (below
  2**62) can never be out of range; a boolean is ``[\\x00\\x01]``; floats and fixed are ``.{n}``.

``re.fullmatch`` of that pattern against a body proves the body decodes to exactly its
length, without a Python bytecode per field. The pattern accepts a *subset* of valid bodies:
anything else (a long or non-ASCII string, a 65th union branch, a 5-byte int...) does not
match and falls back to the generated Python decoder, which is the authority. What a regular
expression cannot check — the range of a ``date`` or ``timestamp``, a ``uuid``'s syntax — is
captured in a group and checked by generated Python after the match, as are the wanted
fields, decoded from their group's start by the Python decoder's functions.

Schemas the pattern cannot express get no fast path: recursive types, and logical types that
need a check inside arrays or maps (a group keeps only the last repetition).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kbqe_dagster.staging.probe.codegen import PythonGenerator, Want, logical_key
from kbqe_dagster.staging.probe.runtime import UNCHECKED, UUID_PATTERN

# Above this the pattern's compilation time and memory stop being worth it.
MAX_PATTERN_BYTES = 1_000_000
# An array/map block of k items repeats the item pattern k times in the alternation, and
# compiling the pattern costs about 2 ms per KiB here (``re`` caches it per process). 16 KiB
# of copies keeps a 16-field schema at ~80 ms and string arrays up to 12 items on the fast
# path; longer arrays take the exact decoder.
MAX_ITEM_COPIES_BYTES = 16_384


class NoFastPath(Exception):
    """The schema cannot be expressed as a pattern; the probe uses the Python decoder only."""


def _x(byte: int) -> bytes:
    return b"\\x%02x" % byte


def _lengths(content: bytes) -> bytes:
    """Alternation over single-byte lengths 0..63 of ``content`` bytes each."""
    alternatives = [_x(0)] + [
        _x(2 * n) + content + (b"{%d}" % n if n > 1 else b"") for n in range(1, 64)
    ]
    return b"(?:" + b"|".join(alternatives) + b")"


_ASCII_STRING = _lengths(rb"[\x00-\x7f]")
_ANY_BYTES = _lengths(b".")
_PRIMITIVE_PATTERNS = {
    "null": b"",
    "boolean": rb"[\x00\x01]",
    "int": rb"[\x80-\xff]{0,3}+[\x00-\x7f]",
    "long": rb"[\x80-\xff]{0,8}+[\x00-\x7f]",
    "float": b".{4}",
    "double": b".{8}",
    "bytes": _ANY_BYTES,
    "string": _ASCII_STRING,
}


# Logical values whose range fits a pattern: varints short enough to be in range for sure
# (longer ones fall back to the exact decoder, which checks the real range). Dates: up to 2
# bytes, or 3 with a last byte below 0x57 (|days| < 712,704: years 18–3921). Timestamps in
# ms: up to 6 bytes, or 7 with a last byte below 0x1c (|ms| < 6.1e13: years 38–3901). In µs:
# up to 8 bytes (|µs| < 3.6e16: years 829–3111). UUID strings: the canonical 36 characters.
_IN_RANGE_PATTERNS = {
    "int-date": rb"(?:[\x80-\xff]{0,1}+[\x00-\x7f]|[\x80-\xff]{2}[\x00-\x56])",
    "long-timestamp-millis": rb"(?:[\x80-\xff]{0,5}+[\x00-\x7f]|[\x80-\xff]{6}[\x00-\x1b])",
    "long-local-timestamp-millis": rb"(?:[\x80-\xff]{0,5}+[\x00-\x7f]|[\x80-\xff]{6}[\x00-\x1b])",
    "long-timestamp-micros": rb"[\x80-\xff]{0,7}+[\x00-\x7f]",
    "long-local-timestamp-micros": rb"[\x80-\xff]{0,7}+[\x00-\x7f]",
    "string-uuid": rb"\x48" + UUID_PATTERN.encode(),
}


@dataclass
class FastPath:
    """The compiled pattern and the group bookkeeping the post-match code needs."""

    pattern: re.Pattern[bytes]
    checks: list[tuple[int, Any]] = field(default_factory=list)
    """(group index, schema node) of logical values to check."""
    reads: dict[str, list[tuple[int, Any]]] = field(default_factory=dict)
    """wanted variable → (group index, schema node) of each place it can be in."""


class RegexBuilder:
    """Builds the fast-path pattern for one schema, sharing the Python generator's view of
    the schema (name resolution, logical keys)."""

    def __init__(self, gen: PythonGenerator) -> None:
        self.gen = gen
        self._stack: list[str] = []
        self._groups = 0
        self._checks: list[tuple[str, Any]] = []
        self._reads: dict[str, list[tuple[str, Any]]] = {}

    def build(self, top: Any, want: Want) -> FastPath:
        source = self.pattern(top, want, repeated=False)
        if len(source) > MAX_PATTERN_BYTES:
            raise NoFastPath(f"pattern of {len(source)} bytes")
        compiled = re.compile(source, re.DOTALL)
        index = compiled.groupindex
        return FastPath(
            compiled,
            [(index[name], node) for name, node in self._checks],
            {
                var: [(index[name], node) for name, node in sites]
                for var, sites in self._reads.items()
            },
        )

    def group(self, prefix: str) -> str:
        self._groups += 1
        return f"{prefix}{self._groups}"

    def pattern(self, t: Any, want: Want | None, repeated: bool) -> bytes:
        gen = self.gen
        if want is not None and want.var:
            name = self.group("w")
            self._reads.setdefault(want.var, []).append((name, t))
            inner = self.pattern(t, Want(None, want.children) if want.children else None, repeated)
            return b"(?P<%s>%s)" % (name.encode(), inner)
        if isinstance(t, str) and t not in _PRIMITIVE_PATTERNS and t in self._stack:
            raise NoFastPath(f"recursive type {t}")
        t = gen.resolve(t)
        kind = gen.kind(t)
        key = logical_key(t)
        if key in _IN_RANGE_PATTERNS:
            return _IN_RANGE_PATTERNS[key]
        if key is not None and key not in UNCHECKED:
            if repeated:
                raise NoFastPath(f"{key} value inside an array or map")
            name = self.group("c")
            self._checks.append((name, t))
            return b"(?P<%s>%s)" % (name.encode(), self.plain(t, kind, None, repeated))
        return self.plain(t, kind, want, repeated)

    def plain(self, t: Any, kind: str, want: Want | None, repeated: bool) -> bytes:
        if kind in _PRIMITIVE_PATTERNS:
            return _PRIMITIVE_PATTERNS[kind]
        if kind == "fixed":
            size = int(t["size"])
            return b".{%d}" % size if size else b""
        if kind == "enum":
            count = min(len(t["symbols"]), 64)
            return b"[" + b"".join(_x(2 * i) for i in range(count)) + b"]"
        if kind == "union":
            branches = []
            for number, branch in enumerate(t[:64]):
                is_record = self.gen.kind(self.gen.resolve(branch)) == "record"
                inner = self.pattern(branch, want if is_record else None, repeated)
                branches.append(_x(2 * number) + (b"(?:" + inner + b")" if inner else b""))
            return b"(?:" + b"|".join(branches) + b")"
        if kind in ("array", "map"):
            item = (
                self.pattern(t["items"], None, True)
                if kind == "array"
                else (_ASCII_STRING + self.pattern(t["values"], None, True))
            )
            return self.blocks(item)
        # record
        if t["name"] in self._stack:
            raise NoFastPath(f"recursive type {t['name']}")
        self._stack.append(t["name"])
        children = want.children if want is not None else {}
        parts = [self.pattern(f["type"], children.get(f["name"]), repeated) for f in t["fields"]]
        self._stack.pop()
        return b"".join(parts)

    @staticmethod
    def blocks(item: bytes) -> bytes:
        """Blocks of 1..k items (k < 64, bounded by the pattern size), then the 0 count."""
        copies = max(1, min(63, MAX_ITEM_COPIES_BYTES // max(1, len(item))))
        group = b"(?:" + item + b")"
        alternatives = [
            _x(2 * k) + group + (b"{%d}" % k if k > 1 else b"") for k in range(1, copies + 1)
        ]
        return b"(?:(?:" + b"|".join(alternatives) + rb")*+\x00)"
