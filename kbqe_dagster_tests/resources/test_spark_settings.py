"""Spark settings that hold on any cluster (resources/spark.py): what only makes sense on one
machine is set for a ``local`` master only, any Spark key can be spelled as a variable, and a
staging directory is refused when executors run elsewhere."""

from __future__ import annotations

import os
import sys

import pytest

from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.resources.spark import (
    refuse_local_staging_on_a_cluster,
    spark_config_from_environment,
    spark_key,
    spark_resource,
)

LOOPBACK_ONLY = ("spark.driver.host", "spark.driver.bindAddress", "spark.pyspark.python")


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*]", "local[2,3]"])
def test_a_local_master_gets_the_loopback_driver_and_this_python(master: str) -> None:
    conf = spark_config_from_environment(environ={"KBQE_SPARK_MASTER": master})
    assert conf["spark.master"] == master
    assert conf["spark.driver.host"] == conf["spark.driver.bindAddress"] == "127.0.0.1"
    assert conf["spark.pyspark.python"] == sys.executable


@pytest.mark.parametrize(
    "master",
    ["spark://10.0.0.5:7077", "yarn", "k8s://https://10.0.0.1:443", "local-cluster[2,1,1024]"],
)
def test_a_cluster_master_leaves_the_driver_address_and_executor_python_to_the_cluster(
    master: str,
) -> None:
    conf = spark_config_from_environment(environ={"KBQE_SPARK_MASTER": master})
    assert [key for key in LOOPBACK_ONLY if key in conf] == []
    assert conf["spark.pyspark.driver.python"] == sys.executable  # the driver is this process


def test_the_driver_address_and_executor_python_can_be_named_for_a_cluster() -> None:
    conf = spark_config_from_environment(
        environ={
            "KBQE_SPARK_MASTER": "spark://10.0.0.5:7077",
            "KBQE_SPARK_DRIVER_HOST": "10.0.0.9",
            "KBQE_SPARK_DRIVER_BIND_ADDRESS": "0.0.0.0",
            "KBQE_SPARK_EXECUTOR_PYTHON": "/opt/kbqe/bin/python",
        }
    )
    assert [conf[key] for key in LOOPBACK_ONLY] == ["10.0.0.9", "0.0.0.0", "/opt/kbqe/bin/python"]


@pytest.mark.parametrize(
    ("suffix", "key"),
    [
        ("spark_executor_memory", "spark.executor.memory"),
        ("spark_executorEnv_MALLOC__ARENA__MAX", "spark.executorEnv.MALLOC_ARENA_MAX"),
        ("spark_executorEnv_MALLOC__MMAP__THRESHOLD__", "spark.executorEnv.MALLOC_MMAP_THRESHOLD_"),
        ("spark_kubernetes_container_image", "spark.kubernetes.container.image"),
        ("spark_hadoop_fs_gs_impl", "spark.hadoop.fs.gs.impl"),
        ("spark_a___b", "spark.a_.b"),
    ],
)
def test_any_spark_key_is_spelled_with_dots_as_underscores_and_underscores_doubled(
    suffix: str, key: str
) -> None:
    assert spark_key(suffix) == key
    conf = spark_config_from_environment(environ={f"KBQE_SPARK_CONF_{suffix}": "v"})
    assert conf[key] == "v"


def test_an_override_wins_over_every_default() -> None:
    conf = spark_config_from_environment(
        environ={
            "KBQE_SPARK_CONF_spark_executorEnv_MALLOC__ARENA__MAX": "4",
            "KBQE_SPARK_CONF_spark_driver_host": "10.1.1.1",
        }
    )
    assert conf["spark.executorEnv.MALLOC_ARENA_MAX"] == "4"
    assert conf["spark.driver.host"] == "10.1.1.1"


def test_a_staging_directory_is_refused_when_executors_run_elsewhere() -> None:
    with pytest.raises(ConfigError) as refused:
        refuse_local_staging_on_a_cluster("spark://10.0.0.5:7077", "/var/kbqe/staging")
    message = str(refused.value)
    assert "KBQE_STAGING_URL=/var/kbqe/staging" in message
    assert "KBQE_SPARK_MASTER=spark://10.0.0.5:7077" in message
    assert "gs://" in message
    refuse_local_staging_on_a_cluster("spark://10.0.0.5:7077", "gs://bucket/staging")
    refuse_local_staging_on_a_cluster("local[2]", "/var/kbqe/staging")
    refuse_local_staging_on_a_cluster("yarn", None)  # decided at run time, when the URL is set


def test_workers_take_the_named_python_unless_pyspark_python_is_set_already(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("PYSPARK_PYTHON", "recorded")  # so teardown restores what was there
    monkeypatch.delenv("PYSPARK_PYTHON")
    spark_resource({"spark.master": "yarn"})
    assert "PYSPARK_PYTHON" not in os.environ, "a cluster without a named Python: its own"
    spark_resource({"spark.master": "yarn", "spark.pyspark.python": "/opt/kbqe/bin/python"})
    assert os.environ["PYSPARK_PYTHON"] == "/opt/kbqe/bin/python"
    spark_resource({"spark.master": "local[2]", "spark.pyspark.python": sys.executable})
    assert os.environ["PYSPARK_PYTHON"] == "/opt/kbqe/bin/python", "one already set wins"


def test_a_cluster_takes_the_named_python_over_a_pyspark_python_already_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """KBQE_SPARK_EXECUTOR_PYTHON names the executors' interpreter; a PYSPARK_PYTHON the
    driver inherited (its image's, a local session's) names one of the driver's host."""
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    config = spark_config_from_environment(
        environ={
            "KBQE_SPARK_MASTER": "spark://10.0.0.1:7077",
            "KBQE_SPARK_EXECUTOR_PYTHON": "/opt/kbqe/bin/python",
        }
    )
    spark_resource(config)
    assert os.environ["PYSPARK_PYTHON"] == "/opt/kbqe/bin/python"
