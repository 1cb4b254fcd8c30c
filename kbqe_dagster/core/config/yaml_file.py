"""Reading the pipeline file's YAML text: PyYAML's safe loader, plus what it lets through
silently, a key repeated in one mapping (YAML keeps the last value), refused with its key path
and both positions. core/config/pipeline.py calls it; the mapping is then checked by
core/config_reader.py."""

from __future__ import annotations

from typing import Any

import yaml

from kbqe_dagster.core import config_reader as r

Position = tuple[int, int]
"""(line, column) in a YAML text, both from 1."""


def load_yaml(text: str, problems: r.Problems) -> Any:
    """The YAML document of ``text``, like ``yaml.safe_load``, but a key repeated in one
    mapping is a problem (key path and both lines) instead of silently keeping the last value
    (``load: {cadence: 5m, cadence: 10m}`` would run with 10m). Raises ``yaml.YAMLError``."""
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        for path, first, second in repeated_keys(node):
            where = (
                f"lines {first[0]} and {second[0]}"
                if first[0] != second[0]
                else f"line {first[0]}, columns {first[1]} and {second[1]}"
            )
            problems.add(
                path,
                f"key repeated in one mapping ({where}); YAML would keep only the last: remove one",
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


def repeated_keys(
    node: yaml.Node, path: str = "", seen: set[int] | None = None
) -> list[tuple[str, Position, Position]]:
    """``(key path, first position, repeated position)`` of every key given twice in a
    mapping of the composed YAML ``node``. Keys are compared as resolved scalars (tag and
    text); an aliased node is walked once."""
    seen = set() if seen is None else seen
    if id(node) in seen:
        return []
    seen.add(id(node))
    found: list[tuple[str, Position, Position]] = []
    if isinstance(node, yaml.MappingNode):
        positions: dict[tuple[str, str], Position] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                found += repeated_keys(value_node, path, seen)
                continue
            key = (key_node.tag, key_node.value)
            here = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            if key in positions and key_node.tag != "tag:yaml.org,2002:merge":
                found.append((r.join(path, key_node.value), positions[key], here))
            positions.setdefault(key, here)
            found += repeated_keys(value_node, r.join(path, key_node.value), seen)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found += repeated_keys(item, r.join(path, index), seen)
    return found
