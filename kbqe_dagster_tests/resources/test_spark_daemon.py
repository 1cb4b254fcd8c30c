"""The stage run's PySpark daemon imports the stage worker's modules before it forks workers,
and doing so is safe to fork from: one thread, no socket, no Kafka client."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from kbqe_dagster.resources import spark_daemon
from kbqe_dagster.resources.spark import local_spark_config

# Run in a fresh interpreter: this test process has threads and sockets of its own.
PROBE = """
import gc, os, sys
from kbqe_dagster.resources.spark_daemon import PRELOADED, preload
preload()
fds = []
for fd in os.listdir("/proc/self/fd"):
    try:
        fds.append(os.readlink(f"/proc/self/fd/{fd}"))
    except FileNotFoundError:  # the descriptor listdir itself used
        pass
print(len(os.listdir("/proc/self/task")))
print(sum(1 for target in fds if target.startswith("socket:")))
print(all(m in sys.modules for m in PRELOADED))
print(gc.get_freeze_count() > 0)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_preloading_leaves_one_thread_no_socket_and_frozen_objects() -> None:
    result = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    threads, sockets, imported, frozen = result.stdout.split()
    assert (threads, sockets, imported, frozen) == ("1", "0", "True", "True")


def test_preloaded_modules_are_the_stage_worker_and_exist() -> None:
    assert spark_daemon.PRELOADED == ("pyspark.worker", "kbqe_dagster.staging.task")
    for module in spark_daemon.PRELOADED:
        assert importlib.util.find_spec(module) is not None, module


def test_local_spark_uses_the_preloading_daemon() -> None:
    conf = local_spark_config()
    assert conf["spark.python.daemon.module"] == "kbqe_dagster.resources.spark_daemon"
    assert conf["spark.python.worker.reuse"] == "true"


def _worker_facts(_: int) -> tuple[bool, bool]:
    import gc

    return gc.get_freeze_count() > 0, "kbqe_dagster.staging.task" in sys.modules


@pytest.mark.integration
def test_spark_tasks_run_in_workers_forked_from_the_preloading_daemon(spark_context) -> None:
    # Only this daemon freezes objects before forking: PySpark's own imports after the fork.
    facts = spark_context.parallelize([0, 1], 2).map(_worker_facts).collect()
    assert facts == [(True, True), (True, True)]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_the_registry_clients_http_transport_is_preloaded_too() -> None:
    """httpx imports its transport (httpcore, h11) only when the first registry client is
    built: preloaded, each worker's first schema lookup does not import it again."""
    probe = (
        "import sys\n"
        "from kbqe_dagster.resources.spark_daemon import preload\n"
        "preload()\n"
        "from confluent_kafka.schema_registry.common._httpx_compat import httpx\n"
        "print(httpx.__name__.replace('httpx', 'httpcore', 1) in sys.modules, 'h11' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.split() == ["True", "True"]
