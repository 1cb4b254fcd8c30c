"""Without -v, the demo's Spark driver logs warnings and errors without its start-up banner,
through a log4j2 profile in a conf dir of ours — unless the user has a SPARK_CONF_DIR of
their own."""

from __future__ import annotations

from pathlib import Path

from kbqe_dagster.demo.spark_console import quiet_spark_driver


def test_an_errors_only_profile_is_put_where_spark_looks(tmp_path: Path) -> None:
    environ: dict[str, str] = {}
    conf = quiet_spark_driver(tmp_path / "spark-conf", environ)
    assert conf == tmp_path / "spark-conf"
    assert environ == {"SPARK_CONF_DIR": str(conf)}
    profile = (conf / "log4j2.properties").read_text()
    assert "rootLogger.level = warn" in profile
    assert "logger.native.level = error" in profile
    assert "appender.console.target = SYSTEM_ERR" in profile


def test_a_users_spark_conf_dir_is_left_alone(tmp_path: Path) -> None:
    environ = {"SPARK_CONF_DIR": "/etc/spark"}
    assert quiet_spark_driver(tmp_path / "spark-conf", environ) is None
    assert environ == {"SPARK_CONF_DIR": "/etc/spark"}
    assert not (tmp_path / "spark-conf").exists()
