"""Which stage loop runs the loop sensor launches and stops (core/stage_runs/loop_plan.py): every
wanted topic held by a loop run, each looping run followed by one warm standby, and a deploy's
runs of the old pipeline stopped once a standby of the new one is warm."""

from __future__ import annotations

from kbqe_dagster.core.stage_runs.loop_plan import (
    LOOPING,
    WARM,
    LoopPlan,
    LoopRunView,
    plan_loop_runs,
)

WANTED = ("orders", "refunds")


def run(run_id: str, topics=WANTED, current=True, state=None, stopping=False) -> LoopRunView:
    return LoopRunView(run_id, frozenset(topics), current, state, stopping)


def test_with_no_run_in_flight_one_loop_run_holds_every_wanted_topic():
    assert plan_loop_runs(WANTED, []) == LoopPlan(launch=(WANTED,))


def test_a_run_still_starting_gets_no_standby_so_that_two_cold_starts_never_compete():
    assert plan_loop_runs(WANTED, [run("a")]) == LoopPlan()


def test_a_looping_run_gets_one_standby_of_its_topics():
    assert plan_loop_runs(WANTED, [run("a", state=LOOPING)]) == LoopPlan(standby=(WANTED,))
    for follower in (None, WARM):
        runs = [run("a", state=LOOPING), run("b", state=follower)]
        assert plan_loop_runs(WANTED, runs) == LoopPlan()


def test_the_standby_takes_only_the_topics_still_wanted_and_new_topics_get_a_run_of_their_own():
    runs = [run("a", topics=("orders", "gone"), state=LOOPING)]
    plan = plan_loop_runs(("orders", "returns"), runs)
    assert plan == LoopPlan(launch=(("returns",),), standby=(("orders",),))


def test_topics_held_by_an_ordinary_stage_run_are_left_to_it():
    assert plan_loop_runs(WANTED, [], held_by_other_runs={"refunds"}) == LoopPlan(
        launch=(("orders",),)
    )


def test_a_deploy_stops_an_old_standby_at_once_and_an_old_looping_run_once_a_new_one_is_warm():
    old_loop, old_standby = run("a", current=False, state=LOOPING), run("b", current=False)
    # The old standby stops; the old looping run gets a standby of the new pipeline.
    assert plan_loop_runs(WANTED, [old_loop, old_standby]) == LoopPlan(
        standby=(WANTED,), stop=("b",)
    )
    # Still starting: the old run keeps looping (no cold gap).
    assert plan_loop_runs(WANTED, [old_loop, run("c")]) == LoopPlan()
    # Warm: the old run is asked to stop; the new one loops once it ended.
    assert plan_loop_runs(WANTED, [old_loop, run("c", state=WARM)]) == LoopPlan(stop=("a",))
    # Asked already: asked once.
    stopping = run("a", current=False, state=LOOPING, stopping=True)
    assert plan_loop_runs(WANTED, [stopping, run("c", state=WARM)]) == LoopPlan()


def test_an_old_run_whose_topics_are_no_longer_wanted_stops_at_once():
    old = run("a", topics=("gone",), current=False, state=LOOPING)
    assert plan_loop_runs(WANTED, [old]) == LoopPlan(launch=(WANTED,), stop=("a",))


def test_without_standbys_old_runs_stop_at_once_and_a_looping_run_has_no_follower():
    runs = [run("a", current=False, state=LOOPING), run("b", topics=("returns",), state=LOOPING)]
    plan = plan_loop_runs((*WANTED, "returns"), runs, standby=False)
    assert plan == LoopPlan(stop=("a",))
