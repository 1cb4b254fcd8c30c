"""Spark: the session configuration for each environment, behind Dagster's lazy PySpark
resource so that loading the definitions never starts a JVM. The stage job asks that resource
for a SparkContext only (:class:`LazySparkContextResource`).

Locally Spark runs ``local[N]`` in the Dagster run's process; on a cluster only the master
URL and the executor settings change (``KBQE_SPARK_MASTER``, ``KBQE_SPARK_CONF_<key>``).

What holds only on one machine is set only for a ``local`` master: the driver's loopback address
(executors elsewhere could not reach it) and the driver's own interpreter for the workers (a
path that exists on no executor host). On a cluster the driver's address is Spark's choice or
``KBQE_SPARK_DRIVER_HOST`` / ``KBQE_SPARK_DRIVER_BIND_ADDRESS``, and the executors' Python is the
cluster's own or ``KBQE_SPARK_EXECUTOR_PYTHON`` (docs/deployment.md, "Spark on a cluster").
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from dagster_pyspark import LazyPySparkResource
from dagster_spark.utils import flatten_dict

from kbqe_dagster.core.errors import ConfigError

SPARK_CONF_PREFIX = "KBQE_SPARK_CONF_"
DRIVER_HOST_ENV = "KBQE_SPARK_DRIVER_HOST"
DRIVER_BIND_ADDRESS_ENV = "KBQE_SPARK_DRIVER_BIND_ADDRESS"
EXECUTOR_PYTHON_ENV = "KBQE_SPARK_EXECUTOR_PYTHON"


def is_local_master(master: str) -> bool:
    """``local``, ``local[N]``, ``local[*]``, ``local[N,F]``: Spark inside this process."""
    return master == "local" or master.startswith("local[")


def local_spark_config(master: str = "local[2]", extra: Mapping[str, str] | None = None) -> dict:
    """A small session: no UI, few shuffle partitions, the stage workers' memory settings; for a
    ``local`` master also the loopback driver and the driver's own Python for the workers (so
    they import the same kbqe_dagster). ``extra`` wins over every default."""
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
        "spark.pyspark.driver.python": sys.executable,
    }
    if is_local_master(master):
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        conf["spark.pyspark.python"] = sys.executable
    conf.update(extra or {})
    return conf


def spark_key(variable_suffix: str) -> str:
    """The Spark key a ``KBQE_SPARK_CONF_<suffix>`` variable names: a single ``_`` is a ``.``, a
    double ``__`` a literal ``_``, letters keep their case (Spark keys are case-sensitive):
    ``spark_executor_memory`` is ``spark.executor.memory``, ``spark_executorEnv_MALLOC__ARENA__MAX``
    is ``spark.executorEnv.MALLOC_ARENA_MAX``. Read left to right, so ``___`` is ``_.``; a key
    with a segment that starts with ``_`` cannot be spelled (no Spark key has one)."""
    out, i = [], 0
    while i < len(variable_suffix):
        if variable_suffix.startswith("__", i):
            out.append("_")
            i += 2
        elif variable_suffix[i] == "_":
            out.append(".")
            i += 1
        else:
            out.append(variable_suffix[i])
            i += 1
    return "".join(out)


def spark_config_from_environment(
    default_master: str = "local[2]", environ: Mapping[str, str] = os.environ
) -> dict:
    """``KBQE_SPARK_MASTER``, the driver's address and the executors' Python (module docstring),
    and any ``KBQE_SPARK_CONF_<key>`` override (:func:`spark_key`). Called where resources are
    chosen."""
    extra = {
        spark_key(name[len(SPARK_CONF_PREFIX) :]): value
        for name, value in environ.items()
        if name.startswith(SPARK_CONF_PREFIX)
    }
    named = {
        "spark.driver.host": environ.get(DRIVER_HOST_ENV),
        "spark.driver.bindAddress": environ.get(DRIVER_BIND_ADDRESS_ENV),
        "spark.pyspark.python": environ.get(EXECUTOR_PYTHON_ENV),
    }
    extra.update({key: value for key, value in named.items() if value})
    return local_spark_config(environ.get("KBQE_SPARK_MASTER", default_master), extra)


def refuse_local_staging_on_a_cluster(master: str, staging_url: str | None) -> None:
    """A staging directory is on the driver's disk: executors on other hosts would write their
    files where the load job never looks. Refused at start, naming both variables."""
    if staging_url and not staging_url.startswith("gs://") and not is_local_master(master):
        raise ConfigError(
            f"KBQE_STAGING_URL={staging_url} is a local directory, but KBQE_SPARK_MASTER={master}"
            " runs executors on other hosts, which cannot write to it: stage to a bucket"
            " (KBQE_STAGING_URL=gs://bucket/prefix) or run Spark locally (local[N])"
        )


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
    # PySpark's driver names the workers' interpreter to every executor from PYSPARK_PYTHON
    # (not from the spark.pyspark.python setting): without it, local workers run a bare
    # `python3` that lacks this environment's packages. Locally a PYSPARK_PYTHON already set
    # wins over this interpreter. On a cluster the setting is there only when it was named
    # (KBQE_SPARK_EXECUTOR_PYTHON), and the named one wins: a PYSPARK_PYTHON inherited from
    # the driver's image or a local session names a path of the driver's host, and executors
    # running it would import another kbqe_dagster or none (the cluster test sets one). With
    # neither, executors run the cluster's own.
    python = config.get("spark.pyspark.python")
    if python and is_local_master(str(config.get("spark.master", ""))):
        os.environ.setdefault("PYSPARK_PYTHON", python)
    elif python:
        os.environ["PYSPARK_PYTHON"] = python
    return LazySparkContextResource(spark_config=dict(config))
