"""The stage run's Spark resource: a SparkContext alone (no Spark SQL in the driver JVM), a
driver JVM launched with the bounded heap of ``local_spark_config``, and a driver that does not
import pandas and pyarrow through PySpark's numpy converters."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import numpy as np
import pytest
from py4j.protocol import INPUT_CONVERTER

from kbqe_dagster.resources.spark import _OnlyNumpyValues, local_spark_config, spare_pandas_import

# Fresh interpreters: this test process may have imported pandas or started Spark already.
CONVERTERS_PROBE = """
import sys
from kbqe_dagster.resources.spark import spare_pandas_import
spare_pandas_import()
from py4j.protocol import INPUT_CONVERTER
answers = {type(c).__name__: any([c.can_convert(v) for v in ("x", 1, [1], 2.5)]) for c in INPUT_CONVERTER}
print(answers["_OnlyNumpyValues"], "pandas" in sys.modules, "pyarrow" in sys.modules,
      "pyspark.testing.utils" in sys.modules)
"""

CONTEXT_PROBE = """
import sys
from kbqe_dagster.resources.spark import local_spark_config, spark_resource
from pyspark.sql import SparkSession
context = spark_resource(local_spark_config("local[1]")).spark_context
print(context.parallelize([1, 2], 2).map(lambda x: x * 10).collect())
jvm_session = context._jvm.org.apache.spark.sql.classic.SparkSession.getDefaultSession()
print(SparkSession._instantiatedSession is None, jvm_session.isDefined(), "pandas" in sys.modules)
context.stop()
"""

# The JVM a local Dagster stage run starts: the resource the definitions get for `local`.
# Its heap options are launch options: set on a JVM that is already up, they do nothing.
LAUNCH_PROBE = """
import json
from kbqe_dagster.resources.environment import resources_for_environment
context = resources_for_environment("local")["pyspark"].spark_context
jvm = context._jvm
print(json.dumps({
    "options": list(jvm.java.lang.management.ManagementFactory.getRuntimeMXBean().getInputArguments()),
    "max_heap_mb": jvm.java.lang.Runtime.getRuntime().maxMemory() // 2**20,
}))
context.stop()
"""


def _run(probe: str) -> list[str]:
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result.stdout.strip().splitlines()


def test_converters_answer_plain_values_without_importing_pandas_or_pyarrow() -> None:
    assert _run(CONVERTERS_PROBE) == ["False False False False"]


@pytest.mark.parametrize(
    ("value", "convertible"),
    [
        (np.array([1, 2], dtype="int32"), True),
        (np.array([[1], [2]]), False),  # PySpark converts one-dimensional arrays only
        ("text", False),
        ([1, 2], False),
    ],
)
def test_wrapped_array_converter_still_takes_one_dimensional_numpy_arrays(
    value, convertible
) -> None:
    spare_pandas_import()
    [array_converter] = [
        c
        for c in INPUT_CONVERTER
        if isinstance(c, _OnlyNumpyValues) and type(c.converter).__name__ == "NumpyArrayConverter"
    ]
    assert array_converter.can_convert(value) is convertible


def test_wrapping_twice_wraps_once() -> None:
    spare_pandas_import()
    spare_pandas_import()
    wrapped = [c for c in INPUT_CONVERTER if isinstance(c, _OnlyNumpyValues)]
    assert sorted(type(c.converter).__name__ for c in wrapped) == [
        "NumpyArrayConverter",
        "NumpyScalarConverter",
    ]


@pytest.mark.integration
def test_the_stage_resource_runs_jobs_on_a_spark_context_without_a_session() -> None:
    collected, facts = _run(CONTEXT_PROBE)[-2:]
    assert collected == "[10, 20]"
    assert facts == "True False False"  # no Python session, no JVM session, no pandas


@pytest.mark.slow  # starts a JVM; needs no stack service
def test_a_local_stage_run_s_driver_jvm_is_launched_with_the_bounded_heap() -> None:
    launched = json.loads(_run(LAUNCH_PROBE)[-1])
    conf = local_spark_config()
    assert f"-Xmx{conf['spark.driver.memory']}" in launched["options"]
    assert set(shlex.split(conf["spark.driver.extraJavaOptions"])) <= set(launched["options"])
    # Not the JVM's default of a quarter of the machine's memory (6 GiB on 24 GiB).
    assert launched["max_heap_mb"] <= 1024
