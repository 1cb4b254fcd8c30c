"""How the soak judges a long-lived process's memory (reliability/soak_watch.py ``trend``): a
slope after the warm-up, a leak only when it is steep *and* the process really grew, and no
verdict on a life too short to tell."""

from __future__ import annotations

import random

from reliability.soak_watch import trend


def _series(minutes: float, mb_per_hour: float, start: float = 400.0, noise: float = 3.0):
    rnd = random.Random(1)
    return [
        (t, start + mb_per_hour * t / 3600 + rnd.uniform(-noise, noise))
        for t in range(0, int(minutes * 60), 5)
    ]


def test_a_flat_process_with_allocator_noise_is_no_leak() -> None:
    result = trend(_series(30, 0.0))
    assert result["judged"] and not result["leak"]
    assert abs(result["slope_mb_per_hour"]) < 10


def test_a_steady_growth_over_the_threshold_is_a_leak() -> None:
    result = trend(_series(30, 120.0))
    assert result["judged"] and result["leak"]
    assert 100 < result["slope_mb_per_hour"] < 140


def test_the_warm_up_is_not_held_against_a_process() -> None:
    # 300 MB in the first two minutes (definitions loaded, Spark imported), flat afterwards.
    points = [(t, 100.0 + min(t, 120) * 2.5) for t in range(0, 1800, 5)]
    assert not trend(points)["leak"]


def test_a_short_life_is_reported_but_not_judged() -> None:
    result = trend(_series(6, 500.0))
    assert result["slope_mb_per_hour"] is not None
    assert not result["judged"] and not result["leak"]
