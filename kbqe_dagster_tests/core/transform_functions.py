"""User transform functions the transform tests import by ``"module:function"``."""

from __future__ import annotations


def add_segment(record: dict) -> dict:
    return {**record, "segment": "bulk" if record["qty"] >= 3 else None}


def explode(record: dict) -> dict:
    raise RuntimeError(f"boom for {record['id']}")


def undeclared(record: dict) -> dict:
    return {**record, "extra": 1}
