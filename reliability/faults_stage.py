"""Faults of the stage side: a stage run SIGKILLed at a random commit point, and two writers
of the same ranges at once (a zombie).

A killed run is restarted at once by an undisturbed stage pass, whose recovery (roll
forward of partially committed ranges, deletion of orphan avro files) is what the kill
tests. Whether the end result is exactly once is decided by the final accounting.
"""

from __future__ import annotations

import time
from collections import Counter, defaultdict

from kbqe_dagster.core.protocol.naming import parse_listing
from kbqe_dagster.core.protocol.offsets import OffsetRange
from reliability import children
from reliability.harness import CHILD_TIMEOUT, SIGKILLED, Suite, SuiteFailure, join
from reliability.report import (
    STAGE_KILL_AVRO,
    STAGE_KILL_DONE,
    STAGE_KILL_FIRST_RANGE,
    ZOMBIE,
    ZOMBIE_LATE,
)

POINTS = {STAGE_KILL_AVRO: "avro_uploaded", STAGE_KILL_DONE: "done_created"}


def _files_of(suite: Suite, rng: OffsetRange) -> int:
    """The avro files staging ``rng`` writes: one per distinct destination of its messages
    in the ledger (one schema per table; bad input → the dead-letter file)."""
    placed = suite.world.ledger.placed
    return len(
        {
            placed[(rng.partition, o)].expect_table
            for o in range(rng.start, rng.end_exclusive)
            if (rng.partition, o) in placed
        }
    )


def _files_ahead(suite: Suite) -> tuple[int, int]:
    """(ranges, avro files) the next stage run will write (the last step ended with a full
    restart, so planning here recovers nothing). A crash point numbered up to the file
    count always fires."""
    ranges = suite.world.prepare().plan.ranges
    return len(ranges), sum(_files_of(suite, rng) for rng in ranges)


def _staging_state(suite: Suite) -> tuple[int, int]:
    """(avro files without their done file, ranges whose done files are incomplete)."""
    listing = parse_listing(f.name for f in suite.world.store().list())
    topic = suite.world.topic
    done_keys = {d.key for d in listing.done if d.key.topic == topic}
    orphans = sum(1 for a in listing.avro if a.key.topic == topic and a.key not in done_keys)
    by_range: dict[tuple[int, int], list[bool]] = defaultdict(list)
    for a in listing.avro:
        if a.key.topic == topic:
            by_range[(a.key.partition, a.key.first_offset)].append(a.key in done_keys)
    partial = sum(1 for flags in by_range.values() if any(flags) and not all(flags))
    return orphans, partial


def stage_kill(suite: Suite, iteration: int, kind: str) -> None:
    """Produce a batch, SIGKILL a stage run of it at ``kind``'s point after a random number
    of passes, then restart."""
    started = time.monotonic()
    suite.produce(150, 300, f"iteration {iteration}")
    ranges, files = _files_ahead(suite)
    spec = f"{POINTS[kind]}:{suite.rnd.randint(1, max(1, files))}"
    code = suite.child(children.stage_run, suite.world.ctx, spec)
    if code not in (0, SIGKILLED):
        raise SuiteFailure(f"stage run with KBQE_CRASH_AT={spec} exited {code}")
    orphans, partial = _staging_state(suite)
    prep, results = suite.world.stage_pass()
    detail = (
        f"KBQE_CRASH_AT={spec} of {files} file(s) in {ranges} range(s); left {orphans} orphan avro file(s), "
        f"{partial} partly committed range(s); restart rolled forward "
        f"{len(prep.rolled_forward)} done file(s), deleted {len(prep.orphans_deleted)} "
        f"orphan(s), staged {len(results)} range(s)"
    )
    if code != SIGKILLED:
        detail = f"run finished before the crash point ({detail})"
    suite.record(kind, iteration, code == SIGKILLED, detail, started)


def first_range_killed(suite: Suite) -> None:
    """On a fresh topic, a stage run stages every other planned range first (Spark runs tasks
    in any order), then is killed while uploading the first range of partition 0. The
    restart must stage that range: offsets before a partition's first commit are never a
    place to start from. (The planner gives a partition without commits one range per run,
    so nothing of partition 0 can commit before its first range; were it split, its later
    ranges would commit first here and the loss would show.)"""
    started = time.monotonic()
    world = suite.world
    if any(f.name.endswith(".done") for f in world.store().list()):
        raise SuiteFailure(f"{STAGE_KILL_FIRST_RANGE} needs a topic without done files")
    suite.produce(400, 450, STAGE_KILL_FIRST_RANGE)
    ranges = world.prepare().plan.ranges
    first0 = min(r.start for r in ranges if r.partition == 0)
    before = [r for r in ranges if (r.partition, r.start) != (0, first0)]
    spec = f"avro_uploaded:{sum(_files_of(suite, r) for r in before) + 1}"
    code = suite.child(children.stage_run_first_range_last, world.ctx, spec)
    if code != SIGKILLED:
        raise SuiteFailure(f"{STAGE_KILL_FIRST_RANGE}: KBQE_CRASH_AT={spec} exited {code}")
    prep, results = world.stage_pass()
    restaged = any((r.partition, r.start) == (0, first0) for r in results)
    suite.record(
        STAGE_KILL_FIRST_RANGE,
        None,
        True,
        f"KBQE_CRASH_AT={spec}: {len(before)} other range(s) of {len(ranges)} "
        f"committed, killed in partition 0's first range; restart deleted "
        f"{len(prep.orphans_deleted)} orphan(s), staged {len(results)} range(s), "
        f"partition 0 from {first0}: {'yes' if restaged else 'NO'}",
        started,
    )


