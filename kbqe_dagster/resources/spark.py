"""Spark: the session configuration for each environment, behind Dagster's lazy PySpark
resource so that loading the definitions never starts a JVM.

Locally Spark runs ``local[N]`` in the Dagster run's process; on a cluster only the master
URL and the executor settings change (``KBQE_SPARK_MASTER``, ``KBQE_SPARK_CONF_<key>``).
"""

from __future__ import annotations

import os
import sys
from typing import Mapping

from dagster_pyspark import LazyPySparkResource


def local_spark_config(master: str = "local[2]", extra: Mapping[str, str] | None = None) -> dict:
    """A small local session: no UI, few shuffle partitions, the driver's own Python for the
    workers (so executors import the same kbqe_dagster)."""
    conf = {
        "spark.master": master,
        "spark.app.name": "kbqe-stage",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
        "spark.sql.shuffle.partitions": "4",
        "spark.driver.memory": "1g",
        # In local mode the driver JVM only schedules: the stage data path runs in the Python
        # workers. A small initial heap, the serial collector and the C1 compiler alone keep
        # it to ~250 MB resident instead of ~330 MB (bench/bench_stage.py reports it). The
        # young generation would otherwise grow to ~27 MB of eden the scheduler never needs
        # (it allocates little and keeps less): -Xmn8m saves ~18 MB; more frequent minor
        # collections of 8 MB cost it nothing measurable.
        "spark.driver.extraJavaOptions": "-Xms32m -Xmn8m -XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.python.worker.reuse": "true",
        # Workers are forked from a daemon that has already imported the stage task's modules
        # (resources/spark_daemon.py): each worker shares those ~60 MB with it instead of
        # importing its own copy.
        "spark.python.daemon.module": "kbqe_dagster.resources.spark_daemon",
        # librdkafka's threads would each get a glibc malloc arena that keeps what it freed:
        # two arenas hold a stage worker's memory down without slowing its one hot thread.
        "spark.executorEnv.MALLOC_ARENA_MAX": "2",
        # One stage task per offset range; a failed range is retried by the next run, which
        # redoes it from the done files (retrying inside Spark would only repeat the error).
        "spark.task.maxFailures": "1",
        # A speculative copy of a stage task would be a second writer of the same range.
        "spark.speculation": "false",
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
    }
    conf.update(extra or {})
    return conf


def spark_config_from_environment(default_master: str = "local[2]") -> dict:
    """``KBQE_SPARK_MASTER`` and any ``KBQE_SPARK_CONF_spark_executor_memory=4g`` style
    overrides (underscores after the prefix become dots). Called where resources are chosen."""
    extra = {
        key[len("KBQE_SPARK_CONF_") :].replace("_", "."): value
        for key, value in os.environ.items()
        if key.startswith("KBQE_SPARK_CONF_")
    }
    return local_spark_config(os.environ.get("KBQE_SPARK_MASTER", default_master), extra)


def spark_resource(config: Mapping[str, str]) -> LazyPySparkResource:
    # PySpark's driver picks the workers' interpreter from PYSPARK_PYTHON (not from the
    # spark.pyspark.python setting): without it, local workers run a bare `python3` that
    # lacks this environment's packages.
    os.environ.setdefault("PYSPARK_PYTHON", config.get("spark.pyspark.python", sys.executable))
    return LazyPySparkResource(spark_config=dict(config))
