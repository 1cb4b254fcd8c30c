"""The record probe: prove an Avro body decodes to exactly its length, and read a few fields.

The stage job never decodes whole records (DESIGN.md §5); it needs only (a) the proof that a
body is valid under its writer schema — a body that is not would make BigQuery reject the
whole load job — and (b) the few fields that routing and event time read. Per schema, a
:class:`RecordProbe` compiles:

1. an **exact decoder**, Python source generated for the schema (``codegen.py``): it
   validates every byte and decodes only the wanted fields, as fastavro would return them;
2. a **fast path**, a regular expression matching the schema's common encodings
   (``regex.py``), run first: a match proves validity at C speed, and the wanted fields
   are decoded from their match groups. No match → the exact decoder decides.

If most bodies of a schema miss the fast path (long strings, non-ASCII text), trying it first
is wasted work, so the probe stops trying for a while and retries later.

Wanted paths are dotted field names through records, and through unions whose record
branches have the field (``payload.eventTime``). A path that no record branch of the schema
has is left out of the result (:attr:`RecordProbe.missing_paths`); a path whose union branch
is not taken in a body is ``None``. Values are fastavro's: ``date`` → ``datetime.date``,
``timestamp-millis/micros`` → aware UTC ``datetime``, unions unwrapped, records as dicts.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import fastavro

from kbqe_dagster.core.errors import BodyDecodeError, UnsupportedSchemaError
from kbqe_dagster.staging.avro_binary import Invalid
from kbqe_dagster.staging.probe.codegen import PythonGenerator, Want, logical_key
from kbqe_dagster.staging.probe.regex import FastPath, NoFastPath, RegexBuilder

__all__ = ["RecordProbe"]

# Fast-path bookkeeping: judged every WINDOW attempts; more than half missing → skip it for
# PAUSE records, then try again (data changes, e.g. a backfill of long strings ends).
_WINDOW = 1024
_PAUSE = 65_536

_DECODE_ERRORS = (
    IndexError,
    struct.error,
    Invalid,
    UnicodeDecodeError,
    ValueError,
    OverflowError,
    TypeError,
)


class RecordProbe:
    """Validates bodies of one writer schema and returns the wanted field values.

    ``probe(body)`` returns ``{path: value}`` for the resolvable wanted paths, or raises
    :class:`BodyDecodeError` (reason ``body_decode_error``) when the body is truncated, has
    trailing bytes, or holds invalid data. A schema that does not parse or is not a record
    raises :class:`UnsupportedSchemaError` here.
    """

    def __init__(self, writer_schema: Mapping[str, Any] | str, wanted_paths: Iterable[str] = (),
                 *, fast_path: bool = True) -> None:  # fmt: skip
        named: dict[str, Any] = {}
        try:
            parsed = fastavro.parse_schema(writer_schema, named, _write_hint=False)
        except Exception as exc:  # fastavro raises several types for a bad schema
            raise UnsupportedSchemaError(f"writer schema does not parse: {exc}") from None
        gen = PythonGenerator(named)
        top = gen.resolve(parsed)
        if gen.kind(top) != "record":
            raise UnsupportedSchemaError(f"writer schema is not a record but {gen.kind(top)!r}")
        self.schema_name: str = top["name"]
        wanted = list(dict.fromkeys(wanted_paths))
        self.paths: tuple[str, ...] = tuple(p for p in wanted if _resolves(gen, top, p.split(".")))
        self.missing_paths: tuple[str, ...] = tuple(p for p in wanted if p not in self.paths)
        self._gen, self._top, self._fast_path = gen, top, fast_path
        self._exact: Callable[[bytes], dict[str, Any]] | None = None
        self._fast: Callable[[bytes], dict[str, Any] | None] | None = None
        self._calls = self._misses = self._paused = 0

    def _compile(self) -> None:
        """Generate and compile the probe's code, on its first use: with the native kernel most
        schemas never reach the Python path, and compiling (the fast path's regex above all)
        took ~0.15 s of a fresh worker's first range."""
        gen, top = self._gen, self._top
        tree = Want()
        variables = {}
        for number, path in enumerate(self.paths):
            node = tree
            for part in path.split("."):
                node = node.children.setdefault(part, Want())
            node.var = variables[path] = f"w{number}"
        fast = None
        if self._fast_path:
            try:
                fast = RegexBuilder(gen).build(top, tree)
            except NoFastPath:
                fast = None
        _exact_function(gen, top, tree, variables)
        if fast is not None:
            _fast_function(gen, fast, variables)
        namespace = gen.compile()
        self._fast = namespace.get("_fast")
        self._exact = namespace["_exact"]  # set last: it marks the probe compiled
        self._source = "\n\n".join(gen.sources)

    @property
    def source(self) -> str:
        """The generated Python, for debugging and the curious."""
        if self._exact is None:
            self._compile()
        return self._source

    @property
    def has_fast_path(self) -> bool:
        """Whether the schema has a fast-path pattern at all."""
        if self._exact is None:
            self._compile()
        return self._fast is not None

    @property
    def fast_path_active(self) -> bool:
        """Whether the next body tries the fast path first (it pauses while most miss it)."""
        return self.has_fast_path and not self._paused

    def probe(self, body: bytes) -> dict[str, Any]:
        """Validate ``body`` and return the wanted values (see the class docstring)."""
        if self._exact is None:
            self._compile()
        if type(body) is not bytes:
            body = bytes(body)
        try:
            if self._fast is not None:
                if self._paused:
                    self._paused -= 1
                else:
                    self._calls += 1
                    values = self._fast(body)
                    if values is not None:
                        return values
                    self._misses += 1
                    if self._calls >= _WINDOW:  # judged on misses only: hits stay cheap
                        self._judge()
            return self._exact(body)
        except _DECODE_ERRORS as exc:
            raise BodyDecodeError(self._describe(body, exc)) from None

    def is_valid(self, body: bytes) -> bool:
        """Whether ``body`` is a valid record of the schema (the probe without the values)."""
        try:
            self.probe(body)
        except BodyDecodeError:
            return False
        return True

    def _judge(self) -> None:
        if self._misses * 2 > self._calls:
            self._paused = _PAUSE
        self._calls = self._misses = 0

    def _describe(self, body: bytes, exc: Exception) -> str:
        if isinstance(exc, (IndexError, struct.error)):
            detail = "truncated: the schema needs more bytes"
        elif isinstance(exc, _Trailing):
            detail = str(exc)
        elif isinstance(exc, UnicodeDecodeError):
            detail = f"invalid UTF-8 in a string ({exc.reason})"
        else:
            detail = str(exc) or type(exc).__name__
        return f"{len(body)}-byte body does not decode under schema {self.schema_name}: {detail}"


class _Trailing(Invalid):
    """The schema is satisfied before the end of the body."""


def _resolves(gen: PythonGenerator, t: Any, parts: list[str]) -> bool:
    """Whether some record branch along ``parts`` has the field (the path can have a value)."""
    t = gen.resolve(t)
    if not parts:
        return True
    if isinstance(t, list):
        return any(_resolves(gen, b, parts) for b in t if gen.kind(gen.resolve(b)) == "record")
    if gen.kind(t) != "record":
        return False
    for f in t["fields"]:
        if f["name"] == parts[0]:
            return _resolves(gen, f["type"], parts[1:])
    return False


def _result(variables: Mapping[str, str]) -> str:
    return "{" + ", ".join(f"{path!r}: {var}" for path, var in variables.items()) + "}"


def _exact_function(
    gen: PythonGenerator, top: Any, tree: Want, variables: Mapping[str, str]
) -> None:
    gen.ns["Trailing"] = _Trailing
    body = ["    pos = 0"]
    if variables:
        body.append("    " + " = ".join(variables.values()) + " = None")
    gen.want(top, tree, body, "    ")
    body += [
        "    if pos > end: raise IndexError",
        "    if pos < end: raise Trailing(f'{end - pos} trailing bytes after the record')",
    ]
    gen.add_function("_exact", body, _result(variables), args="buf")


def _fast_function(gen: PythonGenerator, fast: FastPath, variables: Mapping[str, str]) -> None:
    """``_fast(buf)``: the fast-path match, then the logical checks the pattern could not
    express and the wanted values; ``None`` when the pattern does not match."""
    gen.ns["MATCH"] = fast.pattern.fullmatch
    lines = ["def _fast(buf):", "    m = MATCH(buf)", "    if m is None: return None"]
    for group, node in fast.checks:
        check = gen.fresh("_check")
        body: list[str] = []
        gen.skip(node, body, "    ")
        gen.add_function(check, body, "pos")
        lines += [f"    s = m.start({group})", f"    if s >= 0: {check}(buf, s)"]
    for var in variables.values():
        lines.append(f"    {var} = None")
        for group, node in fast.reads.get(var, []):
            lines += [
                f"    s, t = m.span({group})",
                f"    if s >= 0: {var} = {_fast_read(gen, node)}",
            ]
    lines.append(f"    return {_result(variables)}")
    gen.sources.append("\n".join(lines))


def _fast_read(gen: PythonGenerator, node: Any) -> str:
    """Expression decoding the value matched at ``buf[s:t]``. Matched strings have a one-byte
    length and ASCII content, so the common cases need no decoder call."""
    resolved = gen.resolve(node)
    if resolved == "string" or (isinstance(resolved, dict) and resolved.get("type") == "string"
                                and logical_key(resolved) is None):  # fmt: skip
        return "buf[s + 1:t].decode()"
    if (
        isinstance(resolved, list)
        and len(resolved) == 2
        and "null" in resolved
        and "string" in resolved
    ):
        null = resolved.index("null") * 2
        return f"None if buf[s] == {null} else buf[s + 2:t].decode()"
    reader = gen.fresh("_read")
    body: list[str] = []
    gen.read(node, "v", body, "    ")
    gen.add_function(reader, body, "v")
    return f"{reader}(buf, s)"
