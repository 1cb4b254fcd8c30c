"""Which due topics share a stage run (a fleet of small topics), and the run's key."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.config.pipeline import parse_pipeline_config
from kbqe_dagster.core.config.sections import StageRunSettings
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.core.stage_runs.due import stage_run_key
from kbqe_dagster.core.stage_runs.groups import (
    DueTopic,
    StageGroup,
    group_due_topics,
    join_topics,
    split_topics,
    yielded_topics,
)


def due(topic: str, lag: int, offsets: dict[int, int] | None = None) -> DueTopic:
    return DueTopic(topic, offsets or {0: 0}, lag, f"backlog {lag}")


def names(groups: list[StageGroup]) -> list[tuple[str, ...]]:
    return [g.names for g in groups]


def test_small_topics_share_runs_of_at_most_max_topics_per_run_in_name_order() -> None:
    topics = [due(f"t{i:02d}", 10) for i in range(7, -1, -1)]
    groups = group_due_topics(topics, StageRunSettings(max_topics_per_run=3))
    assert names(groups) == [("t00", "t01", "t02"), ("t03", "t04", "t05"), ("t06", "t07")]


def test_a_run_closes_before_its_backlog_would_pass_max_messages_per_run() -> None:
    settings = StageRunSettings(max_topics_per_run=50, max_messages_per_run=100)
    groups = group_due_topics([due("a", 40), due("b", 50), due("c", 20), due("d", 80)], settings)
    assert names(groups) == [("a", "b"), ("c", "d")]
    assert [g.lag for g in groups] == [90, 100]


def test_a_hot_topic_gets_a_run_of_its_own() -> None:
    settings = StageRunSettings(max_topics_per_run=50, max_messages_per_run=100)
    groups = group_due_topics([due("a", 5), due("hot", 100), due("b", 5)], settings)
    assert names(groups) == [("hot",), ("a", "b")]


def test_max_topics_per_run_of_one_is_one_run_per_topic_as_before_fleets() -> None:
    groups = group_due_topics([due("b", 1), due("a", 1)], StageRunSettings(max_topics_per_run=1))
    assert names(groups) == [("a",), ("b",)]


def test_nothing_due_is_no_run() -> None:
    assert group_due_topics([], StageRunSettings()) == []


def test_a_single_topic_run_keeps_the_key_it_always_had() -> None:
    group = StageGroup((due("com.acme.events", 100, {0: 10, 1: 4}),))
    assert group.run_key(2) == stage_run_key("com.acme.events", {0: 10, 1: 4}, 2)
    assert group.run_key(2) == "com.acme.events|0=10,1=4|2"
    assert group.reason == "backlog 100"


def test_a_group_key_changes_with_any_topic_or_start_offset_and_with_earlier_runs() -> None:
    group = StageGroup((due("a", 1, {0: 5}), due("b", 1, {0: 7})))
    same = StageGroup((due("a", 9, {0: 5}), due("b", 3, {0: 7})))
    moved = StageGroup((due("a", 1, {0: 6}), due("b", 1, {0: 7})))
    other = StageGroup((due("a", 1, {0: 5}), due("c", 1, {0: 7})))
    assert group.run_key(0) == same.run_key(0)  # the lag is not part of what the run is
    assert group.run_key(0).startswith("group|") and group.run_key(0).endswith("|0")
    assert len({group.run_key(0), moved.run_key(0), other.run_key(0), group.run_key(1)}) == 4
    assert group.reason == "2 topics due, backlog 2 together"


def test_the_topics_tag_round_trips_dotted_names() -> None:
    assert split_topics(join_topics(["com.acme.a", "shop.b"])) == ("com.acme.a", "shop.b")
    assert split_topics(None) == () and split_topics("") == ()


BASE = {
    "version": 1,
    "topics": [{"name": "t", "event_time": {"fields": ["ts"]}}],
    "allowed_destinations": ["d.*"],
}


def test_the_pipeline_file_sets_stage_runs_and_defaults_otherwise() -> None:
    assert parse_pipeline_config(BASE).stage_runs == StageRunSettings(50, 5_000_000)
    config = parse_pipeline_config(
        {**BASE, "stage_runs": {"max_topics_per_run": 8, "max_messages_per_run": 1000}}
    )
    assert config.stage_runs == StageRunSettings(max_topics_per_run=8, max_messages_per_run=1000)


@pytest.mark.parametrize(
    "section, problem",
    [
        ({"max_topics_per_run": 0}, "stage_runs.max_topics_per_run"),
        ({"max_topic_per_run": 5}, "stage_runs"),
    ],
)
def test_bad_stage_runs_settings_are_config_errors_naming_the_key(section, problem) -> None:
    with pytest.raises(ConfigError, match=problem.replace(".", r"\.")):
        parse_pipeline_config({**BASE, "stage_runs": section})


def test_a_run_leaves_to_older_runs_in_flight_the_topics_they_hold() -> None:
    in_flight = [(3, {"a", "b"}), (9, {"c"}), (5, {"x"})]
    assert yielded_topics(7, ["a", "c", "d"], in_flight) == {"a"}  # c: a younger run's
    assert yielded_topics(9, ["c"], [(7, {"c"})]) == {"c"}
    assert yielded_topics(7, ["c"], [(9, {"c"})]) == frozenset()  # the older one keeps it
    assert yielded_topics(1, ["a"], []) == frozenset()
