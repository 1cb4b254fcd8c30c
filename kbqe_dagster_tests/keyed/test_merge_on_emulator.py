"""The MERGE and the history view on the BigQuery emulator, against an oracle, for random
change sets applied batch by batch: out-of-order versions, equal versions within and across
partitions, deletes and re-creates, redelivered copies, batches merged twice, and a merge cut
between its two hard-delete statements. After every batch the current table is each key's
greatest event (none for a hard-deleted key), and the view is one row per version. The deletes
here carry a full before image (REPLICA IDENTITY FULL); placeholders, key-only deletes and
truncates: test_merge_cdc_on_emulator.py."""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.keyed.merge import KeyedMerger, keyed_destinations
from kbqe_dagster.keyed.merge_sql import merge_sql
from kbqe_dagster.keyed.rows_sql import MergeSpec
from kbqe_dagster.resources.bigquery import EmulatorBigQueryLoads
from kbqe_dagster_tests.localstack.emulators import bq, emulators  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("emulators")]
END = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


@dataclass(frozen=True)
class Event:
    id: int
    name: str | None
    op: str
    version: int
    partition: int
    offset: int

    @property
    def order(self) -> tuple[int, int, int]:
        return (self.version, self.partition, self.offset)


def random_batches(seed: int, batches: int = 4, per_batch: int = 40) -> list[list[Event]]:
    rng = random.Random(seed)
    offsets = [0, 0, 0]
    out, seen = [], []
    for _ in range(batches):
        batch = []
        for _ in range(per_batch):
            roll = rng.random()
            if seen and roll < 0.1:  # a redelivered copy, at a later offset of its partition
                old = rng.choice(seen)
                event = Event(
                    old.id, old.name, old.op, old.version, old.partition, offsets[old.partition]
                )
            else:
                partition = rng.randrange(3) if roll < 0.2 else 0  # mostly one partition
                op = rng.choice(["c", "u", "u", "d"])
                event = Event(
                    rng.randrange(12),
                    f"n{rng.randrange(1000)}",
                    op,
                    rng.choice([100, 100, 200, 300, rng.randrange(1000)]),
                    partition,
                    offsets[partition],
                )
            offsets[event.partition] += 1
            batch.append(event)
            seen.append(event)
        out.append(batch)
    return out


def oracle_current(events: list[Event], hard: bool) -> set[tuple]:
    best: dict[int, Event] = {}
    for e in events:
        if e.id not in best or e.order > best[e.id].order:
            best[e.id] = e
    return {
        (e.id, e.name, e.op, e.version, e.op == "d", e.partition, e.offset)
        for e in best.values()
        if not (hard and e.op == "d")
    }


def oracle_history(events: list[Event]) -> set[tuple]:
    versions: dict[tuple[int, int], Event] = {}
    for e in events:
        slot = (e.id, e.version)
        if slot not in versions or e.order > versions[slot].order:
            versions[slot] = e
    rows = set()
    chain: dict[int, list[Event]] = {}
    for (_, _), e in sorted(versions.items()):
        chain.setdefault(e.id, []).append(e)
    for key_events in chain.values():
        for i, e in enumerate(key_events):
            nxt = key_events[i + 1] if i + 1 < len(key_events) else None
            rows.add(
                (
                    e.id,
                    e.name,
                    e.op,
                    e.op == "d",
                    _ts(e.version),
                    _ts(nxt.version) if nxt else END,
                    nxt is None,
                )
            )
    return rows


