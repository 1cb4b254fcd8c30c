"""What a real Debezium Postgres stream holds, merged on the BigQuery emulator: unchanged TOAST
values (the unavailable-value placeholder), deletes whose before image is only the key
(REPLICA IDENTITY DEFAULT), truncates, and primary-key updates. After every merge the current
table is the check's recomputation (0 extra, 0 missing), no placeholder is ever a value of the
current table or the history, and merging the same rows again changes nothing."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.keyed.contract import DEBEZIUM_UNAVAILABLE_VALUE as PH
from kbqe_dagster.keyed.merge import KeyedMerger, keyed_destinations
from kbqe_dagster.resources.bigquery import EmulatorBigQueryLoads
from kbqe_dagster_tests.localstack.emulators import bq, emulators  # noqa: F401 (fixtures)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("emulators")]
END = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)
COLUMNS = ("id", "name", "bio", "blob", "tags", "n")
"""``bio``, ``blob`` and ``tags`` stand for TOASTed text, bytea and text[] columns; ``n`` for
a column whose type cannot hold the placeholder."""


@dataclass
class Change:
    id: int
    op: str
    version: int
    name: str | None = None
    bio: str | None = None
    blob: bytes | None = None
    tags: list[str] = field(default_factory=list)
    n: int | None = None
    partition: int = 0
    offset: int = -1


def unchanged(id: int, version: int, name: str) -> Change:
    """An update that changed only ``name``: the TOASTed columns carry the placeholder."""
    return Change(id, "u", version, name, PH, PH.encode(), [PH], 7)


def key_only_delete(id: int, version: int) -> Change:
    """A delete under REPLICA IDENTITY DEFAULT: the before image holds only the key."""
    return Change(id, "d", version)


def truncate(version: int) -> Change:
    """As the stage side writes a truncate: no row values (0 for the NOT NULL key)."""
    return Change(0, "t", version)


class Table:
    """A keyed destination on the emulator, its changelog appended to batch by batch."""

    def __init__(self, bq, deletes: str) -> None:
        self.bq, self.dataset = bq, f"keyed_cdc_{uuid.uuid4().hex[:8]}"
        bq.create_dataset(self.dataset)
        bq.query(
            f"CREATE TABLE `{self.dataset}.t_changelog` (_event_date DATE, "
            "_kafka_partition INT64, _kafka_offset INT64, _op STRING, _source_ts_ms INT64, "
            "_deleted BOOL, id INT64, name STRING, bio STRING, blob BYTES, "
            "tags ARRAY<STRING>, n INT64)"
        ).result()
        config = parse_pipeline_config(
            {
                "version": 1,
                "topics": [
                    {
                        "name": "t",
                        "format": "debezium",
                        "routing": {"mode": "static", "dataset": self.dataset, "table": "t"},
                        "keyed": {"key": ["id"], "deletes": deletes, "history": True},
                    }
                ],
            }
        )
        [self.dest] = keyed_destinations(config)
        self.merger = KeyedMerger(EmulatorBigQueryLoads(bq))
        self.offsets = [0, 0]

    def merge(self, *changes: Change, recomputed: int = 0) -> None:
        """Append ``changes`` as one load job's rows and merge them, twice (the second merge
        must change nothing); the check then finds the table right. ``recomputed``: how many
        keys the first merge recomputes from their history (the others fold: events newer
        than their row); the second recomputes every key, since its rows are no longer new."""
        ranges: dict[int, list[tuple[int, int]]] = {}
        for c in changes:
            c.offset = self.offsets[c.partition]
            self.offsets[c.partition] += 1
            low, high = (ranges.get(c.partition) or [(c.offset, c.offset)])[0]
            ranges[c.partition] = [(min(low, c.offset), max(high, c.offset))]
        self.bq.query(
            f"INSERT INTO `{self.dataset}.t_changelog` (_event_date, _kafka_partition, "
            f"_kafka_offset, _op, _source_ts_ms, _deleted, {', '.join(COLUMNS)}) VALUES "
            + ", ".join(_values(c) for c in changes)
        ).result()
        first = self.merger.merge(self.dest, ranges, jobs=1)
        assert first.keys_recomputed == recomputed
        before = self.everything()
        replay = self.merger.merge(self.dest, ranges, jobs=1)
        assert replay.keys_merged == 0
        assert replay.keys_recomputed == len({c.id for c in changes if c.op != "t"})
        assert self.everything() == before
        check = self.merger.check(self.dest, {})
        assert (check.extra, check.missing, check.duplicate_keys) == (0, 0, 0)

    @property
    def hard(self) -> bool:
        return self.dest.topic.keyed.deletes.value == "hard"

    def current(self) -> dict[int, dict]:
        rows = self.bq.query(f"SELECT * FROM `{self.dataset}.t`").result()
        return {r["id"]: dict(r) for r in rows}

    def history(self, id: int) -> list[dict]:
        rows = self.bq.query(
            f"SELECT * FROM `{self.dataset}.t_history` WHERE id = {id} ORDER BY _valid_from"
        ).result()
        return [dict(r) for r in rows]

    def everything(self) -> list[tuple]:
        rows = self.bq.query(f"SELECT TO_JSON_STRING(t) AS j FROM `{self.dataset}.t` t").result()
        return sorted(r["j"] for r in rows)

    def no_placeholder_anywhere(self) -> None:
        for table in ("t", "t_history"):
            rows = self.bq.query(f"SELECT bio, blob, tags FROM `{self.dataset}.{table}`").result()
            for row in rows:
                assert PH not in (row["bio"], row["blob"] and row["blob"].decode()), table
                assert PH not in row["tags"], table

    def drop(self) -> None:
        self.bq.delete_dataset(self.dataset, delete_contents=True, not_found_ok=True)


def _values(c: Change) -> str:
    def s(v):
        return "NULL" if v is None else "'" + v + "'"

    blob = "NULL" if c.blob is None else f"CAST('{c.blob.decode()}' AS BYTES)"
    tags = "[" + ", ".join(s(t) for t in c.tags) + "]"
    deleted = str(c.op in ("d", "t")).upper()
    n = "NULL" if c.n is None else str(c.n)
    return (
        f"(DATE '2024-11-19', {c.partition}, {c.offset}, '{c.op}', {c.version}, {deleted}, "
        f"{c.id}, {s(c.name)}, {s(c.bio)}, {blob}, {tags}, {n})"
    )


def _ts(ms: int) -> datetime:
    return datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=ms)


@pytest.fixture(params=["soft", "hard"])
def table(request, bq):
    made = Table(bq, request.param)
    yield made
    made.drop()


def _values_of(row: dict) -> tuple:
    return tuple(row[c] for c in COLUMNS[1:])


LONG = ("A", "long bio", b"long blob", ["x", "y"], 1)


# --- unchanged TOAST values --------------------------------------------------------------------
def test_an_unchanged_toasted_value_keeps_the_insert_s_value_in_one_batch(table):
    table.merge(Change(1, "c", 100, *LONG), unchanged(1, 200, "B"))
    row = table.current()[1]
    assert _values_of(row) == ("B", "long bio", b"long blob", ["x", "y"], 7)
    assert (row["_op"], row["_source_ts_ms"]) == ("u", 200)
    versions = [_values_of(v) for v in table.history(1)]
    assert versions == [LONG, ("B", "long bio", b"long blob", ["x", "y"], 7)]
    table.no_placeholder_anywhere()


def test_an_unchanged_toasted_value_keeps_the_latest_real_value_across_batches(table):
    table.merge(Change(1, "c", 100, *LONG))
    table.merge(Change(1, "u", 150, "A2", "new bio", b"new blob", ["z"], 2))
    table.merge(unchanged(1, 200, "B"))
    table.merge(unchanged(1, 300, "C"))
    assert _values_of(table.current()[1]) == ("C", "new bio", b"new blob", ["z"], 7)
    assert [v["bio"] for v in table.history(1)] == ["long bio", "new bio", "new bio", "new bio"]
    table.no_placeholder_anywhere()


def test_an_insert_and_its_update_in_one_transaction_share_a_version(table):
    """Same source.ts_ms: one history version, the winner's, with the insert's values."""
    table.merge(Change(1, "c", 100, *LONG), unchanged(1, 100, "B"))
    assert _values_of(table.current()[1])[:2] == ("B", "long bio")
    [version] = table.history(1)
    assert (version["name"], version["bio"], version["tags"]) == ("B", "long bio", ["x", "y"])


def test_a_placeholder_without_an_earlier_real_value_becomes_null(table):
    """The snapshot was skipped: nothing ever told the value."""
    # Hard deletes: the key has no row, so it may have been deleted: its history is read.
    table.merge(unchanged(2, 100, "B"), recomputed=int(table.hard))
    row = table.current()[2]
    assert _values_of(row) == ("B", None, None, [], 7)
    [version] = table.history(2)
    assert (version["bio"], version["blob"], version["tags"]) == (None, None, [])
    table.no_placeholder_anywhere()


def test_a_real_null_is_a_value_not_a_placeholder(table):
    table.merge(Change(1, "c", 100, *LONG), Change(1, "u", 200, "B", None, None, [], None))
    assert _values_of(table.current()[1]) == ("B", None, None, [], None)


# --- deletes with a key-only before image ------------------------------------------------------
def test_a_key_only_delete_keeps_the_key_s_last_values(table):
    table.merge(Change(3, "c", 100, *LONG))
    table.merge(unchanged(3, 200, "B"), key_only_delete(3, 300))
    deleted = {"soft": True, "hard": False}[table.dest.topic.keyed.deletes.value]
    if deleted:
        row = table.current()[3]
        assert _values_of(row) == ("B", "long bio", b"long blob", ["x", "y"], 7)
        assert (row["_op"], row["_deleted"], row["_source_ts_ms"]) == ("d", True, 300)
    else:
        assert 3 not in table.current()
    last = table.history(3)[-1]
    assert (last["_op"], last["_deleted"], last["name"], last["bio"]) == (
        "d",
        True,
        "B",
        "long bio",
    )
    assert last["_is_current"]


def test_a_delete_of_a_key_never_seen_keeps_its_before_image(table):
    table.merge(Change(4, "d", 100, *LONG))
    if table.dest.topic.keyed.deletes.value == "soft":
        assert _values_of(table.current()[4]) == LONG
    else:
        assert table.current() == {}


def test_a_full_before_image_is_the_delete_s_values(table):
    """REPLICA IDENTITY FULL: the before image is the row, taken as it is."""
    table.merge(Change(6, "c", 100, *LONG))
    table.merge(Change(6, "d", 200, "Z", "z bio", b"z", ["z"], None))
    if table.dest.topic.keyed.deletes.value == "soft":
        assert _values_of(table.current()[6]) == ("Z", "z bio", b"z", ["z"], None)
    assert table.history(6)[-1]["name"] == "Z"


def test_a_late_older_update_gives_a_delete_its_values(table):
    """Out of order across merges: the rows are recomputed from the key's history."""
    table.merge(Change(5, "c", 100, *LONG), key_only_delete(5, 300))
    table.merge(Change(5, "u", 200, "late", "late bio", b"late", ["l"], 3), recomputed=1)
    if table.dest.topic.keyed.deletes.value == "soft":
        row = table.current()[5]
        assert _values_of(row) == ("late", "late bio", b"late", ["l"], 3)
        assert (row["_op"], row["_source_ts_ms"]) == ("d", 300)
    else:
        assert 5 not in table.current()


