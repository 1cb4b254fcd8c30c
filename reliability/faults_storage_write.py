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

:func:`keyed` injects the same faults into keyed Debezium topics whose changelogs are
``delivery: storage_write`` (a rig of their own, kbqe_dagster/demo/debezium.py): the restart
is ``kbqe run --until-idle``, which also runs the MERGE, and after each fault every change must
be in its changelog exactly once by (partition, offset) and the current tables and histories
must equal their oracle. Their ranges get two AppendRows requests from two envelopes of the
same row (Debezium's ``ts_us``/``ts_ns`` upgrade), not from two row schemas.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.protocol.delivery import parse_intent, ranges_to_roll_forward
from kbqe_dagster.core.protocol.naming import parse_listing
from kbqe_dagster.core.protocol.offsets import OffsetRange
from kbqe_dagster.core.record.wire import parse_frame
from kbqe_dagster.demo.debezium import MODES, CustomersTable, KeyedRig, wrong
from kbqe_dagster.localstack.endpoints import LOCAL_PROJECT
from kbqe_dagster.resources.staging_store import StagingLocation, StagingStore
from kbqe_dagster.staging.context import StageContext
from reliability import children
from reliability.harness import CHILD_TIMEOUT, SIGKILLED, Suite, SuiteFailure, join
from reliability.report import (
    BIGQUERY_RESTART,
    KEYED_BIGQUERY_RESTART,
    KEYED_SW_KILL_AFTER_LAST_APPEND,
    KEYED_SW_KILL_BETWEEN_APPENDS,
    KEYED_SW_KILL_INTENT,
    KEYED_SW_ZOMBIE,
    SW_KILL_AFTER_LAST_APPEND,
    SW_KILL_BETWEEN_APPENDS,
    SW_KILL_INTENT,
    SW_ZOMBIE,
)
from reliability.services import outage
from reliability.world import local_stage_context

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


def _open_intents(store: StagingStore, topic: str) -> tuple[OffsetRange, ...]:
    """The ranges of ``topic`` whose intents are open (appended maybe, not committed)."""
    names = [f.name for f in store.list()]
    return tuple(r for r in ranges_to_roll_forward(names) if r.topic == topic)


def _held(suite: Suite, table_of: tuple[str, str], rng: OffsetRange) -> int:
    """Rows of ``rng`` the storage_write table ``table_of`` holds now."""
    from reliability.verify import _query

    dataset, table = table_of
    sql = (
        f"SELECT COUNT(*) FROM `{dataset}.{table}` WHERE _kafka_topic = '{rng.topic}' "
        f"AND _kafka_partition = {rng.partition} AND _kafka_offset BETWEEN {rng.start} "
        f"AND {rng.last}"
    )
    rows = _query(suite.world, sql)
    return int(rows[0][0]) if rows else 0


def _replaced(store: StagingStore, topic: str) -> tuple[int, int]:
    """(intents of ``topic`` that chose a new stream over rows already in the table, the
    rows they did not append again), read before retention deletes committed intents."""
    intents = [
        i for i in parse_listing(f.name for f in store.list()).intents if i.key.topic == topic
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
        left_open = _open_intents(world.store(), world.sw_topic)
        held = _held(suite, world.datasets.orders_live, rng)
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


def _race(suite: Suite, ctx: StageContext, label: str) -> tuple[tuple[OffsetRange, ...], str]:
    """Two stage processes of ``ctx``'s topic on the same range: the first pauses right after
    its first append (its intent open), the second, started then, rolls that intent forward
    and commits; then the first wakes. Raises when either did not exit cleanly or the first
    also committed the range; else (the intents raced for, what happened)."""
    store = ctx.staging.open()
    with _paused_at_append(suite, ctx, f"{label}: the first writer never appended") as first:
        raced = _open_intents(store, ctx.topic_name)
        code = suite.child(children.stage_run, ctx, None, 1)
        during, first_code = first.finish()
    if code != 0 or first_code != 0:
        raise SuiteFailure(f"{label}: the second writer exited {code}, the first {first_code}")
    paused = during["paused_in"]
    committed_by_first = [c for c in during["committed"] if c.split("..")[0] == paused]
    if committed_by_first:
        raise SuiteFailure(
            f"{label}: the first writer also committed {committed_by_first} after the second had"
        )
    if paused is None:
        raced = ()  # nothing was raced for: not injected
    refused = [_short(f) for f in during["failures"]] + [
        f"{c}: done files refused (create-only)" for c in during["conflicts"]
    ]
    return raced, (
        f"first writer paused after its first append in range {paused} "
        f"(open intent(s) {[str(r) for r in raced]}); the second rolled it forward and "
        f"committed; the first, woken, committed {len(during['committed'])} range(s) "
        f"and was refused for {len(refused)}: {' | '.join(refused)}"
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
    raced, what = _race(suite, world.ctx_of(world.sw_topic), "sw zombie")
    _, results = world.stage_pass(topic=world.sw_topic)
    suite.record(
        SW_ZOMBIE,
        None,
        bool(raced),
        f"{what}; the next pass staged {len(results)} range(s)",
        started,
    )


def _restart_emulator(
    suite: Suite, ctx: StageContext, table_of: tuple[str, str], label: str
) -> tuple[tuple[OffsetRange, ...], str]:
    """Stop and start the BigQuery emulator while a stage run of ``ctx``'s topic is paused
    right after its first append, then let the run go on. Raises when the run did not exit
    cleanly; else (the intents open during the outage, what happened)."""
    store = ctx.staging.open()
    with _paused_at_append(suite, ctx, f"{label}: the stage run never appended") as run:
        raced = _open_intents(store, ctx.topic_name)
        with outage("bigquery", suite.world.endpoints) as down:
            down.restore()
        during, code = run.finish()
    if code != 0:
        raise SuiteFailure(f"{label}: the stage run exited {code}")
    held = sum(_held(suite, table_of, r) for r in raced)
    return raced, (
        f"emulator down {down.seconds:.1f}s while range {during['paused_in']} was "
        f"between appends (the table held {held} of its rows); the run: "
        f"{len(during['committed'])} committed, failures: "
        f"{' | '.join(_short(f) for f in during['failures']) or 'none'}"
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
    raced, what = _restart_emulator(
        suite, world.ctx_of(world.sw_topic), world.datasets.orders_live, "bigquery restart"
    )
    prep, results = world.stage_pass(topic=world.sw_topic)
    replaced, skipped = _replaced(world.store(), world.sw_topic)
    left = _open_intents(world.store(), world.sw_topic)
    if left:
        raise SuiteFailure(f"bigquery restart: intents still open after the restart: {left}")
    suite.record(
        BIGQUERY_RESTART,
        None,
        bool(raced),
        f"{what}; the restart rolled forward "
        f"{len(prep.plan.ranges)} range(s), {replaced} intent(s) on a new stream "
        f"left {skipped} row(s) already in the table out; staged {len(results)} "
        f"range(s)",
        started,
    )


# --- keyed topics whose changelogs are delivery: storage_write ----------------------------------
KEYED = {
    SW_KILL_INTENT: KEYED_SW_KILL_INTENT,
    SW_KILL_BETWEEN_APPENDS: KEYED_SW_KILL_BETWEEN_APPENDS,
    SW_KILL_AFTER_LAST_APPEND: KEYED_SW_KILL_AFTER_LAST_APPEND,
    SW_ZOMBIE: KEYED_SW_ZOMBIE,
    BIGQUERY_RESTART: KEYED_BIGQUERY_RESTART,
}
KEYED_PARTITIONS = 2


@dataclass
class _Keyed:
    """A keyed rig (kbqe_dagster/demo/debezium.py) whose two Debezium topics' changelogs are
    ``delivery: storage_write``, the source table behind them, and under which envelope each
    change was produced. The restart after each fault is ``kbqe run --until-idle``: it rolls
    the open intents forward, stages the rest and merges (``merge_every`` aside, forced)."""

    suite: Suite
    rig: KeyedRig
    table: CustomersTable
    precise: bool = False
    envelope_of: dict[tuple[str, int, int], bool] = field(default_factory=dict)

    def produce(self) -> None:
        """A round of changes in two halves, the connector upgraded (or rolled back) between
        them (:func:`~kbqe_dagster.demo.debezium.envelope_schema`'s ``ts_precision``): each
        partition's next range holds changes of two value schema ids, so its changelog rows
        go as two AppendRows requests (a crash point between them exists). The row is the
        same under both envelopes, so the oracle does not care."""
        rnd = self.suite.rnd
        for _ in range(2):
            self.table.round(
                inserts=rnd.randint(2, 5), updates=rnd.randint(3, 8), deletes=rnd.randint(1, 2)
            )
            sent = {t: len(ps) for t, ps in self.rig.topics.produced.items()}
            self.rig.topics.produce(self.table, ts_precision=self.precise)
            for topic, placed in self.rig.topics.produced.items():
                for p in placed[sent[topic] :]:
                    if not p.change.is_tombstone:
                        self.envelope_of[(topic, p.partition, p.offset)] = self.precise
            self.precise = not self.precise

    def ctx(self, mode: str) -> StageContext:
        config = parse_pipeline_config(
            yaml.safe_load(Path(self.rig.env["KBQE_PIPELINE_CONFIG"]).read_text()),
            source=f"keyed rig {self.rig.run}",
        )
        staging = StagingLocation(
            self.rig.env["KBQE_STAGING_URL"], self.suite.world.endpoints.gcs_url, LOCAL_PROJECT
        )
        return local_stage_context(
            self.suite.world.endpoints, staging, config, self.rig.by_mode[mode]
        )

    def changelog(self, mode: str) -> tuple[str, str]:
        return (self.rig.dataset, f"customers_{mode}_changelog")

    def requests(self, rng: OffsetRange) -> int:
        """AppendRows requests of ``rng``'s changelog rows: one per envelope among them."""
        return len(
            {
                precise
                for (topic, partition, offset), precise in self.envelope_of.items()
                if (topic, partition) == (rng.topic, rng.partition)
                and rng.start <= offset < rng.end_exclusive
            }
        )

    def restart(self, kind: str) -> None:
        """``kbqe run --until-idle``, which must exit 0 (its keyed checks passed) and leave
        no intent open."""
        done = self.rig.run_until_idle()
        if done.returncode != 0:
            raise SuiteFailure(
                f"{kind}: kbqe run after the fault exited {done.returncode}: "
                f"{done.stderr.strip()[-300:]}"
            )
        store = self.ctx(MODES[0]).staging.open()
        left = [r for mode in MODES for r in _open_intents(store, self.rig.by_mode[mode])]
        if left:
            raise SuiteFailure(f"{kind}: intents still open after kbqe run: {left}")

    def accounting(self) -> dict:
        """Per mode: the changelog by (partition, offset) and the merged tables against the
        oracle; the sums of duplicates, losses and everything wrong."""
        differences = self.rig.differences()
        changelogs = {mode: self.rig.changelog_accounting(mode) for mode in MODES}
        out: dict = {
            "changes_produced": sum(len(self.rig.produced(mode)) for mode in MODES),
            "changelog_duplicates": sum(c["duplicates"] for c in changelogs.values()),
            "changelog_losses": sum(c["losses"] for c in changelogs.values()),
            "wrong": wrong(differences)
            + sum(c["duplicates"] + c["losses"] + c["unexpected"] for c in changelogs.values()),
        }
        for mode in MODES:
            out[mode] = {"changelog": changelogs[mode], **differences[mode]}
        return out

    def check(self, kind: str) -> dict:
        counts = self.accounting()
        if counts["wrong"]:
            raise SuiteFailure(f"{kind}: keyed storage_write tables differ: {counts}")
        return counts


def _keyed_kill(suite: Suite, keyed: _Keyed, point: str) -> tuple[bool, str]:
    mode = suite.rnd.choice(MODES)
    ctx, spec = keyed.ctx(mode), POINTS[point]
    code = suite.child(children.stage_run, ctx, spec, 1)
    if code not in (0, SIGKILLED):
        raise SuiteFailure(f"keyed storage_write stage run with KBQE_CRASH_AT={spec} exited {code}")
    left_open = _open_intents(ctx.staging.open(), ctx.topic_name)
    requests = max((keyed.requests(r) for r in left_open), default=0)
    held = sum(_held(suite, keyed.changelog(mode), r) for r in left_open)
    keyed.restart(KEYED[point])
    between = point != SW_KILL_BETWEEN_APPENDS or requests >= 2
    return code == SIGKILLED and bool(left_open) and between, (
        f"KBQE_CRASH_AT={spec} on {mode} ({ctx.topic_name}); left open intent(s) "
        f"{[str(r) for r in left_open]} ({requests} request(s), the changelog holding {held} "
        f"of their rows); kbqe run rolled them forward and merged"
    )


def _keyed_zombie(suite: Suite, keyed: _Keyed) -> tuple[bool, str]:
    mode = suite.rnd.choice(MODES)
    raced, what = _race(suite, keyed.ctx(mode), "keyed sw zombie")
    requests = max((keyed.requests(r) for r in raced), default=0)
    keyed.restart(KEYED_SW_ZOMBIE)
    return bool(raced) and requests >= 2, (
        f"{mode}: {what} ({requests} request(s)); kbqe run merged"
    )


def _keyed_bigquery_restart(suite: Suite, keyed: _Keyed) -> tuple[bool, str]:
    mode = suite.rnd.choice(MODES)
    ctx = keyed.ctx(mode)
    raced, what = _restart_emulator(suite, ctx, keyed.changelog(mode), "keyed bigquery restart")
    requests = max((keyed.requests(r) for r in raced), default=0)
    keyed.restart(KEYED_BIGQUERY_RESTART)
    replaced, skipped = _replaced(ctx.staging.open(), ctx.topic_name)
    return bool(raced) and requests >= 2, (
        f"{mode}: {what} ({requests} request(s)); kbqe run rolled forward, {replaced} "
        f"intent(s) on a new stream left {skipped} row(s) already in the changelog out, "
        f"and merged"
    )


def keyed(suite: Suite) -> None:
    """Every fault above on keyed tables: two Debezium topics (soft and hard deletes, with
    history) whose changelogs are ``delivery: storage_write``. Per fault, in a seeded order:
    produce a round (:meth:`_Keyed.produce`), inject the fault into a stage run of one of the
    topics, restart with ``kbqe run --until-idle`` (roll forward, stage, merge), and check:
    every change in its changelog exactly once by (partition, offset), and the current table
    and history equal to the oracle (reliability/faults_keyed.py's, demo/debezium.py). A
    fault's error names it."""
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="kbqe-faults-keyed-sw-"))
    rig = KeyedRig.create(
        suite.world.endpoints, workdir, partitions=KEYED_PARTITIONS, delivery="storage_write"
    )
    keyed = _Keyed(suite, rig, CustomersTable(seed=suite.rnd.randrange(1 << 30)))
    keyed.table.partitions = KEYED_PARTITIONS
    keyed.table.snapshot(suite.rnd.randint(10, 20))
    kinds = list(KEYED)
    suite.rnd.shuffle(kinds)
    try:
        for kind in kinds:
            fault_started = time.monotonic()
            keyed.produce()
            if kind == SW_ZOMBIE:
                injected, detail = _keyed_zombie(suite, keyed)
            elif kind == BIGQUERY_RESTART:
                injected, detail = _keyed_bigquery_restart(suite, keyed)
            else:
                injected, detail = _keyed_kill(suite, keyed, kind)
            counts = keyed.check(KEYED[kind])
            suite.record(
                KEYED[kind],
                None,
                injected,
                f"{detail}; {counts['changes_produced']} changes so far, none wrong",
                fault_started,
            )
    finally:
        try:
            counts = keyed.accounting()
        except Exception as error:  # noqa: BLE001 - the step's own error is the one to report
            counts = {"wrong": None, "accounting_failed": f"{type(error).__name__}: {error}"}
        suite.report.keyed_storage_write = {
            **counts,
            "faults": len(kinds),
            "seconds": round(time.monotonic() - started, 1),
        }
        rig.remove()
