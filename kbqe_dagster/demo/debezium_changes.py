"""A Debezium change of the demo's customers table (``Change``: an event or a tombstone) and its
envelope value as a record (``value_record``), whatever converter then writes it: Avro
(``debezium.py``) or JSON (``debezium_json.py``)."""

from __future__ import annotations

from dataclasses import dataclass

PRECISE_TS = ("ts_us", "ts_ns")


@dataclass(frozen=True)
class Change:
    """One message of the topic: a change event, or the tombstone after a delete."""

    id: int
    op: str | None  # None: a tombstone
    before: dict | None = None
    after: dict | None = None
    ts_ms: int = 0
    schema_version: int = 1

    @property
    def is_tombstone(self) -> bool:
        return self.op is None

    @property
    def row(self) -> dict:
        """The row the change leaves (``after``), or a delete's ``before``; a tombstone has none."""
        row = self.before if self.op == "d" else self.after
        assert row is not None, (
            f"customer {self.id}: a tombstone (or an image-less change) has no row"
        )
        return row


def value_record(change: Change, namespace: str) -> dict:
    def image(row: dict | None) -> dict | None:
        return None if row is None else {**row}

    return {
        "before": image(change.before),
        "after": image(change.after),
        "source": {
            "version": "2.7.0.Final",
            "connector": "postgresql",
            "name": "dbserver1",
            "ts_ms": change.ts_ms,
            "snapshot": "true" if change.op == "r" else "false",
            "db": "postgres",
            "sequence": None,
            "schema": "inventory",
            "table": "customers",
            "txId": 700 + change.ts_ms % 1000,
            "lsn": 30_000_000 + change.ts_ms % 10**6,
            "xmin": None,
        },
        "op": change.op,
        "ts_ms": change.ts_ms + 3,
        "ts_us": (change.ts_ms + 3) * 1_000,  # written only by a ts_precision envelope
        "ts_ns": (change.ts_ms + 3) * 1_000_000,
        "transaction": None,
    }
