"""When the backlog sensor launches a stage run, and under which run key."""

from __future__ import annotations

from datetime import timedelta

import pytest

from kbqe_dagster.core.config.sections import StagingSettings
from kbqe_dagster.core.stage_runs.due import from_offsets, stage_due, stage_run_key

SETTINGS = StagingSettings(allowed_latency=timedelta(minutes=15), max_messages_per_batch=1000)
NOW = 1_732_000_000_000
LATENCY_MS = 15 * 60 * 1000


@pytest.mark.parametrize("lag", [0, -3])
def test_an_empty_backlog_is_never_due_however_old(lag: int) -> None:
    assert stage_due(SETTINGS, lag, NOW - 10 * LATENCY_MS, NOW) is None


def test_a_full_batch_is_due_at_once_and_one_less_is_not() -> None:
    assert stage_due(SETTINGS, 1000, NOW, NOW) == "backlog 1000 >= max_messages_per_batch 1000"
    assert stage_due(SETTINGS, 999, NOW, NOW) is None


def test_the_oldest_message_is_due_at_exactly_allowed_latency() -> None:
    assert stage_due(SETTINGS, 1, NOW - LATENCY_MS + 1, NOW) is None
    assert stage_due(SETTINGS, 1, NOW - LATENCY_MS, NOW) == (
        "oldest unstaged message is 900s old >= allowed_latency 0:15:00"
    )


def test_an_unknown_age_waits_for_a_full_batch() -> None:
    # No Kafka timestamp (e.g. -1 from an old producer): only the batch size can decide.
    assert stage_due(SETTINGS, 999, None, NOW) is None
    assert stage_due(SETTINGS, 1000, None, NOW) is not None


def test_a_message_from_the_future_is_not_due() -> None:
    assert stage_due(SETTINGS, 5, NOW + 60_000, NOW) is None


def test_the_run_key_names_the_topic_its_start_and_the_earlier_runs_from_there() -> None:
    offsets = {2: 7, 0: 12, 1: 40}
    assert from_offsets(offsets) == "0=12,1=40,2=7"
    assert stage_run_key("com.acme.events", offsets, 0) == "com.acme.events|0=12,1=40,2=7|0"
    # A failed run from the same offsets: the next tick's key differs, so Dagster launches it.
    assert stage_run_key("com.acme.events", offsets, 1) != stage_run_key(
        "com.acme.events", offsets, 0
    )
