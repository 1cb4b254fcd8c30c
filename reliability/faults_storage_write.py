"""Faults of ``delivery: storage_write``: a stage run SIGKILLed at each crash point of the
Storage Write protocol, a zombie writer of the same range between two appends, and the
BigQuery emulator restarted while a stage run is between two appends.

They run on the world's second topic (:attr:`World.sw_topic`), whose ranges feed the
storage_write table ``orders_live`` and the loaded ``page_views`` and dead-letter tables at
once. Every range of it has orders of two schema ids (v1, v2), so its rows for
``orders_live`` go as two AppendRows requests: a crash point between them exists.

The protocol (core/protocol/delivery.py, docs/architecture.md "Storage Write delivery")
appends to application-created **COMMITTED** streams at explicit offsets, so the issue's
"between finalize and commit" point does not exist here: FinalizeWriteStream and
BatchCommitWriteStreams belong to PENDING streams, which the protocol does not use. Why
COMMITTED with offsets: a row is visible as soon as its append is answered (seconds, the
point of the delivery), one stream per (table, partition) is reused across ranges (a PENDING
stream is single-use: one CreateWriteStream per range and table, against a rate-limited,
quota-bound call), and the offsets plus the intent give exactly once without a second
commit step whose own crash points would need recording; ``ALREADY_EXISTS`` at an offset
tells a retry what landed. The crash points are:

- ``storage_write_intent``: the intent created, nothing appended;
- ``storage_write_appended:1``: the first request answered, the second not sent (between
  appends);
- ``storage_write_delivered``: every request answered, no done file yet (after the last
  append, before the done file).

Each kill is followed by a restart (an undisturbed stage pass), which must roll the intent's
exact range forward. The final accounting counts duplicates and losses per table.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from kbqe_dagster.core.protocol.delivery import parse_intent, ranges_to_roll_forward
from kbqe_dagster.core.protocol.naming import parse_listing
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.wire import parse_frame
from reliability import children
from reliability.harness import CHILD_TIMEOUT, SIGKILLED, Suite, SuiteFailure, join
from reliability.report import (
    BIGQUERY_RESTART,
    SW_KILL_AFTER_LAST_APPEND,
    SW_KILL_BETWEEN_APPENDS,
    SW_KILL_INTENT,
    SW_ZOMBIE,
)
from reliability.services import outage

POINTS = {
    SW_KILL_INTENT: "storage_write_intent:1",
    SW_KILL_BETWEEN_APPENDS: "storage_write_appended:1",
    SW_KILL_AFTER_LAST_APPEND: "storage_write_delivered:1",
}
EVENT_WAIT = 120.0


def _produce(suite: Suite, step: str) -> int:
    return suite.produce_to(suite.world.sw_topic, 80, 110, step)


def _first_appending(suite: Suite) -> tuple[OffsetRange, int]:
    """The first planned range of the topic with rows for the storage_write table (a stage
    run of one range at a time appends there first), and its requests: one per schema id."""
    world = suite.world
    placed = world.ledgers[world.sw_topic].placed
    live = world.datasets.orders_live
    for rng in world.prepare(world.sw_topic).plan.ranges:
        schema_ids = {
            parse_frame(placed[(rng.partition, o)].value).schema_id
            for o in range(rng.start, rng.end_exclusive)
            if (rng.partition, o) in placed and placed[(rng.partition, o)].expect_table == live
        }
        if schema_ids:
            return rng, len(schema_ids)
    raise SuiteFailure("storage_write: no planned range has rows for the storage_write table")


def _short(failure: str) -> str:
    """A child's failure line without the stream and intent names in its middle: the range,
    the error type and the end of the message (what happened)."""
    head, _, rest = failure.partition(": ")
    kind, _, message = rest.partition(": ")
    return f"{head}: {kind}: …{message[-150:]}" if len(message) > 150 else failure


def _open_intents(suite: Suite) -> tuple[OffsetRange, ...]:
    names = [f.name for f in suite.world.store().list()]
    return tuple(r for r in ranges_to_roll_forward(names) if r.topic == suite.world.sw_topic)


def _held(suite: Suite, rng: OffsetRange) -> int:
    """Rows of ``rng`` the storage_write table holds now."""
    from reliability.verify import _query

    dataset, table = suite.world.datasets.orders_live
    sql = (
        f"SELECT COUNT(*) FROM `{dataset}.{table}` WHERE _kafka_topic = '{rng.topic}' "
        f"AND _kafka_partition = {rng.partition} AND _kafka_offset BETWEEN {rng.start} "
        f"AND {rng.last}"
    )
    rows = _query(suite.world, sql)
    return int(rows[0][0]) if rows else 0


def _replaced(suite: Suite) -> tuple[int, int]:
    """(intents of the topic that chose a new stream over rows already in the table, the
    rows they did not append again), read before retention deletes committed intents."""
    store = suite.world.store()
    intents = [
        i
        for i in parse_listing(f.name for f in store.list()).intents
        if i.key.topic == suite.world.sw_topic
    ]
    parsed = [parse_intent(store.read_bytes(i.name), i) for i in intents]
    skipping = [p for p in parsed if p.delivered_before]
    return len(skipping), sum(len(p.delivered_before) for p in skipping)


@dataclass
class _PausedWriter:
    """A stage run in a child process, paused right after its first append."""

    proc: Any
    resume: Any
    outcome: Any

    def finish(self) -> tuple[dict, int]:
        """Let it go on; what it reported and its exit code."""
        self.resume.set()
        return self.outcome.get(timeout=CHILD_TIMEOUT), join(self.proc)


@contextmanager
def _paused_at_append(suite: Suite, ctx: Any, never_appended: str) -> Iterator[_PausedWriter]:
    """A stage run of ``ctx`` paused after its first append (``never_appended``: the failure
    when it does not get there); always resumed, and killed if still alive, on the way out."""
    appended, resume, outcome = suite.procs.Event(), suite.procs.Event(), suite.procs.Queue()
    proc = suite.spawn(children.stage_run_paused_at_append, ctx, appended, resume, outcome)
    try:
        if not appended.wait(EVENT_WAIT):
            raise SuiteFailure(never_appended)
        yield _PausedWriter(proc, resume, outcome)
    finally:
        resume.set()
        if proc.is_alive():
            proc.kill()


def kills(suite: Suite) -> None:
    """SIGKILL a stage run of the topic at each Storage Write crash point, in a seeded order,
    and restart it each time."""
    points = list(POINTS)
    suite.rnd.shuffle(points)
    world = suite.world
    for kind in points:
        started = time.monotonic()
        _produce(suite, kind)
        rng, requests = _first_appending(suite)
        spec = POINTS[kind]
        code = suite.child(children.stage_run, world.ctx_of(world.sw_topic), spec, 1)
        if code not in (0, SIGKILLED):
            raise SuiteFailure(f"storage_write stage run with KBQE_CRASH_AT={spec} exited {code}")
        left_open = _open_intents(suite)
        held = _held(suite, rng)
        prep, results = world.stage_pass(topic=world.sw_topic)
        rolled = [r for r in left_open if r in prep.plan.ranges]
        if left_open and not rolled:
            raise SuiteFailure(
                f"{kind}: the restart did not restage the open intents' ranges "
                f"{left_open} first (planned {prep.plan.ranges})"
            )
        between = kind != SW_KILL_BETWEEN_APPENDS or requests >= 2
        injected = code == SIGKILLED and bool(left_open) and between
        suite.record(
            kind,
            None,
            injected,
            f"KBQE_CRASH_AT={spec} in {rng} ({requests} request(s) to "
            f"{'.'.join(world.datasets.orders_live)}); left {len(left_open)} open "
            f"intent(s), the table holding {held} of the range's rows; the restart "
            f"rolled forward {len(rolled)} intent range(s) and staged {len(results)} "
            f"range(s)",
            started,
        )


def zombie(suite: Suite) -> None:
    """Two stage processes on the same range: the first pauses between two appends (its
    intent open, one request in the stream); the second, started then, rolls that intent
    forward (its first request answers ALREADY_EXISTS, the rest is appended) and commits.
    When the first wakes, its next append meets rows it did not write at an intent it created
    itself: it refuses to go on (the range stays the second one's), or its done files are
    refused (create-only). One copy of every row, one committer per range."""
    started = time.monotonic()
    world = suite.world
    _produce(suite, SW_ZOMBIE)
    ctx = world.ctx_of(world.sw_topic)
    with _paused_at_append(suite, ctx, "sw zombie: the first writer never appended") as first:
        raced = _open_intents(suite)
        code = suite.child(children.stage_run, ctx, None, 1)
        during, first_code = first.finish()
    if code != 0 or first_code != 0:
        raise SuiteFailure(f"sw zombie: the second writer exited {code}, the first {first_code}")
    paused = during["paused_in"]
    committed_by_first = [c for c in during["committed"] if c.split("..")[0] == paused]
    if committed_by_first:
        raise SuiteFailure(
            f"sw zombie: the first writer also committed {committed_by_first} after the second had"
        )
    _, results = world.stage_pass(topic=world.sw_topic)
    refused = [_short(f) for f in during["failures"]] + [
        f"{c}: done files refused (create-only)" for c in during["conflicts"]
    ]
    suite.record(
        SW_ZOMBIE,
        None,
        bool(raced) and paused is not None,
        f"first writer paused after its first append in range {paused} "
        f"(open intent(s) {[str(r) for r in raced]}); the second rolled it forward and "
        f"committed; the first, woken, committed {len(during['committed'])} range(s) "
        f"and was refused for {len(refused)}: {' | '.join(refused)}; the next "
        f"pass staged {len(results)} range(s)",
        started,
    )


def bigquery_restart(suite: Suite) -> None:
    """The BigQuery emulator stops and starts while a stage run is between two appends of a
    range: the emulator keeps its tables (DuckDB on disk) and forgets its streams. The run's
    next append finds its stream gone and the range fails; the restart replaces the intent
    (a new stream, the rows the table already holds recorded and not appended again) and
    commits it: exactly once, no range stuck on a stream that no longer exists."""
    started = time.monotonic()
    world = suite.world
    _produce(suite, BIGQUERY_RESTART)
    ctx = world.ctx_of(world.sw_topic)
    with _paused_at_append(suite, ctx, "bigquery restart: the stage run never appended") as run:
        raced = _open_intents(suite)
        with outage("bigquery", world.endpoints) as down:
            down.restore()
        during, code = run.finish()
    if code != 0:
        raise SuiteFailure(f"bigquery restart: the stage run exited {code}")
    held = sum(_held(suite, r) for r in raced)
    prep, results = world.stage_pass(topic=world.sw_topic)
    replaced, skipped = _replaced(suite)
    left = _open_intents(suite)
    if left:
        raise SuiteFailure(f"bigquery restart: intents still open after the restart: {left}")
    suite.record(
        BIGQUERY_RESTART,
        None,
        bool(raced),
        f"emulator down {down.seconds:.1f}s while range {during['paused_in']} was "
        f"between appends (the table held {held} of its rows); the run: "
        f"{len(during['committed'])} committed, failures: "
        f"{' | '.join(_short(f) for f in during['failures']) or 'none'}; the restart "
        f"rolled forward "
        f"{len(prep.plan.ranges)} range(s), {replaced} intent(s) on a new stream "
        f"left {skipped} row(s) already in the table out; staged {len(results)} "
        f"range(s)",
        started,
    )