# --- truncates ---------------------------------------------------------------------------------
def test_a_truncate_deletes_every_older_row_and_older_events_never_revive_one(table):
    soft = table.dest.topic.keyed.deletes.value == "soft"
    table.merge(Change(0, "c", 100, *LONG), Change(1, "c", 100, *LONG))
    # Hard deletes: key 2 has no row and its event is older than the truncate of its batch.
    table.merge(Change(2, "c", 200, *LONG), truncate(500), recomputed=int(not soft))
    if soft:
        rows = table.current()
        assert {k: (r["_op"], r["_deleted"], r["_source_ts_ms"]) for k, r in rows.items()} == {
            k: ("t", True, 500) for k in (0, 1, 2)
        }
        assert all(_values_of(r) == LONG for r in rows.values())  # the values are kept
    else:
        assert table.current() == {}
    # An event older than the truncate, merged later (another partition), stays deleted; an
    # insert after it lives.
    # Key 1 is recomputed from its history: its row (soft) or the truncate that removed it
    # (hard) is newer than its event.
    table.merge(Change(1, "u", 400, "older", partition=1), Change(3, "c", 600, *LONG), recomputed=1)
    rows = table.current()
    assert not rows[3]["_deleted"]
    if soft:
        assert (rows[1]["_op"], rows[1]["_deleted"], rows[1]["name"]) == ("t", True, "older")
    else:
        assert set(rows) == {3}
    table.merge(Change(1, "c", 700, "back"))
    assert (table.current()[1]["name"], table.current()[1]["_deleted"]) == ("back", False)


