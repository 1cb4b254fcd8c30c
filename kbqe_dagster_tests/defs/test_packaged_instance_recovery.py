"""The packaged ``dagster.yaml`` recovers from the run and code-server deaths the soak injects.

A run worker killed while its op holds the ``bigquery_load`` slot must not hold it for ever.

Found by the soak (reliability/soak.py): a load run SIGKILLed in its ``load_cycle`` op was marked
failed (the code server sees its worker die), but its pool slot stayed claimed, and every load,
poll and merge run after it waited in the queue behind it: nothing was loaded any more. The
packaged ``dagster.yaml`` turns on Dagster's run monitoring, whose daemon loop frees the slots of
a finished run after ``free_slots_after_run_end_seconds``. These tests run that loop on an
instance made from the packaged file.

A run dequeued while the code server is unreachable (the soak's code-server restart) is
re-queued instead of failed.
"""

from __future__ import annotations

import logging
import shutil
from datetime import timedelta
from unittest import mock

import dagster as dg
import pytest
from dagster._core.test_utils import create_run_for_test
from dagster._daemon.monitoring import concurrency
from dagster._time import get_current_datetime

from kbqe_dagster.defs.bigquery.jobs import LOAD_POOL
from kbqe_dagster.packaged import data_file


@pytest.fixture
def instance(tmp_path):
    shutil.copyfile(data_file("dagster.yaml"), tmp_path / "dagster.yaml")
    with dg.DagsterInstance.from_config(str(tmp_path)) as instance:
        yield instance


def _monitoring_pass_at(instance: dg.DagsterInstance, seconds_from_now: float) -> None:
    later = get_current_datetime() + timedelta(seconds=seconds_from_now)
    with mock.patch.object(concurrency, "get_current_datetime", return_value=later):
        context = mock.Mock(instance=instance)
        list(concurrency.execute_concurrency_slots_iteration(context, logging.getLogger()))


def _claim_load_slot(instance: dg.DagsterInstance) -> dg.DagsterRun:
    storage = instance.event_log_storage
    # The pool's one slot (pools.default_limit), as the first op of the pool creates it.
    assert storage.initialize_concurrency_limit_to_default(LOAD_POOL)
    run = create_run_for_test(instance, job_name="load_job", status=dg.DagsterRunStatus.STARTED)
    storage.claim_concurrency_slot(LOAD_POOL, run.run_id, "load_cycle")
    assert [s.run_id for s in storage.get_concurrency_info(LOAD_POOL).claimed_slots] == [run.run_id]
    return run


def test_the_packaged_instance_runs_the_monitoring_that_frees_slots(instance) -> None:
    assert instance.run_monitoring_enabled
    assert 0 < instance.run_monitoring_settings["free_slots_after_run_end_seconds"] <= 60


def test_the_slot_of_a_load_run_whose_worker_died_is_freed(instance) -> None:
    run = _claim_load_slot(instance)
    # What the code server does when it finds the run's worker process dead.
    instance.report_run_failed(run)
    _monitoring_pass_at(instance, 120)
    info = instance.event_log_storage.get_concurrency_info(LOAD_POOL)
    assert (info.claimed_slots, info.pending_steps) == ([], [])


def test_the_slot_of_a_load_run_in_flight_is_kept(instance) -> None:
    run = _claim_load_slot(instance)
    _monitoring_pass_at(instance, 3600)
    claimed = instance.event_log_storage.get_concurrency_info(LOAD_POOL).claimed_slots
    assert [s.run_id for s in claimed] == [run.run_id]


def test_runs_dequeued_while_the_code_server_is_unreachable_are_retried(instance) -> None:
    queue = instance.get_concurrency_config().run_queue_config
    assert queue.max_user_code_failure_retries >= 3
    assert queue.max_user_code_failure_retries * queue.user_code_failure_retry_delay >= 60
    # The limits of the `concurrency:` block still hold next to the coordinator's own config.
    assert queue.max_concurrent_runs == 6  # two of them a stage loop run and its standby
    assert {limit["key"] for limit in queue.tag_concurrency_limits} >= {"kbqe/stage", "kbqe/topic"}
