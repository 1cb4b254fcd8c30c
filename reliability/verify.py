"""The exactly-once accounting: every produced offset against what BigQuery holds.

For each ``(topic, partition, offset)`` of the ledgers (the run's two topics) the run's
tables must hold exactly one row —
in the destination table on the right event date for good input, in the dead-letter table
with the right reason for bad input. Anything else is counted:

- a **duplicate**: each copy beyond the first, wherever it is;
- a **loss**: an offset found nowhere;
- a **misplaced** offset: found once, but in the wrong table, on the wrong date or with the
  wrong reason (e.g. a good message dead-lettered while the registry was down);
- an **unexpected** row: an offset of this topic that was never produced.

The staging area is checked too: after the final load nothing may wait (an avro file left
is data not loaded) and nothing may be quarantined.

The ``delivery: storage_write`` tables get their own figures (:class:`TableCount`): their
rows were appended through the Storage Write API, never loaded, so their duplicates and
losses are the Storage Write protocol's alone.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from typing import Protocol

from kbqe_dagster.core.protocol.naming import parse_listing
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LocalEndpoints
from kbqe_dagster.resources.staging_store import StagingStore
from reliability.messages import Ledger


class World(Protocol):
    """What the accounting reads of a run: the fault suite's ``reliability.world.World``, or
    the soak's fleet (reliability/soak.py)."""

    @property
    def endpoints(self) -> LocalEndpoints: ...

    @property
    def ledgers(self) -> dict[str, Ledger]: ...

    @property
    def tables(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def storage_write_tables(self) -> tuple[tuple[str, str], ...]: ...

    @property
    def dead_letter_table(self) -> tuple[str, str]: ...

    def store(self) -> StagingStore: ...


SAMPLE = 5  # offsets listed per kind of error in the report


@dataclass
class TableCount:
    """One table's share of the accounting: offsets expected there, rows found there, and
    the errors that concern it."""

    expected: int = 0
    rows: int = 0
    duplicates: int = 0
    """Copies beyond the first of one offset in this table."""
    losses: int = 0
    """Offsets expected here and found nowhere."""
    misplaced: int = 0
    """Offsets expected here found elsewhere only, or found here but expected elsewhere."""


@dataclass
class Accounting:
    produced: int = 0
    good: int = 0
    bad: int = 0
    rows_loaded: int = 0
    dead_letters_loaded: int = 0
    duplicates: int = 0
    losses: int = 0
    misplaced: int = 0
    unexpected: int = 0
    bad_by_reason: dict[str, int] = field(default_factory=dict)
    avro_left_in_staging: int = 0
    samples: dict[str, list[str]] = field(default_factory=dict)
    by_step: dict[str, dict[str, int]] = field(default_factory=dict)
    """Per suite step (the fault that produced the messages): produced, duplicates,
    losses, misplaced."""
    storage_write: dict[str, TableCount] = field(default_factory=dict)
    """Per ``delivery: storage_write`` table (``dataset.table``)."""

    def errors_of(self, step: str) -> int:
        counts = self.by_step.get(step, {})
        return sum(counts.get(k, 0) for k in ("duplicates", "losses", "misplaced"))

    @property
    def exactly_once(self) -> bool:
        return not (
            self.duplicates
            or self.losses
            or self.misplaced
            or self.unexpected
            or self.avro_left_in_staging
        )


# (topic, partition, offset) → [(where, detail)], where is "dataset.table"; detail the event
# date for table rows, the reason for dead letters.
Position = tuple[str, int, int]
Found = dict[Position, list[tuple[str, str]]]


def _query(world: World, sql: str) -> list[tuple]:
    from google.api_core.exceptions import NotFound

    client = local_bigquery_client(world.endpoints)
    try:
        return [tuple(row.values()) for row in client.query_and_wait(sql)]
    except NotFound:
        return []  # a table nothing was loaded into (yet)


def _topics_in(world: World) -> str:
    return ", ".join(f"'{t.replace(chr(39), '')}'" for t in world.ledgers)


def found_rows(world: World) -> Found:
    found: Found = defaultdict(list)
    topics = _topics_in(world)
    for dataset, table in world.tables:
        sql = (
            f"SELECT _kafka_topic, _kafka_partition, _kafka_offset, "
            f"CAST(_event_date AS STRING) FROM `{dataset}.{table}` "
            f"WHERE _kafka_topic IN ({topics})"
        )
        for topic, partition, offset, day in _query(world, sql):
            found[(topic, partition, offset)].append((f"{dataset}.{table}", day))
    dataset, table = world.dead_letter_table
    sql = (
        f"SELECT topic, `partition`, `offset`, reason FROM `{dataset}.{table}` "
        f"WHERE topic IN ({topics})"
    )
    for topic, partition, offset, reason in _query(world, sql):
        found[(topic, partition, offset)].append((f"{dataset}.{table}", reason))
    return found


def account(world: World) -> Accounting:
    """Compare the ledgers with BigQuery and the staging area."""
    placed = {
        (topic, p, o): (message, ledger.step_of.get((p, o), "?"))
        for topic, ledger in world.ledgers.items()
        for (p, o), message in ledger.placed.items()
    }
    found = found_rows(world)
    out = Accounting(
        produced=len(placed),
        good=sum(len(ledger.good) for ledger in world.ledgers.values()),
        bad=sum(len(ledger.bad) for ledger in world.ledgers.values()),
    )
    samples: dict[str, list[str]] = defaultdict(list)
    dead_table = ".".join(world.dead_letter_table)
    reasons: Counter[str] = Counter()
    by_step: dict[str, Counter[str]] = defaultdict(Counter)
    tables = {".".join(t): TableCount() for t in world.storage_write_tables}

    def note(kind: str, text: str) -> None:
        if len(samples[kind]) < SAMPLE:
            samples[kind].append(text)

    for where, (message, step_name) in placed.items():
        step = by_step[step_name]
        step["produced"] += 1
        copies = found.get(where, [])
        want = ".".join(message.expect_table) if message.expect_table else dead_table
        if want in tables:
            tables[want].expected += 1
        for name, count in tables.items():
            here = sum(1 for location, _ in copies if location == name)
            count.rows += here
            count.duplicates += max(here - 1, 0)
            if (here and want != name) or (want == name and copies and not here):
                count.misplaced += 1
        if not copies:
            out.losses += 1
            step["losses"] += 1
            if want in tables:
                tables[want].losses += 1
            note("losses", f"{where}")
            continue
        if len(copies) > 1:
            out.duplicates += len(copies) - 1
            step["duplicates"] += len(copies) - 1
            note("duplicates", f"{where} x{len(copies)}: {copies}")
        location, detail = copies[0]
        if message.expect_table is None:
            expected = (dead_table, str(message.expect_reason))
            if location == dead_table:
                reasons[detail] += 1
        else:
            expected = (".".join(message.expect_table), str(message.event_date))
        if (location, detail) != expected:
            out.misplaced += 1
            step["misplaced"] += 1
            note("misplaced", f"{where}: found {location} {detail}, expected {expected}")
    for where in found.keys() - placed.keys():
        out.unexpected += len(found[where])
        note("unexpected", f"{where}: {found[where]}")
    out.rows_loaded = sum(1 for rows in found.values() for loc, _ in rows if loc != dead_table)
    out.dead_letters_loaded = sum(
        1 for rows in found.values() for loc, _ in rows if loc == dead_table
    )
    out.bad_by_reason = dict(sorted(reasons.items()))
    listing = parse_listing(f.name for f in world.store().list())
    left = [a.name for a in listing.avro if a.key.topic in world.ledgers]
    out.avro_left_in_staging = len(left)
    for name in left[:SAMPLE]:
        note("avro_left_in_staging", name)
    out.samples = dict(samples)
    out.by_step = {
        name: {k: counts.get(k, 0) for k in ("produced", "duplicates", "losses", "misplaced")}
        for name, counts in by_step.items()
    }
    out.storage_write = tables
    return out