def _ts(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


@pytest.fixture
def dataset(bq):
    name = f"keyed_{uuid.uuid4().hex[:8]}"
    bq.create_dataset(name)
    yield name
    bq.delete_dataset(name, delete_contents=True, not_found_ok=True)


def _config(dataset: str, deletes: str):
    return parse_pipeline_config(
        {
            "version": 1,
            "topics": [
                {
                    "name": "customers",
                    "format": "debezium",
                    "routing": {"mode": "static", "dataset": dataset, "table": "customers"},
                    "keyed": {"key": ["id"], "deletes": deletes, "history": True},
                }
            ],
        }
    )


def _append(bq, dataset: str, events: list[Event]) -> None:
    values = ", ".join(
        f"({e.id}, {'NULL' if e.name is None else repr(e.name)}, '{e.op}', {e.version}, "
        f"{str(e.op == 'd').upper()}, "
        f"{e.partition}, {e.offset}, DATE '2024-11-19')"
        for e in events
    )
    bq.query(
        f"INSERT INTO `{dataset}.customers_changelog` (id, name, _op, _source_ts_ms, "
        f"_deleted, _kafka_partition, _kafka_offset, _event_date) VALUES {values}"
    ).result()


def _ranges(events: list[Event]) -> dict[int, list[tuple[int, int]]]:
    """Each partition's offsets of ``events`` as one span (a batch's offsets are contiguous)."""
    out: dict[int, tuple[int, int]] = {}
    for e in events:
        low, high = out.get(e.partition, (e.offset, e.offset))
        out[e.partition] = (min(low, e.offset), max(high, e.offset))
    return {p: [span] for p, span in out.items()}


@pytest.mark.parametrize("deletes", ["soft", "hard"])
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_the_merge_keeps_each_keys_greatest_event_batch_after_batch(bq, dataset, deletes, seed):
    bq.query(
        f"CREATE TABLE `{dataset}.customers_changelog` (_event_date DATE, "
        "_kafka_partition INT64, _kafka_offset INT64, _op STRING, _source_ts_ms INT64, "
        "_deleted BOOL, id INT64, name STRING)"
    ).result()
    [dest] = keyed_destinations(_config(dataset, deletes))
    merger = KeyedMerger(EmulatorBigQueryLoads(bq))
    rng = random.Random(seed)
    applied: list[Event] = []
    for number, batch in enumerate(random_batches(seed)):
        _append(bq, dataset, batch)
        applied += batch
        if deletes == "hard" and number > 0 and rng.random() < 0.5:
            # A merge cut after its first statement: the next one repairs the memory.
            spec = _spec(merger, dest, dataset)
            bq.query(merge_sql(spec, _ranges(batch))[0]).result()
        merger.merge(dest, _ranges(batch), jobs=1)
        if rng.random() < 0.5:  # the same rows merged again (a crash before the state write)
            merger.merge(dest, _ranges(batch), jobs=1)
        current = {
            tuple(r)
            for r in bq.query(
                f"SELECT id, name, _op, _source_ts_ms, _deleted, _kafka_partition, _kafka_offset "
                f"FROM `{dataset}.customers`"
            ).result()
        }
        assert current == oracle_current(applied, hard=deletes == "hard")
        history = {
            tuple(r)
            for r in bq.query(
                f"SELECT id, name, _op, _deleted, _valid_from, _valid_to, _is_current "
                f"FROM `{dataset}.customers_history`"
            ).result()
        }
        assert history == oracle_history(applied)


def _spec(merger: KeyedMerger, dest, dataset: str) -> MergeSpec:
    from kbqe_dagster.core.keyed.contract import DeleteMode

    return MergeSpec(
        target=merger.ref(dataset, "customers"),
        changelog=merger.ref(dataset, "customers_changelog"),
        key=("id",),
        row_columns=("id", "name"),
        deletes=DeleteMode.HARD,
        deleted_keys=merger.ref(dataset, "customers_deleted_keys"),
    )


@pytest.mark.parametrize("deletes", ["soft", "hard"])
def test_the_checks_see_a_correct_table_pass_and_each_kind_of_damage(bq, dataset, deletes):
    from kbqe_dagster.core.keyed.checks import keyed_verdicts

    bq.query(
        f"CREATE TABLE `{dataset}.customers_changelog` (_event_date DATE, "
        "_kafka_partition INT64, _kafka_offset INT64, _op STRING, _source_ts_ms INT64, "
        "_deleted BOOL, id INT64, name STRING)"
    ).result()
    [dest] = keyed_destinations(_config(dataset, deletes))
    merger = KeyedMerger(EmulatorBigQueryLoads(bq))
    [merged, late] = random_batches(7, batches=2)
    _append(bq, dataset, merged + late)
    merger.merge(dest, _ranges(merged), jobs=1, unmerged=_ranges(late))

    def verdicts(unmerged):
        return {v.name: v.passed for v in keyed_verdicts(merger.check(dest, unmerged))}

    # The second batch is loaded but not merged yet: the check leaves its rows out.
    assert all(verdicts(_ranges(late)).values())
    # Forgetting that it is unmerged makes the table look stale.
    assert verdicts({})["matches_changelog"] is False
    merger.merge(dest, _ranges(late), jobs=1)
    assert all(verdicts({}).values())

    table = f"`{dataset}.customers`"
    bq.query(
        f"UPDATE {table} SET name = 'tampered' WHERE id = (SELECT MIN(id) FROM {table})"
    ).result()
    assert verdicts({})["matches_changelog"] is False
    bq.query(f"INSERT INTO {table} SELECT * FROM {table} LIMIT 1").result()
    assert verdicts({})["keys_unique"] is False
    if deletes == "hard":
        bq.query(
            f"UPDATE {table} SET _deleted = TRUE WHERE id = (SELECT MAX(id) FROM {table})"
        ).result()
        assert verdicts({})["no_deleted_rows"] is False


# --- a topic keyed by its Kafka key (a compacted topic) -------------------------------------------
def _table_config(dataset: str, deletes: str):
    return parse_pipeline_config({"version": 1, "topics": [{
        "name": "customers",
        "routing": {"mode": "static", "dataset": dataset, "table": "customers"},
        "event_time": {"fields": [], "kafka_timestamp_fallback": True},
        "keyed": {"key_from": "kafka_key", "key_format": "json", "key": ["id"],
                  "key_types": {"id": "long"}, "deletes": deletes, "history": True},
    }]})  # fmt: skip


def _as_tombstones(batch: list[Event]) -> list[Event]:
    """A table topic's deletes are tombstones: the key and no values."""
    return [Event(e.id, None, e.op, e.version, e.partition, e.offset) if e.op == "d" else e
            for e in batch]  # fmt: skip


def _kafka_ordered(events: list[Event]) -> dict[int, list[Event]]:
    by_key: dict[int, list[Event]] = {}
    for e in sorted(events, key=lambda e: (e.partition, e.offset)):
        by_key.setdefault(e.id, []).append(e)
    return by_key


def _resolved(events: list[Event]) -> list[tuple[Event, str | None]]:
    """Each event with its row's name: its own, or a tombstone's the key's last value."""
    out, last = [], None
    for e in events:
        last = e.name if e.op != "d" else last
        out.append((e, last))
    return out


def test_a_table_topic_s_merge_keeps_each_key_s_last_offset_whatever_its_time(bq, dataset):
    """Ordered by Kafka: the greatest (partition, offset) wins though ``_source_ts_ms`` (the
    Kafka timestamp here) goes back and forth; a tombstone (key only) deletes its key, soft
    deletes keeping its last values; each event is a history version of its own. (Hard
    deletes: keyed/test_compacted_topic_on_local_stack.py.)"""
    deletes = "soft"
    bq.query(
        f"CREATE TABLE `{dataset}.customers_changelog` (_event_date DATE, "
        "_kafka_partition INT64, _kafka_offset INT64, _op STRING, _source_ts_ms INT64, "
        "_deleted BOOL, id INT64, name STRING)"
    ).result()
    [dest] = keyed_destinations(_table_config(dataset, deletes))
    merger = KeyedMerger(EmulatorBigQueryLoads(bq))
    applied: list[Event] = []
    for batch in random_batches(11, batches=2, per_batch=25):
        batch = _as_tombstones(batch)
        _append(bq, dataset, batch)
        applied += batch
        merger.merge(dest, _ranges(batch), jobs=1)
        expected = set()
        for events in _kafka_ordered(applied).values():
            winner, name = _resolved(events)[-1]
            if not (deletes == "hard" and winner.op == "d"):
                expected.add((winner.id, name, winner.op, winner.op == "d", winner.offset))
        current = bq.query(
            f"SELECT id, name, _op, _deleted, _kafka_offset FROM `{dataset}.customers`"
        ).result()
        assert {tuple(r) for r in current} == expected
    history = set()
    for events in _kafka_ordered(applied).values():
        resolved = _resolved(events)
        for i, (e, name) in enumerate(resolved):
            nxt = resolved[i + 1][0] if i + 1 < len(resolved) else None
            ends = _ts(nxt.version) if nxt else END
            history.add((e.id, name, e.op == "d", _ts(e.version), ends, nxt is None))
    view = bq.query(
        f"SELECT id, name, _deleted, _valid_from, _valid_to, _is_current "
        f"FROM `{dataset}.customers_history`"
    ).result()
    assert {tuple(r) for r in view} == history
