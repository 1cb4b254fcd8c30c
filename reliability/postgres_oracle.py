"""Postgres as the oracle of a Debezium table (DESIGN.md §14): a source table with a column of
every type of the semantic-type mapping (core/formats/connect_types.py), the changes a real
application makes to it, and the comparison of ``SELECT *`` in Postgres with the live rows of
``D.T`` in BigQuery, value by value under the documented mapping.

The mapping's decisions show up here as normalisations, one per Postgres type: a ``timestamp``
is its wall clock read as UTC, a ``timetz`` is the UTC text Debezium sends, an ``interval`` is
microseconds (the scenario uses no months: Debezium counts a month as 30.4375 days), a ``real``
is the float32 Avro carries, ``json``/``jsonb`` compare as parsed documents.
"""

from __future__ import annotations

import json
import random
import string
import struct
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from datetime import time as dtime
from decimal import Decimal
from typing import Any

COLUMNS = """
    id          integer PRIMARY KEY,
    c_smallint  smallint,
    c_bigint    bigint,
    c_numeric   numeric(10,2),
    c_numeric_any numeric,
    c_real      real,
    c_double    double precision,
    c_bool      boolean,
    c_text      text,
    c_varchar   varchar(20),
    c_char      char(3),
    c_date      date,
    c_time      time,
    c_timetz    timetz,
    c_timestamp timestamp,
    c_timestamptz timestamptz,
    c_interval  interval,
    c_uuid      uuid,
    c_json      json,
    c_jsonb     jsonb,
    c_bytea     bytea,
    c_enum      {enum},
    c_int_array integer[],
    c_text_array text[],
    c_big_text  text
"""
"""Every type of the mapping table; ``c_big_text`` is the TOASTed one (stored out of line)."""

VALUE_COLUMNS = [
    line.split()[0] for line in COLUMNS.strip().splitlines() if line.split()[0] != "id"
]


def _float32(value: float) -> float:
    return struct.unpack("f", struct.pack("f", value))[0]


def _utc_time(value: dtime) -> dtime:
    """A ``timetz`` as the UTC time of day Debezium's ZonedTime text names."""
    offset = value.utcoffset() or timedelta(0)
    moment = datetime.combine(date(2000, 1, 1), value.replace(tzinfo=None)) - offset
    return moment.time()


def _zoned_time_text(value: str) -> dtime:
    """Debezium's ZonedTime (``10:15:07.25Z``, UTC) as a time of day."""
    return dtime.fromisoformat(value.removesuffix("Z"))


def _micros(value: timedelta) -> int:
    return (value.days * 86_400 + value.seconds) * 1_000_000 + value.microseconds


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


EXPECTED: dict[str, Callable[[Any], Any]] = {
    "c_real": _float32,
    "c_timetz": _utc_time,
    "c_timestamp": lambda v: v.replace(tzinfo=UTC),
    "c_interval": _micros,
    "c_uuid": str,
    "c_json": _json,
    "c_jsonb": _json,
    "c_bytea": bytes,
    "c_numeric": Decimal,
    "c_numeric_any": Decimal,
}
"""Postgres value → the BigQuery value the mapping promises (identity when not listed)."""
FROM_BIGQUERY: dict[str, Callable[[Any], Any]] = {
    "c_json": _json,
    "c_jsonb": _json,
    "c_timetz": _zoned_time_text,
}
ARRAYS = ("c_int_array", "c_text_array")
TOLERANCE = {"c_interval": 1}
"""Debezium computes an interval's MicroDuration through a double (seconds × 1e6, then
truncated), so a value may be 1 µs below Postgres's (seen: 17,488,910,776,125 sent as
…124). ``interval.handling.mode=string`` sends the exact ISO 8601 text instead."""


def expected(column: str, value: Any) -> Any:
    if value is None:
        return [] if column in ARRAYS else None  # BigQuery has no NULL ARRAY: it reads []
    if isinstance(value, list):
        return list(value)
    return EXPECTED.get(column, lambda v: v)(value)


def actual(column: str, value: Any) -> Any:
    if value is None:
        return None
    return FROM_BIGQUERY.get(column, lambda v: v)(value)