def test_the_history_closes_every_open_version_at_a_truncate(table):
    table.merge(Change(1, "c", 100, *LONG), Change(2, "c", 200, *LONG))
    table.merge(truncate(500))
    table.merge(Change(1, "c", 700, "back"))
    [first, again] = table.history(1)
    assert (first["_valid_to"], first["_is_current"]) == (_ts(500), False)
    assert (again["_valid_from"], again["_valid_to"], again["_is_current"]) == (_ts(700), END, True)
    [only] = table.history(2)
    assert (only["_valid_to"], only["_is_current"]) == (_ts(500), False)
    assert table.history(0) == []  # the truncate's own row is no key's version


# --- primary-key updates -----------------------------------------------------------------------
def test_a_primary_key_update_deletes_the_old_key_and_creates_the_new_one(table):
    """Debezium: a delete of the old key (then its tombstone, never staged), a create of the
    new key, both of the same transaction."""
    table.merge(Change(10, "c", 100, *LONG))
    table.merge(key_only_delete(10, 200), Change(11, "c", 200, *LONG))
    rows = table.current()
    assert _values_of(rows[11]) == LONG and not rows[11]["_deleted"]
    if table.dest.topic.keyed.deletes.value == "soft":
        assert (rows[10]["_deleted"], _values_of(rows[10])) == (True, LONG)
    else:
        assert 10 not in rows
