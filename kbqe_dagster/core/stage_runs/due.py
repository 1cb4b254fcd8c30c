"""When a topic's stage run is due, and the run key that keeps a tick from launching it twice:
the decisions of ``kafka_backlog_sensor`` (defs/staging/sensors.py), pure.

A run is due when the topic's backlog reaches ``max_messages_per_batch``, or when its oldest
unstaged message is at least ``allowed_latency`` old; never for an empty backlog. The run key
is the topic, the offsets the run starts from, and the number of earlier runs from those
offsets: a queued or running run is not launched again (the sensor skips the topic while one
is in flight), and a failed run, which committed nothing, is retried by a later tick under a
new key.
"""

from __future__ import annotations

from collections.abc import Mapping

from kbqe_dagster.core.config.sections import StagingSettings


def stage_due(
    settings: StagingSettings, lag: int, oldest_unstaged_ms: int | None, now_ms: int
) -> str | None:
    """Why a stage run is due (a sentence for the run's ``kbqe/reason`` tag), or None."""
    if lag <= 0:
        return None
    if lag >= settings.max_messages_per_batch:
        return f"backlog {lag} >= max_messages_per_batch {settings.max_messages_per_batch}"
    if oldest_unstaged_ms is not None:
        age_s = (now_ms - oldest_unstaged_ms) / 1000
        if age_s >= settings.allowed_latency.total_seconds():
            return (
                f"oldest unstaged message is {age_s:.0f}s old >= allowed_latency "
                f"{settings.allowed_latency}"
            )
    return None


def from_offsets(next_offsets: Mapping[int, int]) -> str:
    """``0=12,1=40``: where a run starts, per partition (a tag of the run)."""
    return ",".join(f"{p}={o}" for p, o in sorted(next_offsets.items()))


def stage_run_key(topic: str, next_offsets: Mapping[int, int], earlier_runs: int) -> str:
    return f"{topic}|{from_offsets(next_offsets)}|{earlier_runs}"