@dataclass
class Source:
    """The Postgres side: one table of a schema of its own, and the changes made to it."""

    conn: Any
    schema: str
    table: str = "items"
    seed: int = 7

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.next_id = 1
        self.dropped: set[str] = set()
        """Columns an ``ALTER TABLE … DROP COLUMN`` removed: no longer written."""

    @property
    def qualified(self) -> str:
        return f"{self.schema}.{self.table}"

    def sql(self, statement: str, params: Iterable[Any] = ()) -> None:
        """One statement in a transaction of its own (the connection is in autocommit)."""
        self.conn.execute(statement, tuple(params))

    def drop_column(self, column: str) -> None:
        self.sql(f"ALTER TABLE {self.qualified} DROP COLUMN {column}")
        self.dropped.add(column)

    def create(self) -> None:
        enum = f"{self.schema}.mood"
        self.sql(f"CREATE SCHEMA {self.schema}")
        self.sql(f"CREATE TYPE {enum} AS ENUM ('sad', 'ok', 'happy')")
        self.sql(f"CREATE TABLE {self.qualified} ({COLUMNS.format(enum=enum)})")

    def row(self, row_id: int, *, nulls: bool = False) -> dict[str, Any]:
        rng = self.rng
        if nulls:
            return {"id": row_id} | {c: None for c in VALUE_COLUMNS if c not in self.dropped}
        moment = datetime(2024, 9, 13, 12, 0, tzinfo=UTC) + timedelta(
            seconds=rng.randrange(-(10**8), 10**8), microseconds=rng.randrange(10**6)
        )
        values = {
            "id": row_id,
            "c_smallint": rng.randint(-32768, 32767),
            "c_bigint": rng.choice([rng.randint(-(2**63), 2**63 - 1), 0]),
            "c_numeric": Decimal(rng.randint(-(10**9), 10**9)) / 100,
            "c_numeric_any": Decimal(rng.randint(-(10**12), 10**12)).scaleb(-rng.randint(0, 9)),
            "c_real": rng.choice([0.5, -1.25, 3.14159, 1e20]),
            "c_double": rng.choice([0.1, -1e300, 2.5, 1 / 3]),
            "c_bool": rng.random() < 0.5,
            "c_text": rng.choice(["", "hello", "ünïcode ✓", "a'b\"c"]),
            "c_varchar": "".join(rng.choices(string.ascii_letters, k=rng.randint(0, 20))),
            "c_char": rng.choice(["ab", "abc", ""]),
            "c_date": date(2024, 1, 1) + timedelta(days=rng.randint(-700_000, 2_000_000)),
            "c_time": dtime(
                rng.randrange(24), rng.randrange(60), rng.randrange(60), rng.randrange(10**6)
            ),  # fmt: skip
            "c_timetz": f"{rng.randrange(24):02}:{rng.randrange(60):02}:07.25"
            f"{rng.choice(['+02', '-05:30', '+00'])}",
            "c_timestamp": moment.replace(tzinfo=None),
            "c_timestamptz": moment,
            "c_interval": timedelta(
                days=rng.randint(0, 400),
                seconds=rng.randint(0, 86_399),
                microseconds=rng.randrange(10**6),
            ),  # fmt: skip
            "c_uuid": uuid.UUID(int=rng.getrandbits(128)),
            "c_json": json.dumps({"k": rng.randint(0, 9), "l": [1, None, "x"]}),
            "c_jsonb": json.dumps({"z": 1, "a": {"b": rng.random() < 0.5}}),
            "c_bytea": rng.randbytes(rng.choice([0, 3, 40])),
            "c_enum": rng.choice(["sad", "ok", "happy"]),
            "c_int_array": [rng.randint(-5, 5) for _ in range(rng.randint(0, 4))],
            "c_text_array": [rng.choice(["a", "b c", "ü"]) for _ in range(rng.randint(0, 3))],
            # Every 10th row's text is stored out of line (TOAST); the others are short, so
            # the 5,000-row transaction stays a few MB.
            "c_big_text": self.big_text() if row_id % 10 == 0 else "short",
        }
        return {c: v for c, v in values.items() if c not in self.dropped}

    def big_text(self) -> str:
        """10,000 incompressible characters: stored out of line (TOAST), so an update that
        leaves it unchanged carries Debezium's unavailable-value placeholder instead."""
        return "".join(self.rng.choices(string.ascii_letters + string.digits, k=10_000))

    def insert(self, count: int, *, nulls_every: int = 0) -> list[int]:
        """``count`` new rows in one transaction."""
        ids = []
        with self.conn.transaction(), self.conn.cursor() as cur:
            for _ in range(count):
                row_id = self.next_id
                self.next_id += 1
                values = self.row(row_id, nulls=bool(nulls_every) and row_id % nulls_every == 0)
                names = ", ".join(values)
                marks = ", ".join(["%s"] * len(values))
                cur.execute(
                    f"INSERT INTO {self.qualified} ({names}) VALUES ({marks})",
                    tuple(values.values()),
                )
                ids.append(row_id)
        return ids

    def update(self, ids: Iterable[int], columns: tuple[str, ...] = ("c_text", "c_bigint")) -> None:
        """Update ``columns`` of ``ids``, a transaction each: the TOASTed ``c_big_text`` is
        left as it is (its unavailable-value placeholder in the change)."""
        with self.conn.cursor() as cur:
            for row_id in ids:
                fresh = self.row(row_id)
                sets = ", ".join(f"{c} = %s" for c in columns)
                cur.execute(
                    f"UPDATE {self.qualified} SET {sets} WHERE id = %s",
                    (*(fresh[c] for c in columns), row_id),
                )

    def live_ids(self) -> list[int]:
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT id FROM {self.qualified} ORDER BY id")
            return [r[0] for r in cur.fetchall()]

    def rows(self) -> dict[int, dict[str, Any]]:
        """``SELECT *``: every row of the table, by id, as psycopg reads it."""
        with self.conn.cursor() as cur:
            cur.execute(f"SELECT * FROM {self.qualified}")
            names = [d.name for d in cur.description]
            return {r[0]: dict(zip(names, r, strict=True)) for r in cur.fetchall()}


