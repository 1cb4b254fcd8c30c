"""A key given twice in one mapping of the pipeline file is refused, naming its key path and
both lines: YAML alone keeps the last value silently (``load: {cadence: 5m, cadence: 10m}``
would run with 10m)."""

from __future__ import annotations

import pytest

from kbqe_dagster.core import config_reader as r
from kbqe_dagster.core.config.pipeline import parse_pipeline_text
from kbqe_dagster.core.config.yaml_file import load_yaml
from kbqe_dagster.core.errors import ConfigError

TOPIC = "topics:\n  - name: t\n    event_time: {fields: [ts]}\n"


def _error(text: str) -> ConfigError:
    with pytest.raises(ConfigError) as caught:
        parse_pipeline_text(text, source="p.yaml")
    return caught.value


def test_a_repeated_key_in_a_flow_mapping_is_refused_with_both_lines() -> None:
    error = _error(TOPIC + "load: {cadence: 5m,\n       cadence: 10m}\n")
    assert error.problems == (
        (
            "load.cadence",
            "key repeated in one mapping (lines 4 and 5); YAML would keep only "
            "the last: remove one",
        ),
    )
    assert str(error).startswith("p.yaml: 1 problem(s):\n  - load.cadence: key repeated")


def test_a_repeated_key_deep_in_a_list_names_its_index() -> None:
    text = (
        "topics:\n"
        "  - name: a\n"
        "    event_time: {fields: [ts]}\n"
        "  - name: b\n"
        "    routing:\n"
        "      mode: static\n"
        "      dataset: d\n"
        "      table: t\n"
        "      dataset: e\n"
        "    event_time: {fields: [ts]}\n"
    )
    assert _error(text).problems == (
        (
            "topics[1].routing.dataset",
            "key repeated in one mapping (lines 7 and 9); YAML would "
            "keep only the last: remove one",
        ),
    )


def test_a_repeated_top_level_section_is_refused() -> None:
    error = _error(TOPIC + "load: {cadence: 5m}\nretention: {}\nload: {cadence: 10m}\n")
    assert [p for p, _ in error.problems] == ["load"]
    assert "(lines 4 and 6)" in str(error)


def test_repeated_keys_are_reported_with_every_other_problem() -> None:
    error = _error(TOPIC + "load: {cadence: 5m, cadence: 10m, cadense: 1h}\n")
    assert [p for p, _ in error.problems] == ["load.cadence", "load.cadense"]


def test_the_same_key_in_two_mappings_is_not_repeated() -> None:
    text = (
        "topics:\n"
        "  - name: a\n    event_time: {fields: [ts]}\n"
        "  - name: b\n    event_time: {fields: [ts]}\n"
        "staging: {allowed_latency: 1m}\n"
        "completeness: {lateness: 1m}\n"
    )
    config = parse_pipeline_text(text)
    assert config.topic_names == ("a", "b")


def test_keys_are_compared_as_yaml_reads_them() -> None:
    problems = r.Problems()
    # 'on' and "on" are the same string key; 1 and '1' are not the same key.
    assert load_yaml("m: {'on': 1, \"on\": 2, 1: a, '1': b}\n", problems) == {
        "m": {"on": 2, 1: "a", "1": "b"}
    }
    assert problems.located == [
        (
            "m.on",
            "key repeated in one mapping (line 1, columns 5 and "
            "14); YAML would keep only the last: remove one",
        )
    ]


def test_an_anchor_used_twice_is_not_a_repeated_key() -> None:
    problems = r.Problems()
    raw = load_yaml("base: &b {x: 1}\none: *b\ntwo: *b\n", problems)
    assert raw == {"base": {"x": 1}, "one": {"x": 1}, "two": {"x": 1}}
    assert not problems


def test_an_empty_document_reads_as_none_and_bad_yaml_still_raises() -> None:
    problems = r.Problems()
    assert load_yaml("", problems) is None and not problems
    with pytest.raises(ConfigError, match="p.yaml: not valid YAML"):
        parse_pipeline_text("a: [1,\n", source="p.yaml")
