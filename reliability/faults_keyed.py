"""Faults of keyed tables: the merge SIGKILLed at each of its crash points.

A keyed corner of its own (kbqe_dagster/demo/debezium.py's :class:`KeyedRig`: two Debezium
topics, soft and hard deletes with history, a staging prefix, dataset and Dagster home of this
run). Per crash point, in a seeded order: produce a round of changes (inserts, updates,
deletes with tombstones, a same-millisecond re-create, redeliveries, an out-of-order version;
schema v2 from the second round), run ``kbqe run --until-idle`` with ``KBQE_CRASH_AT`` at the
point, which must die by SIGKILL, then run it again, which must exit 0 (its checks passed).
At the end both current tables and both histories must equal the oracle: no duplicated key,
no lost or stale row.

The points (keyed/merge.py): ``merge_statement_0`` — the current table merged, the hard-delete
memory not yet; ``merge_statement_1`` — the memory merged too, the history and the merge state
not yet; ``merge_before_state`` — a table merged, its merge state not written.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from kbqe_dagster.demo.debezium import CustomersTable, KeyedRig, wrong
from reliability.harness import SIGKILLED, Suite, SuiteFailure
from reliability.report import MERGE_KILL

CRASH_POINTS = ("merge_statement_0:1", "merge_statement_1:1", "merge_before_state:2")


def merge_kills(suite: Suite) -> None:
    started = time.monotonic()
    workdir = Path(tempfile.mkdtemp(prefix="kbqe-faults-keyed-"))
    rig = KeyedRig.create(suite.world.endpoints, workdir)
    table = CustomersTable(seed=suite.rnd.randrange(1 << 30))
    table.snapshot(suite.rnd.randint(10, 30))
    try:
        points = list(CRASH_POINTS)
        suite.rnd.shuffle(points)
        for number, point in enumerate(points, start=1):
            point_started = time.monotonic()
            table.schema_version = 1 if number == 1 else 2
            table.round(
                inserts=suite.rnd.randint(3, 8),
                updates=suite.rnd.randint(5, 12),
                deletes=suite.rnd.randint(2, 4),
            )
            rig.topics.produce(table)
            killed = rig.run_until_idle(crash_at=point)
            if killed.returncode not in (SIGKILLED, 0):
                raise SuiteFailure(
                    f"kbqe run with KBQE_CRASH_AT={point} exited "
                    f"{killed.returncode}: {killed.stderr.strip()[-300:]}"
                )
            again = rig.run_until_idle()
            if again.returncode != 0:
                raise SuiteFailure(
                    f"kbqe run after the merge kill at {point} exited "
                    f"{again.returncode}: {again.stderr.strip()[-300:]}"
                )
            suite.record(
                MERGE_KILL,
                number,
                killed.returncode == SIGKILLED,
                f"{point}; {len(table.changes)} changes so far; rerun ok",
                point_started,
            )
        differences = rig.differences()
        events = sum(len(rig.produced(mode)) for mode in rig.by_mode)
        suite.report.keyed = {
            "changes_produced": events,
            "rounds": len(points),
            "wrong": wrong(differences),
            **differences,
        }
        if wrong(differences):
            raise SuiteFailure(f"keyed tables differ from the oracle: {differences}")
    finally:
        rig.remove()
        suite.report.keyed_seconds = round(time.monotonic() - started, 1)