def zombie(suite: Suite) -> None:
    """Two writers stage the same planned ranges and commit at the same moment (Dagster's
    one-run-per-topic limit bypassed): each range is committed by at most one. Avro uploads
    and done files are both create-only, so a writer that finds any name of the range taken
    stops; when the two interleave, neither commits, and the next run stages that range."""
    started = time.monotonic()
    suite.produce(150, 250, ZOMBIE)
    ranges = list(suite.world.prepare().plan.ranges)
    if not ranges:
        raise SuiteFailure("zombie: nothing planned")
    # Kept referenced until the children end: a child unpickles them after start() returns.
    barrier, outcome = suite.procs.Barrier(2), suite.procs.Queue()
    read = {name: suite.procs.Event() for name in ("A", "B")}
    procs = [
        suite.spawn(
            children.zombie_writer, suite.world.ctx, ranges, name, read[name], barrier, outcome
        )
        for name in ("A", "B")
    ]
    rows = [outcome.get(timeout=CHILD_TIMEOUT) for _ in range(2 * len(ranges))]
    codes = [join(p) for p in procs]
    if codes != [0, 0]:
        raise SuiteFailure(f"zombie writers exited {codes}")
    per_range: dict[tuple[int, int], list[tuple[str, int | None, bool]]] = defaultdict(list)
    for name, partition, start, last, conflict in rows:
        per_range[(partition, start)].append((name, last, conflict))
    wins: Counter[str] = Counter()
    uncommitted: set[tuple[int, int]] = set()
    for where, attempts in sorted(per_range.items()):
        winners = [n for n, last, conflict in attempts if last is not None and not conflict]
        losers = [n for n, _, conflict in attempts if conflict]
        if len(winners) > 1 or len(winners) + len(losers) != 2:
            raise SuiteFailure(
                f"zombie: range {where} committed by {winners}, refused for "
                f"{losers}: create-only uploads and done files admit at most one"
            )
        if winners:
            wins[winners[0]] += 1
        else:
            uncommitted.add(where)
    _, results = suite.world.stage_pass()
    # Only the raced ranges matter: with a storage_write table in the pipeline file the
    # planner gives each partition one range per run, so the batch's later ranges (never
    # raced) are staged by this pass too.
    restaged = {(r.partition, r.start) for r in results} & set(per_range)
    if restaged != uncommitted:
        raise SuiteFailure(
            f"zombie: the next run staged {sorted(restaged)}, expected exactly "
            f"the ranges no writer committed {sorted(uncommitted)}"
        )
    suite.record(
        ZOMBIE,
        None,
        True,
        f"{len(ranges)} range(s) raced by two writers: A committed {wins['A']}, "
        f"B committed {wins['B']}, {len(uncommitted)} interleaved and left to the "
        f"next run, which staged exactly those of the raced ranges; every loser "
        f"stopped at a create-only name",
        started,
    )


def late_zombie(suite: Suite) -> None:
    """A zombie that reads a range, stalls while the real run commits it and the load step
    loads and deletes its avro files, then wakes and commits: its create-only uploads succeed
    (the names are free again) and only its done files are refused. The winner's manifests
    pin the winner's object versions, so the next load cycle must delete the re-uploads as
    leftovers and load none of them."""
    started = time.monotonic()
    suite.produce(100, 150, ZOMBIE_LATE)
    ranges = list(suite.world.prepare().plan.ranges)
    read_done, wake, outcome = suite.procs.Event(), suite.procs.Event(), suite.procs.Queue()
    proc = suite.spawn(
        children.zombie_writer, suite.world.ctx, ranges, "Z", read_done, wake, outcome
    )
    try:
        if not read_done.wait(CHILD_TIMEOUT):
            raise SuiteFailure("late zombie: the zombie never finished reading")
        _, staged = suite.world.stage_pass()
        loaded = sum(c.completed_files for c in suite.world.load_until_settled())
        wake.set()
        rows = [outcome.get(timeout=CHILD_TIMEOUT) for _ in ranges]
        code = join(proc)
    finally:
        wake.set()
        if proc.is_alive():
            proc.kill()
    if code != 0:
        raise SuiteFailure(f"late zombie exited {code}")
    refused = sum(1 for *_, conflict in rows if conflict)
    reports = suite.world.load_until_settled()
    again = sum(c.completed_files for c in reports)
    leftovers = sum(len(c.leftovers_deleted) for c in reports)
    suite.report.leftovers_deleted += leftovers
    if again:
        raise SuiteFailure(
            f"late zombie: the next load cycle loaded {again} re-uploaded file(s) again"
        )
    suite.record(
        ZOMBIE_LATE,
        None,
        True,
        f"{len(staged)} range(s) committed and {loaded} file(s) loaded before the "
        f"zombie woke; its done files were refused for {refused} of {len(rows)} "
        f"range(s); the next load cycle deleted {leftovers} re-uploaded file(s) as "
        f"leftovers and loaded none again",
        started,
    )
