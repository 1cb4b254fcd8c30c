"""Avro schemas in a canonical form (every name full, named types defined once): two schemas that
write the same bytes compare equal. What the Connect JSON converter tests and the Debezium JSON
corpus share."""

from __future__ import annotations

from typing import Any


def canonical(avro: Any, namespace: str | None = None, named: set | None = None) -> Any:
    """An Avro schema with every name full, every named type defined once and referenced after,
    and primitives by name: two schemas that write the same are equal."""
    named = set() if named is None else named
    if isinstance(avro, list):
        return [canonical(b, namespace, named) for b in avro]
    if isinstance(avro, str):
        if avro in ("null", "boolean", "int", "long", "float", "double", "bytes", "string"):
            return avro
        return avro if "." in avro or not namespace else f"{namespace}.{avro}"
    if avro.get("type") in ("record", "fixed", "enum"):
        ns = avro.get("namespace", namespace) or None
        full = (
            avro["name"]
            if "." in avro["name"]
            else (f"{ns}.{avro['name']}" if ns else avro["name"])
        )
        if full in named:
            return full
        named.add(full)
        inner_ns = full.rpartition(".")[0] or None
        out = {k: v for k, v in avro.items() if k not in ("namespace", "name", "fields")}
        out["name"] = full
        if "fields" in avro:
            out["fields"] = [
                {**f, "type": canonical(f["type"], inner_ns, named)} for f in avro["fields"]
            ]
        return out
    out = dict(avro)
    for key in ("items", "values"):
        if key in out:
            out[key] = canonical(out[key], namespace, named)
    return out["type"] if out.keys() == {"type"} else out
