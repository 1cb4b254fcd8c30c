"""What bench/bench_stage.py's memory figures count: the stage run's process tree, and as
"jvm" Spark's JVM alone.

On a fresh clone the bench starts the local stack's services itself, so the Kafka broker,
Apicurio (two JVMs, ~500 MB together) and fake GCS are children of the bench process; the
sampler walked them with the stage run's tree and named every ``java`` the Spark JVM:
"JVM 730 MB" where the Spark JVM held 160 (issue 23). A service is left out with its
descendants, and a JVM is the Spark JVM only if it runs Spark's launcher."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from _stage_support import TreeSampler, _role, process_tree  # noqa: E402

MB = 1024 * 1024

# Command lines as /proc/<pid>/cmdline gives them (NUL-separated), shortened.
SPARK_JVM = "\0".join(
    [
        "/usr/lib/jvm/java-17-openjdk-amd64/bin/java",
        "-cp",
        "pyspark/jars/*",
        "-Xmx1g",
        "-Xms32m",
        "org.apache.spark.deploy.SparkSubmit",
        "--conf",
        "spark.master=local[2]",
        "pyspark-shell",
    ]
)
KAFKA_BROKER = "\0".join(
    [
        "/usr/bin/java",
        "-Xmx384m",
        "-Xms128m",
        "-cp",
        "kafka-4.3.1/libs/*",
        "kafka.Kafka",
        "server.properties",
    ]
)
APICURIO = "\0".join(
    ["/usr/bin/java", "-Xmx256m", "-Dquarkus.http.port=18081", "-jar", "quarkus-run.jar"]
)
WORKER_DAEMON = "\0".join(
    ["/venv/bin/python", "-m", "kbqe_dagster.resources.spark_daemon", "pyspark.worker"]
)

# A stack service as LocalService starts one (its own session), holding `hold` MB, with a
# child of its own (a service's helper process).
SERVICE = """
import subprocess, sys, time
ballast = bytearray({hold} * 1024 * 1024)
for i in range(0, len(ballast), 4096):
    ballast[i] = 1  # touched: resident, not just reserved
helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(helper.pid, flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize(
    ("cmdline", "role"),
    [
        (SPARK_JVM, "jvm"),
        (KAFKA_BROKER, "other"),
        (APICURIO, "other"),
        (WORKER_DAEMON, "worker"),
    ],
)
def test_only_the_spark_launcher_jvm_is_the_jvm_role(cmdline: str, role: str) -> None:
    assert _role(pid=200, root=100, cmdline=cmdline) == role


def test_the_root_is_the_driver_whatever_it_runs() -> None:
    assert _role(pid=100, root=100, cmdline=SPARK_JVM) == "driver"


@pytest.fixture
def service():
    """A child in its own session holding 64 MB, like a stack service this process started;
    yields (its pid, its helper's pid)."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVICE.format(hold=64)],
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        helper = int(proc.stdout.readline())
        yield proc.pid, helper
    finally:
        os.killpg(proc.pid, 9)
        proc.wait()


def test_a_service_started_by_the_measuring_process_is_left_out_with_its_children(service) -> None:
    pid, helper = service
    seen = {s.pid for s in process_tree(os.getpid())}
    assert {pid, helper} <= seen  # the walk does reach it: it is this process's child
    measured = {s.pid for s in process_tree(os.getpid(), exclude={pid})}
    assert os.getpid() in measured and not measured & {pid, helper}


def test_the_sampled_peak_leaves_out_an_excluded_service_memory(service) -> None:
    pid, _ = service
    time.sleep(0.3)  # the ballast is touched before the first line is printed; margin only
    with TreeSampler(interval=0.05) as everything:
        time.sleep(0.3)
    with TreeSampler(interval=0.05, exclude=frozenset({pid})) as measured:
        time.sleep(0.3)
    counted = everything.peak["pss_total"] - measured.peak["pss_total"]
    assert counted > 60 * MB  # the service's 64 MB, in the first figure only
    assert "pss_jvm" not in measured.peak and "pss_jvm" not in everything.peak
