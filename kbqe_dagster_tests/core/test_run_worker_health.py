"""When a run's worker is known to be gone (core/run_worker_health.py): only a process the
monitor can see, on the same boot and in the same pid namespace, that no longer runs with the
start time it recorded. Anything out of sight gets no verdict, never a failure."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.run_worker_health import ProcessIdentity, worker_gone

WORKER = ProcessIdentity("boot-a", "pid:[4026531836]", 4242, 123456)


def test_the_tag_names_the_process_and_reads_back() -> None:
    assert ProcessIdentity.from_tag(WORKER.tag) == WORKER


@pytest.mark.parametrize(
    "tag",
    [None, "", "boot-a/pid:[1]/42", "boot-a/pid:[1]/x/1", "/pid:[1]/42/1", "boot-a//42/1"],
)
def test_a_missing_or_malformed_tag_is_no_identity(tag: str | None) -> None:
    assert ProcessIdentity.from_tag(tag) is None


def test_the_recorded_process_still_running_is_not_gone() -> None:
    assert worker_gone(WORKER, "boot-a", "pid:[4026531836]", 123456) is None


def test_a_vanished_pid_is_gone_and_the_reason_names_it() -> None:
    reason = worker_gone(WORKER, "boot-a", "pid:[4026531836]", None)
    assert reason is not None and "pid 4242" in reason


def test_a_pid_reused_by_a_later_process_is_gone() -> None:
    reason = worker_gone(WORKER, "boot-a", "pid:[4026531836]", 999999)
    assert reason is not None and "started later" in reason


@pytest.mark.parametrize(
    ("boot", "namespace"),
    [("boot-b", "pid:[4026531836]"), ("boot-a", "pid:[4026532000]")],
    ids=["another boot or host", "another pid namespace"],
)
def test_a_worker_out_of_sight_gets_no_verdict(boot: str, namespace: str) -> None:
    # The monitor sees no such pid, but that proves nothing from another machine or container.
    assert worker_gone(WORKER, boot, namespace, None) is None


def test_no_recorded_identity_gets_no_verdict() -> None:
    assert worker_gone(None, "boot-a", "pid:[4026531836]", None) is None
