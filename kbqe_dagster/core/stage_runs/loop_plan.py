"""Which stage loop runs the loop sensor launches and which it asks to stop, from the loop runs
in flight (defs/staging/sensors.py ``stage_loop_sensor``; defs/staging/loop_run.py runs them).

A loop run goes through three states, which it records on itself (``kbqe/loop_state``):
*starting* (no state yet: its run worker, its SparkSession), *warm* (Spark warmed up, waiting
for an older run holding its topics to end: a **standby**) and *looping* (staging its topics
round after round: the only one writing them). Two runs never loop over one topic at once:
a run loops only once no older stage run in flight holds any of its topics
(defs/staging/claims.py), whatever this plan says.

The plan keeps every wanted topic held by a looping run and each looping run followed by one
warm standby, so that the run's end (its worker killed, ``max_run_s``, a deploy) is followed
by the standby's first round within a second or two instead of a cold start (a sensor tick,
a run worker, a SparkSession: 20 s and more):

* the wanted topics no run in flight holds get a loop run;
* a looping run whose topics no newer, current run (launched with the code location's
  pipeline) holds gets a standby of its topics (those still wanted);
* a run of another pipeline (the code location reloaded since) is asked to stop: at once if
  it is not looping (nothing to hand over) or its topics are no longer wanted; once a
  current run holding its topics is warm if it loops, so that a deploy costs no cold start
  either.

Without standbys (``standby=False``) a run of another pipeline is asked to stop at once, and a
looping run gets no follower: its end is followed by a cold start at the sensor's next tick.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

WARM = "warm"
LOOPING = "looping"


@dataclass(frozen=True)
class LoopRunView:
    """What the plan needs of a loop run in flight."""

    run_id: str
    topics: frozenset[str]
    current: bool
    """Launched with the pipeline the code location loaded (its digest)."""
    state: str | None = None
    """None (starting), :data:`WARM` or :data:`LOOPING`."""
    stopping: bool = False
    """Already asked to stop (``kbqe/stop``)."""


@dataclass(frozen=True)
class LoopPlan:
    launch: tuple[tuple[str, ...], ...] = ()
    """Topic sets, each a new loop run (to loop as soon as it is warm)."""
    standby: tuple[tuple[str, ...], ...] = ()
    """Topic sets, each a new standby of the looping run holding them."""
    stop: tuple[str, ...] = ()
    """Runs to ask to stop after their round (launched with another pipeline)."""


def plan_loop_runs(
    wanted: Sequence[str],
    runs: Sequence[LoopRunView],
    held_by_other_runs: Iterable[str] = (),
    standby: bool = True,
) -> LoopPlan:
    """The plan for ``wanted`` (the topics that may write a storage_write table, in order),
    ``runs`` the loop runs in flight, oldest first, and the topics ordinary stage runs in
    flight hold."""
    held = set(held_by_other_runs).union(*(r.topics for r in runs))
    free = tuple(t for t in wanted if t not in held)
    live = [r for r in runs if not r.stopping]
    standbys: list[tuple[str, ...]] = []
    stop: list[str] = []
    for i, run in enumerate(live):
        mine = tuple(t for t in wanted if t in run.topics)
        if not run.current and (not standby or run.state != LOOPING or not mine):
            stop.append(run.run_id)
            continue
        if not standby or run.state != LOOPING:
            continue
        followers = [s for s in live[i + 1 :] if s.current and s.topics & run.topics]
        if not followers:
            standbys.append(mine)
        elif not run.current and any(s.state == WARM for s in followers):
            stop.append(run.run_id)
    return LoopPlan((free,) if free else (), tuple(standbys), tuple(stop))
