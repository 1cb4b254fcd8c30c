"""Spark: the session configuration for each environment, behind Dagster's lazy PySpark
resource so that loading the definitions never starts a JVM. The stage job asks that resource
for a SparkContext only (:class:`LazySparkContextResource`).

Locally Spark runs ``local[N]`` in the Dagster run's process; on a cluster only the master
URL and the executor settings change (``KBQE_SPARK_MASTER``, ``KBQE_SPARK_CONF_<key>``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from dagster_pyspark import LazyPySparkResource
from dagster_spark.utils import flatten_dict


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
        # workers. A small initial heap, the serial collector and the C1 compiler alone took
        # it from ~330 to ~250 MB resident (bench/bench_stage.py reports it). Its young
        # generation would grow to ~27 MB of eden that a scheduler, which allocates little
        # and keeps less, never needs: -Xmn8m saves ~18 MB more, and its more frequent minor
        # collections take ~0.1 s of a run.
        "spark.driver.extraJavaOptions": "-Xms32m -Xmn8m -XX:+UseSerialGC -XX:TieredStopAtLevel=1",
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.python.worker.reuse": "true",
        # Workers are forked from a daemon that has already imported the stage task's modules
        # (resources/spark_daemon.py): each worker shares those ~60 MB with it instead of
        # importing its own copy (daemon + two workers: ~37 MB less at their peak).
        "spark.python.daemon.module": "kbqe_dagster.resources.spark_daemon",
        # librdkafka's threads would each get a glibc malloc arena that keeps what it freed:
        # two arenas hold a stage worker's memory down without slowing its one hot thread.
        "spark.executorEnv.MALLOC_ARENA_MAX": "2",
        # A stage task allocates and frees a block's buffers (~1 MB) many times a second;
        # glibc would give each back to the kernel (mmap, heap trim) and fault its pages in
        # again: ~7 % of a task's CPU in make bench. Fixed thresholds keep them for reuse; a
        # worker's peak memory is what it uses at once, which they do not change.
        "spark.executorEnv.MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024),
        "spark.executorEnv.MALLOC_TRIM_THRESHOLD_": str(64 * 1024 * 1024),
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


class LazySparkContextResource(LazyPySparkResource):
    """dagster-pyspark's lazy resource, whose ``spark_context`` starts a SparkContext alone.

    The stage job only parallelizes offset ranges (an RDD job), it never uses Spark SQL; a
    SparkSession loads Spark SQL's classes into the driver JVM all the same, ~60 MB of
    metaspace and heap (bench/bench_stage.py: JVM PSS ~216 -> ~160 MB). ``spark_session`` is
    still there for whoever needs SQL: it is built on the same context."""

    @classmethod
    def _is_dagster_maintained(cls) -> bool:
        return False

    def _init_session(self) -> None:
        spare_pandas_import()
        super()._init_session()

    @property
    def spark_context(self) -> Any:
        if self._spark_session is not None:
            return self._spark_session.sparkContext
        from pyspark import SparkConf, SparkContext

        spare_pandas_import()
        conf = SparkConf().setAll(
            [(key, str(value)) for key, value in flatten_dict(self.spark_config)]
        )
        return SparkContext.getOrCreate(conf)


class _OnlyNumpyValues:
    """One of PySpark's Py4J input converters for numpy values, asked only about numpy values.

    PySpark's numpy converters (``pyspark.sql.types``) ask ``pyspark.testing.utils`` whether
    numpy is installed, in every ``can_convert``: so the driver's first Py4J call with an
    argument imports PySpark's test helpers, and with them pandas, pyarrow and numpy, ~115 MB
    of the driver's memory, the stage run's largest cost to a Dagster run process. An object
    is a numpy value only if numpy is already imported and it is an ndarray or a numpy
    scalar: anything else gets PySpark's answer, False, without the import."""

    def __init__(self, converter: Any) -> None:
        self.converter = converter

    def can_convert(self, obj: Any) -> bool:
        numpy = sys.modules.get("numpy")
        return (
            numpy is not None
            and isinstance(obj, (numpy.ndarray, numpy.generic))
            and self.converter.can_convert(obj)
        )

    def convert(self, obj: Any, gateway_client: Any) -> Any:
        return self.converter.convert(obj, gateway_client)


def spare_pandas_import() -> None:
    """Wrap PySpark's numpy converters in :class:`_OnlyNumpyValues` (once per process)."""
    from py4j.protocol import INPUT_CONVERTER
    from pyspark.sql.types import NumpyArrayConverter, NumpyScalarConverter

    for i, converter in enumerate(INPUT_CONVERTER):  # the gateway's own list: replaced in place
        if isinstance(converter, (NumpyArrayConverter, NumpyScalarConverter)):
            INPUT_CONVERTER[i] = _OnlyNumpyValues(converter)


def spark_resource(config: Mapping[str, str]) -> LazySparkContextResource:
    # PySpark's driver picks the workers' interpreter from PYSPARK_PYTHON (not from the
    # spark.pyspark.python setting): without it, local workers run a bare `python3` that
    # lacks this environment's packages.
    os.environ.setdefault("PYSPARK_PYTHON", config.get("spark.pyspark.python", sys.executable))
    return LazySparkContextResource(spark_config=dict(config))
