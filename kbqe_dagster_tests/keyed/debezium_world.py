"""Realistic Debezium data for the keyed tests, and the oracle that says what BigQuery must
hold after it.

The schemas follow Debezium's Avro layout for a Postgres table (the ``Envelope`` with
``before``/``after`` of the row's ``Value`` record, ``source`` with ``ts_ms``, ``db``,
``table``, ``lsn``, ..., ``op``, ``ts_ms``, ``transaction``); the Kafka key is the ``Key``
record of the primary key. Keys and values are framed through the schema registry as
Debezium's Avro converter writes them, and a key's changes stay in one partition.

:class:`CustomersTable` plays the database: each call produces one kind of change and keeps
the table's state, so the generated stream holds snapshot reads, inserts, updates, deletes
each followed by a tombstone, keys re-created after their delete (also in the same
millisecond), redelivered duplicates, out-of-order versions and, from schema v2 on, a column
added mid-stream. The oracle computes ``D.T`` and ``D.T_history`` from the produced events by
the rule of core/keyed.py, independently of the SQL under test.
"""

from __future__ import annotations

import io
import random
import struct
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any

from fastavro import parse_schema, schemaless_writer

ROW_V1 = [
    {"name": "id", "type": "int"},
    {"name": "first_name", "type": "string"},
    {"name": "last_name", "type": "string"},
    {"name": "email", "type": "string"},
]
ROW_V2 = ROW_V1 + [{"name": "phone", "type": ["null", "string"], "default": None}]
ROW_COLUMNS = ("id", "first_name", "last_name", "email", "phone")
END_OF_TIME = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=timezone.utc)


def envelope_schema(namespace: str, row_fields: list[dict]) -> dict:
    value = {"type": "record", "name": "Value", "fields": row_fields,
             "connect.name": f"{namespace}.Value"}
    source = {
        "type": "record", "name": "Source", "namespace": "io.debezium.connector.postgresql",
        "fields": [
            {"name": "version", "type": "string"},
            {"name": "connector", "type": "string"},
            {"name": "name", "type": "string"},
            {"name": "ts_ms", "type": "long"},
            {"name": "snapshot", "type": [{"type": "string", "connect.version": 1,
                                           "connect.parameters": {"allowed": "true,last,false,incremental"},
                                           "connect.default": "false",
                                           "connect.name": "io.debezium.data.Enum"}, "null"],
             "default": "false"},
            {"name": "db", "type": "string"},
            {"name": "sequence", "type": ["null", "string"], "default": None},
            {"name": "schema", "type": "string"},
            {"name": "table", "type": "string"},
            {"name": "txId", "type": ["null", "long"], "default": None},
            {"name": "lsn", "type": ["null", "long"], "default": None},
            {"name": "xmin", "type": ["null", "long"], "default": None},
        ],
        "connect.name": "io.debezium.connector.postgresql.Source",
    }
    block = {"type": "record", "name": "block", "namespace": "event", "fields": [
        {"name": "id", "type": "string"},
        {"name": "total_order", "type": "long"},
        {"name": "data_collection_order", "type": "long"},
    ], "connect.version": 1, "connect.name": "event.block"}
    return {
        "type": "record", "name": "Envelope", "namespace": namespace,
        "fields": [
            {"name": "before", "type": ["null", value], "default": None},
            {"name": "after", "type": ["null", "Value"], "default": None},
            {"name": "source", "type": source},
            {"name": "op", "type": "string"},
            {"name": "ts_ms", "type": ["null", "long"], "default": None},
            {"name": "transaction", "type": ["null", block], "default": None},
        ],
        "connect.name": f"{namespace}.Envelope",
    }


def key_schema(namespace: str) -> dict:
    return {"type": "record", "name": "Key", "namespace": namespace,
            "fields": [{"name": "id", "type": "int"}], "connect.name": f"{namespace}.Key"}


def frame(schema_id: int, schema: dict, record: Any) -> bytes:
    out = io.BytesIO()
    schemaless_writer(out, parse_schema(schema), record)
    return struct.pack(">bI", 0, schema_id) + out.getvalue()


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
        return self.before if self.op == "d" else self.after


