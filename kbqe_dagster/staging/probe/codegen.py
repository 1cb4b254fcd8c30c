"""Python source generated per writer schema: the probe's exact (authoritative) decoder.

For one schema this module writes straight-line Python that walks an Avro body with an
integer position: it skips what nobody asked for (still validating it) and decodes only the
wanted fields, exactly as fastavro would return them. Generated code beats an interpreter of
the schema because every type test, field name and symbol table is resolved once, at
generation time, instead of per record.

Validation is the Avro specification's, which is slightly stricter than fastavro where
fastavro accepts what no Avro writer produces (and BigQuery would reject or misread):
booleans other than 0/1, negative string/bytes lengths (fastavro then reads to the end),
negative or out-of-range enum and union indexes (fastavro wraps around), varints longer than
10 bytes or beyond the int32/int64 range. Everything fastavro rejects is rejected too,
including logical values its converters refuse (a ``date`` beyond year 9999, a bad ``uuid``).

Bounds are checked lazily: a read past the end raises ``IndexError`` (or ``struct.error``),
and a skip past the end leaves ``pos > len(buf)``, which the final length check catches.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from fastavro.read import LOGICAL_READERS

from kbqe_dagster.staging.probe.runtime import HELPERS, PRIMITIVES, RANGE_CHECKED, UNCHECKED

LOCAL_HELPERS = ", ".join(f"{name}={name}" for name in HELPERS if name != "MAX_ZW")


@dataclass
class Want:
    """What is wanted below one schema position: the whole value (``var``), and/or fields
    further down (``children``, by field name)."""

    var: str | None = None
    children: dict[str, Want] = field(default_factory=dict)


def logical_key(node: Any) -> str | None:
    """fastavro's key for a node's logical converter (``int-date``), if it has one."""
    if isinstance(node, dict) and "logicalType" in node and isinstance(node.get("type"), str):
        key = f"{node['type']}-{node['logicalType']}"
        if key in LOGICAL_READERS:
            return key
    return None


class PythonGenerator:
    """Generates decoder functions for one parsed schema (``fastavro.parse_schema`` output,
    its named types in ``named``) into one namespace."""

    def __init__(self, named: Mapping[str, Any]) -> None:
        self.named = named
        self.ns: dict[str, Any] = dict(HELPERS)
        self.sources: list[str] = []
        self._counter = 0
        self._stack: list[str] = []
        self._functions: dict[tuple[str, str], str] = {}
        self._pending: list[tuple[str, str, str]] = []

    # --- helpers -------------------------------------------------------------------------
    def fresh(self, prefix: str) -> str:
        self._counter += 1
        return f"{prefix}{self._counter}"

    def const(self, value: Any, prefix: str = "K") -> str:
        name = self.fresh(prefix)
        self.ns[name] = value
        return name

    def resolve(self, t: Any) -> Any:
        while isinstance(t, str) and t not in PRIMITIVES:
            t = self.named[t]
        if isinstance(t, dict) and isinstance(t.get("type"), (dict, list)):
            return self.resolve(t["type"])
        if isinstance(t, dict) and t["type"] not in PRIMITIVES and t["type"] not in _COMPLEX:
            return self.resolve(t["type"])
        return t

    def kind(self, t: Any) -> str:
        if isinstance(t, list):
            return "union"
        if isinstance(t, str):
            return t
        kind = t["type"]
        return "record" if kind in ("error", "request") else kind

    def min_size(self, t: Any, seen: frozenset[str] = frozenset()) -> int:
        """Fewest bytes any value of ``t`` encodes to (guards item counts against the body)."""
        t = self.resolve(t)
        kind = self.kind(t)
        if kind in ("null",):
            return 0
        if kind in ("boolean", "int", "long", "bytes", "string", "enum", "array", "map", "union"):
            return 1
        if kind == "float":
            return 4
        if kind == "double":
            return 8
        if kind == "fixed":
            return int(t["size"])
        if t["name"] in seen:
            return 0
        return sum(self.min_size(f["type"], seen | {t["name"]}) for f in t["fields"])

    # --- skip: advance past a value, validating it --------------------------------------
    def skip(self, t: Any, out: list[str], ind: str) -> None:
        t = self.resolve(t)
        kind = self.kind(t)
        key = logical_key(t)
        if key is not None and key not in UNCHECKED:
            value = self.fresh("x")
            self.read_raw(t, kind, value, out, ind)
            self.check_logical(t, key, value, out, ind)
            return
        if kind == "null":
            return
        if kind == "boolean":
            out += [
                f"{ind}if buf[pos] > 1: raise Invalid('boolean byte is not 0 or 1')",
                f"{ind}pos += 1",
            ]
        elif kind in ("int", "long"):
            out += [f"{ind}if buf[pos] < 128: pos += 1", f"{ind}else: pos = skip_{kind}(buf, pos)"]
        elif kind in ("float", "double", "fixed"):
            out.append(
                f"{ind}pos += {4 if kind == 'float' else 8 if kind == 'double' else int(t['size'])}"
            )
        elif kind == "bytes":
            self.length(out, ind)
            out.append(f"{ind}pos += n")
        elif kind == "string":
            self.length(out, ind)
            # The bound check keeps a truncated body from being reported as invalid UTF-8.
            out += [
                f"{ind}e = pos + n",
                f"{ind}if e > end: raise IndexError",
                f"{ind}buf[pos:e].decode()",
                f"{ind}pos = e",
            ]
        elif kind == "enum":
            self.index(out, ind, len(t["symbols"]), "enum")
        elif kind == "union":
            self.union(t, out, ind, lambda branch, ind2: self.skip(branch, out, ind2))
        elif kind == "array":
            self.skip_items(t["items"], out, ind)
        elif kind == "map":

            def entry(ind2: str) -> None:
                self.skip("string", out, ind2)
                self.skip(t["values"], out, ind2)

            self.blocks(["string", t["values"]], out, ind, entry)
        else:  # record
            if t["name"] in self._stack:
                out.append(f"{ind}pos = {self.function(t['name'], 'skip')}(buf, pos)")
                return
            self._stack.append(t["name"])
            for f in t["fields"]:
                self.skip(f["type"], out, ind)
            self._stack.pop()

    # --- read: decode a value as fastavro does ------------------------------------------
    def read(self, t: Any, var: str, out: list[str], ind: str) -> None:
        t = self.resolve(t)
        self.read_raw(t, self.kind(t), var, out, ind)
        key = logical_key(t)
        if key is not None:
            fn, schema = self.const(LOGICAL_READERS[key], "LR"), self.const(t, "S")
            out.append(f"{ind}{var} = {fn}({var}, {schema}, None)")

    def read_raw(self, t: Any, kind: str, var: str, out: list[str], ind: str) -> None:
        if kind == "null":
            out.append(f"{ind}{var} = None")
        elif kind == "boolean":
            out += [f"{ind}{var} = buf[pos]", f"{ind}if {var} > 1: raise Invalid('boolean byte is not 0 or 1')",
                    f"{ind}{var} = {var} == 1", f"{ind}pos += 1"]  # fmt: skip
        elif kind in ("int", "long"):
            slow = "int32" if kind == "int" else "varint"
            out += [f"{ind}{var} = buf[pos]",
                    f"{ind}if {var} < 128: {var} = ({var} >> 1) ^ -({var} & 1); pos += 1",
                    f"{ind}else: {var}, pos = {slow}(buf, pos)"]  # fmt: skip
        elif kind in ("float", "double"):
            out += [
                f"{ind}{var} = unpack_{kind[0]}(buf, pos)[0]",
                f"{ind}pos += {4 if kind == 'float' else 8}",
            ]
        elif kind == "fixed":
            size = int(t["size"])
            out += [f"{ind}{var} = buf[pos:pos + {size}]", f"{ind}pos += {size}"]
        elif kind in ("bytes", "string"):
            self.length(out, ind)
            out.append(f"{ind}e = pos + n")
            if kind == "string":
                out += [f"{ind}if e > end: raise IndexError", f"{ind}{var} = buf[pos:e].decode()"]
            else:
                out.append(f"{ind}{var} = buf[pos:e]")
            out.append(f"{ind}pos = e")
        elif kind == "enum":
            symbols = self.const(tuple(t["symbols"]), "SYM")
            self.index(out, ind, len(t["symbols"]), "enum")
            out.append(f"{ind}{var} = {symbols}[i]")
        elif kind == "union":
            self.union(t, out, ind, lambda branch, ind2: self.read(branch, var, out, ind2))
        elif kind == "array":
            item = self.fresh("x")
            out.append(f"{ind}{var} = []")

            def one(ind2: str) -> None:
                self.read(t["items"], item, out, ind2)
                out.append(f"{ind2}{var}.append({item})")

            self.blocks([t["items"]], out, ind, one)
        elif kind == "map":
            key, item = self.fresh("k"), self.fresh("x")
            out.append(f"{ind}{var} = {{}}")

            def entry(ind2: str) -> None:
                self.read("string", key, out, ind2)
                self.read(t["values"], item, out, ind2)
                out.append(f"{ind2}{var}[{key}] = {item}")

            self.blocks(["string", t["values"]], out, ind, entry)
        else:  # record
            if t["name"] in self._stack:
                out.append(f"{ind}{var}, pos = {self.function(t['name'], 'read')}(buf, pos)")
                return
            self._stack.append(t["name"])
            names = []
            for f in t["fields"]:
                names.append(self.fresh("f"))
                self.read(f["type"], names[-1], out, ind)
            self._stack.pop()
            pairs = ", ".join(f"{f['name']!r}: {n}" for f, n in zip(t["fields"], names))
            out.append(f"{ind}{var} = {{{pairs}}}")

    # --- want: decode the wanted parts, skip the rest -----------------------------------
    def want(self, t: Any, want: Want, out: list[str], ind: str) -> None:
        if want.var and not want.children:
            self.read(t, want.var, out, ind)
            return
        if want.var:  # the value and parts of it: decode whole, then walk again for the parts
            start, after = self.fresh("p"), self.fresh("p")
            out.append(f"{ind}{start} = pos")
            self.read(t, want.var, out, ind)
            out += [f"{ind}{after} = pos", f"{ind}pos = {start}"]
            self.want(t, Want(None, want.children), out, ind)
            out.append(f"{ind}pos = {after}")
            return
        t = self.resolve(t)
        kind = self.kind(t)
        if kind == "union":

            def branch(b: Any, ind2: str) -> None:
                if self.kind(self.resolve(b)) == "record":
                    self.want(b, want, out, ind2)
                else:
                    self.skip(b, out, ind2)

            self.union(t, out, ind, branch)
        elif kind == "record" and logical_key(t) is None:
            self._stack.append(t["name"])
            for f in t["fields"]:
                child = want.children.get(f["name"])
                if child is None:
                    self.skip(f["type"], out, ind)
                else:
                    self.want(f["type"], child, out, ind)
            self._stack.pop()
        else:
            self.skip(t, out, ind)

    # --- shared pieces -------------------------------------------------------------------
    def length(self, out: list[str], ind: str) -> None:
        out += [
            f"{ind}n = LEN1[buf[pos]]",
            f"{ind}if n < 0: n, pos = length(buf, pos)",
            f"{ind}else: pos += 1",
        ]

    def index(self, out: list[str], ind: str, count: int, what: str) -> None:
        out += [f"{ind}i = LEN1[buf[pos]]", f"{ind}if i < 0: i, pos = length(buf, pos)", f"{ind}else: pos += 1",
                f"{ind}if i >= {count}: raise Invalid(f'{what} index {{i}} out of range')"]  # fmt: skip

    def union(
        self, t: list[Any], out: list[str], ind: str, emit: Callable[[Any, str], None]
    ) -> None:
        out += [
            f"{ind}i = LEN1[buf[pos]]",
            f"{ind}if i < 0: i, pos = length(buf, pos)",
            f"{ind}else: pos += 1",
        ]
        for number, branch in enumerate(t):
            out.append(f"{ind}{'if' if number == 0 else 'elif'} i == {number}:")
            before = len(out)
            emit(branch, ind + "    ")
            if len(out) == before:
                out.append(f"{ind}    pass")
        out.append(f"{ind}else: raise Invalid(f'union index {{i}} out of range')")

    def blocks(
        self, parts: list[Any], out: list[str], ind: str, emit: Callable[[str], None]
    ) -> None:
        """The block loop of an array (``parts`` = [item type]) or map ([string, value type])."""
        size = sum(self.min_size(p) for p in parts)
        count = self.fresh("c")
        out += [f"{ind}while True:",
                f"{ind}    {count} = LEN1[buf[pos]]",
                f"{ind}    if {count} < 0: {count}, pos = block_count(buf, pos)",
                f"{ind}    else: pos += 1",
                f"{ind}    if not {count}: break"]  # fmt: skip
        if size:
            out.append(f"{ind}    if pos + {count} * {size} > end: raise IndexError")
        else:
            out.append(
                f"{ind}    if {count} > MAX_ZW: raise Invalid(f'array block of {{{count}}} zero-width items')"
            )
        out.append(f"{ind}    for _ in range({count}):")
        before = len(out)
        emit(ind + "        ")
        if len(out) == before:
            out.append(f"{ind}        pass")

    def skip_items(self, items: Any, out: list[str], ind: str) -> None:
        """An array's items when skipping: constant-width items are jumped over in one step."""
        resolved = self.resolve(items)
        kind = self.kind(resolved)
        if kind in ("null", "float", "double", "fixed") and logical_key(resolved) is None:
            size = self.min_size(resolved)
            count = self.fresh("c")
            out += [f"{ind}while True:",
                    f"{ind}    {count} = LEN1[buf[pos]]",
                    f"{ind}    if {count} < 0: {count}, pos = block_count(buf, pos)",
                    f"{ind}    else: pos += 1",
                    f"{ind}    if not {count}: break",
                    f"{ind}    pos += {count} * {size}" if size else
                    f"{ind}    if {count} > MAX_ZW: raise Invalid(f'array block of {{{count}}} zero-width items')"]  # fmt: skip
            return
        self.blocks([items], out, ind, lambda ind2: self.skip(items, out, ind2))

    def check_logical(self, t: Any, key: str, value: str, out: list[str], ind: str) -> None:
        """Reject what fastavro's converter for ``key`` would refuse."""
        if key in RANGE_CHECKED:
            low, high = RANGE_CHECKED[key]
            out.append(
                f"{ind}if not {low} <= {value} <= {high}: raise Invalid(f'{key} value {{{value}}} out of range')"
            )
        elif key == "string-uuid":  # the canonical form needs no UUID object
            fn, schema = self.const(LOGICAL_READERS[key], "LR"), self.const(t, "S")
            out.append(f"{ind}if not UUID_FORM({value}): {fn}({value}, {schema}, None)")
        else:
            fn, schema = self.const(LOGICAL_READERS[key], "LR"), self.const(t, "S")
            out.append(f"{ind}{fn}({value}, {schema}, None)")

    def function(self, name: str, mode: str) -> str:
        """Name of the generated function that skips/reads named record ``name`` (recursion)."""
        key = (name, mode)
        if key not in self._functions:
            self._functions[key] = self.fresh(f"_{mode}_")
            self._pending.append((name, mode, self._functions[key]))
        return self._functions[key]

    def add_function(self, name: str, body: list[str], result: str, args: str = "buf, pos") -> None:
        """Add ``def name(args)``; the helpers become keyword defaults, so the body reads them
        as fast locals instead of globals (a measurable share of the per-field cost)."""
        self.sources.append("\n".join([f"def {name}({args}, {LOCAL_HELPERS}):", "    end = len(buf)", *body,
                                       f"    return {result}"]))  # fmt: skip

    def compile(self) -> dict[str, Any]:
        """Generate the pending recursive-record functions, then exec everything."""
        while self._pending:
            record, mode, fn = self._pending.pop()
            saved, self._stack = self._stack, []
            body: list[str] = []
            if mode == "skip":
                self.skip(record, body, "    ")
                self.add_function(fn, body, "pos")
            else:
                self.read(record, "v", body, "    ")
                self.add_function(fn, body, "v, pos")
            self._stack = saved
        exec(compile("\n\n".join(self.sources), "<kbqe probe>", "exec"), self.ns)  # noqa: S102
        return self.ns


_COMPLEX = frozenset(("record", "error", "request", "enum", "fixed", "array", "map"))