def pipeline(topic: str, dataset: str, **more: Any) -> dict[str, Any]:
    """The pipeline of the oracle's table: ``topic`` as a keyed Debezium topic into
    ``dataset.items`` (soft deletes, history), dead letters in ``<dataset>_dead``."""
    return {
        "version": 1,
        "topics": [
            {
                "name": topic,
                "format": "debezium",
                "keyed": {"key": ["id"], "deletes": "soft", "history": True},
                "routing": {"mode": "static", "dataset": dataset, "table": "items"},
            }
        ],
        "dead_letter": {"dataset": f"{dataset}_dead", "table": "dead_letters"},
        **more,
    }


def differences(
    source_rows: dict[int, dict],
    table_rows: dict[int, dict],
    unavailable: frozenset[tuple[int, str]] = frozenset(),
) -> list[str]:
    """What differs between Postgres and the live rows of ``D.T``, value by value: ids on one
    side only, then ``id.column: postgres != bigquery`` (empty: equal).

    ``unavailable``: ``(id, column)`` whose value no change ever carried, which ``D.T`` holds as
    NULL, never the placeholder: a TOASTed column of a row whose primary key an UPDATE changed
    (Postgres logs no unchanged TOASTed value, so Debezium's create of the new key carries the
    placeholder, and the new key has no earlier value)."""
    out = [f"id {i} only in postgres" for i in sorted(source_rows.keys() - table_rows.keys())]
    out += [f"id {i} only in bigquery" for i in sorted(table_rows.keys() - source_rows.keys())]
    for i in sorted(source_rows.keys() & table_rows.keys()):
        for column, value in source_rows[i].items():
            want, got = expected(column, value), actual(column, table_rows[i].get(column))
            if (i, column) in unavailable:
                want = None
            close = column in TOLERANCE and None not in (want, got)
            if want != got and not (close and abs(want - got) <= TOLERANCE[column]):
                out.append(f"id {i}.{column}: postgres {want!r:.120} != bigquery {got!r:.120}")
    return out


def drop_slot_when_released(conn: Any, slot: str, timeout: float = 60.0) -> None:
    """Drop the replication slot ``slot`` once its connector has let it go (a deleted
    connector's task releases it a moment later). A slot left behind keeps WAL forever and
    counts against ``max_replication_slots``: ten leaked slots and no connector starts."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT active FROM pg_replication_slots WHERE slot_name = %s", (slot,)
        ).fetchone()
        if row is None:
            return
        if not row[0]:
            conn.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            return
        time.sleep(0.5)
    raise AssertionError(f"replication slot {slot} still active after {timeout:.0f}s")


def wait_until_stable(end_offset: Callable[[], int], at_least: int, timeout: float = 120.0) -> int:
    """Wait until the topic holds at least ``at_least`` messages and has not grown for 3 s
    (Debezium has delivered what was committed); its end offset."""
    deadline = time.monotonic() + timeout
    last, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        now = end_offset()
        if now != last:
            last, since = now, time.monotonic()
        elif now >= at_least and time.monotonic() - since >= 3.0:
            return now
        time.sleep(0.5)
    raise AssertionError(f"the topic held {last} messages after {timeout}s, expected {at_least}+")