@dataclass
class CustomersTable:
    """The source table: its rows, its clock, and every change it emitted (in order)."""

    seed: int
    partitions: int = 3
    rows: dict[int, dict] = field(default_factory=dict)
    clock_ms: int = 1_732_000_000_000  # 2024-11-19
    changes: list[Change] = field(default_factory=list)
    schema_version: int = 1
    next_id: int = 1

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def _tick(self) -> int:
        self.clock_ms += self.rng.randint(1, 50)
        return self.clock_ms

    def _row(self, id_: int) -> dict:
        row = {"id": id_, "first_name": self.rng.choice(["Sally", "George", "Edward", "Anne"]),
               "last_name": self.rng.choice(["Thomas", "Bailey", "Walker", "Kretchmar"]),
               "email": f"u{id_}.{self.rng.randint(0, 10**6)}@example.com"}
        if self.schema_version >= 2:
            row["phone"] = self.rng.choice([None, f"+1-555-{self.rng.randint(1000, 9999)}"])
        return row

    def _emit(self, change: Change) -> Change:
        self.changes.append(change)
        return change

    def snapshot(self, count: int) -> None:
        ts = self._tick()
        for _ in range(count):
            row = self._row(self.next_id)
            self.next_id += 1
            self.rows[row["id"]] = row
            self._emit(Change(row["id"], "r", None, row, ts, self.schema_version))

    def insert(self, ts: int | None = None, id_: int | None = None) -> None:
        if id_ is None:
            id_, self.next_id = self.next_id, self.next_id + 1
        row = self._row(id_)
        self.rows[id_] = row
        self._emit(Change(id_, "c", None, row, ts or self._tick(), self.schema_version))

    def update(self) -> None:
        id_ = self.rng.choice(sorted(self.rows))
        before = self.rows[id_]
        after = {**self._row(id_), "first_name": before["first_name"]}
        self.rows[id_] = after
        self._emit(Change(id_, "u", before, after, self._tick(), self.schema_version))

    def delete(self, recreate_same_ms: bool = False) -> None:
        id_ = self.rng.choice(sorted(self.rows))
        before = self.rows.pop(id_)
        ts = self._tick()
        self._emit(Change(id_, "d", before, None, ts, self.schema_version))
        self._emit(Change(id_, None, ts_ms=ts))  # the tombstone
        if recreate_same_ms:
            self.insert(ts=ts, id_=id_)

    def redeliver(self, count: int) -> None:
        """Earlier events again, as a restarted connector re-sends them (tombstones too)."""
        for change in self.rng.sample(self.changes[-20:], count):
            self._emit(change)

    def late_version(self) -> None:
        """An update whose version is older than the key's current one (out of order)."""
        id_ = self.rng.choice(sorted(self.rows))
        latest = max(c.ts_ms for c in self.changes if c.id == id_ and not c.is_tombstone)
        stale = {**self._row(id_)}
        self._emit(Change(id_, "u", self.rows[id_], stale, latest - 7, self.schema_version))

    def round(self, inserts: int, updates: int, deletes: int) -> None:
        for _ in range(inserts):
            self.insert()
        for _ in range(updates):
            self.update()
        for index in range(deletes):
            self.delete(recreate_same_ms=index == 0)
        self.late_version()
        self.redeliver(3)


@dataclass(frozen=True)
class Produced:
    change: Change
    partition: int
    offset: int


def value_record(change: Change, namespace: str) -> dict:
    def image(row: dict | None) -> dict | None:
        return None if row is None else {**row}

    return {
        "before": image(change.before), "after": image(change.after),
        "source": {"version": "2.7.0.Final", "connector": "postgresql", "name": "dbserver1",
                   "ts_ms": change.ts_ms, "snapshot": "true" if change.op == "r" else "false",
                   "db": "postgres", "sequence": None, "schema": "inventory",
                   "table": "customers", "txId": 700 + change.ts_ms % 1000,
                   "lsn": 30_000_000 + change.ts_ms % 10**6, "xmin": None},
        "op": change.op, "ts_ms": change.ts_ms + 3, "transaction": None,
    }


# --- the oracle --------------------------------------------------------------------------------
def _order(p: Produced) -> tuple[int, int, int]:
    return (p.change.ts_ms, p.partition, p.offset)


def _row_values(change: Change) -> tuple:
    row = change.row
    return tuple(row.get(c) for c in ROW_COLUMNS)


def current_state(produced: list[Produced], hard: bool) -> set[tuple]:
    """``D.T`` as rows ``(*ROW_COLUMNS, _op, _source_ts_ms, _deleted, partition, offset)``."""
    winners: dict[int, Produced] = {}
    for p in produced:
        if p.change.is_tombstone:
            continue
        best = winners.get(p.change.id)
        if best is None or _order(p) > _order(best):
            winners[p.change.id] = p
    return {
        (*_row_values(p.change), p.change.op, p.change.ts_ms, p.change.op == "d", p.partition,
         p.offset)
        for p in winners.values() if not (hard and p.change.op == "d")
    }


def history(produced: list[Produced]) -> set[tuple]:
    """``D.T_history`` as rows ``(*ROW_COLUMNS, _op, _deleted, _valid_from, _valid_to,
    _is_current)``."""
    versions: dict[tuple[int, int], Produced] = {}
    for p in produced:
        if p.change.is_tombstone:
            continue
        slot = (p.change.id, p.change.ts_ms)
        if slot not in versions or _order(p) > _order(versions[slot]):
            versions[slot] = p
    by_key: dict[int, list[Produced]] = {}
    for (id_, _), p in sorted(versions.items()):
        by_key.setdefault(id_, []).append(p)
    rows = set()
    for chain in by_key.values():
        for i, p in enumerate(chain):
            nxt = chain[i + 1] if i + 1 < len(chain) else None
            valid_to = _ts(nxt.change.ts_ms) if nxt else END_OF_TIME
            rows.add((*_row_values(p.change), p.change.op, p.change.op == "d",
                      _ts(p.change.ts_ms), valid_to, nxt is None))
    return rows


def _ts(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=timezone.utc) + timedelta(milliseconds=ms)
