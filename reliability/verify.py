"""The exactly-once accounting: every produced offset against what BigQuery holds.

For each ``(partition, offset)`` of the ledger the run's tables must hold exactly one row —
in the destination table on the right event date for good input, in the dead-letter table
with the right reason for bad input. Anything else is counted:

- a **duplicate**: each copy beyond the first, wherever it is;
- a **loss**: an offset found nowhere;
- a **misplaced** offset: found once, but in the wrong table, on the wrong date or with the
  wrong reason (e.g. a good message dead-lettered while the registry was down);
- an **unexpected** row: an offset of this topic that was never produced.

The staging area is checked too: after the final load nothing may wait (an avro file left
is data not loaded) and nothing may be quarantined.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from kbqe_dagster.core.protocol.naming import parse_listing
from kbqe_dagster.localstack.clients import local_bigquery_client
from reliability.world import World

SAMPLE = 5  # offsets listed per kind of error in the report


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

    def errors_of(self, step: str) -> int:
        counts = self.by_step.get(step, {})
        return sum(counts.get(k, 0) for k in ("duplicates", "losses", "misplaced"))

    @property
    def exactly_once(self) -> bool:
        return not (self.duplicates or self.losses or self.misplaced or self.unexpected
                    or self.avro_left_in_staging)


# (partition, offset) → [(where, detail)], where is "dataset.table"; detail the event date
# for table rows, the reason for dead letters.
Found = dict[tuple[int, int], list[tuple[str, str]]]


def _query(world: World, sql: str) -> list[tuple]:
    from google.api_core.exceptions import NotFound

    client = local_bigquery_client(world.endpoints)
    try:
        return [tuple(row.values()) for row in client.query_and_wait(sql)]
    except NotFound:
        return []  # a table nothing was loaded into (yet)


def found_rows(world: World) -> Found:
    found: Found = defaultdict(list)
    topic = world.topic.replace("'", "")
    for dataset, table in world.tables:
        sql = (f"SELECT _kafka_partition, _kafka_offset, CAST(_event_date AS STRING) "
               f"FROM `{dataset}.{table}` WHERE _kafka_topic = '{topic}'")
        for partition, offset, day in _query(world, sql):
            found[(partition, offset)].append((f"{dataset}.{table}", day))
    dataset, table = world.dead_letter_table
    sql = f"SELECT `partition`, `offset`, reason FROM `{dataset}.{table}` WHERE topic = '{topic}'"
    for partition, offset, reason in _query(world, sql):
        found[(partition, offset)].append((f"{dataset}.{table}", reason))
    return found


def account(world: World) -> Accounting:
    """Compare the ledger with BigQuery and the staging area."""
    ledger = world.ledger
    found = found_rows(world)
    out = Accounting(produced=len(ledger), good=len(ledger.good), bad=len(ledger.bad))
    samples: dict[str, list[str]] = defaultdict(list)
    dead_table = ".".join(world.dead_letter_table)
    reasons: Counter[str] = Counter()

    by_step: dict[str, Counter[str]] = defaultdict(Counter)

    def note(kind: str, text: str) -> None:
        if len(samples[kind]) < SAMPLE:
            samples[kind].append(text)

    for where, message in ledger.placed.items():
        step = by_step[ledger.step_of.get(where, "?")]
        step["produced"] += 1
        copies = found.get(where, [])
        if not copies:
            out.losses += 1
            step["losses"] += 1
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
    for where in found.keys() - ledger.placed.keys():
        out.unexpected += len(found[where])
        note("unexpected", f"{where}: {found[where]}")
    out.rows_loaded = sum(1 for rows in found.values() for loc, _ in rows if loc != dead_table)
    out.dead_letters_loaded = sum(1 for rows in found.values() for loc, _ in rows if loc == dead_table)
    out.bad_by_reason = dict(sorted(reasons.items()))
    listing = parse_listing(f.name for f in world.store().list())
    left = [a.name for a in listing.avro if a.key.topic == world.topic]
    out.avro_left_in_staging = len(left)
    for name in left[:SAMPLE]:
        note("avro_left_in_staging", name)
    out.samples = dict(samples)
    out.by_step = {name: {k: counts.get(k, 0) for k in ("produced", "duplicates", "losses", "misplaced")}
                   for name, counts in by_step.items()}
    return out
