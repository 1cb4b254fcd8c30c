"""The Spark driver's console lines during ``kbqe demo``: without ``-v``, only its warnings
and errors, not its start-up banner.

Spark prints its log4j start-up lines ("Using Spark's default log4j profile", "Setting
default log level", the NativeCodeLoader warning) from the JVM, past Python's logging. Spark
puts ``$SPARK_CONF_DIR`` on the driver's classpath, so a ``log4j2.properties`` there replaces
its default profile. A user's own ``SPARK_CONF_DIR`` is left alone.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping
from pathlib import Path

LOG4J2_PROPERTIES = """\
# Written by `kbqe demo` (run it with -v for Spark's default profile).
status = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n
# WARN is the level Spark gives its shell (PySpark counts as one); at the same level it does
# not announce "Setting default log level".
rootLogger.level = warn
rootLogger.appenderRef.stdout.ref = console
# Hadoop's native libraries are optional: their absence is no news on every start.
logger.native.name = org.apache.hadoop.util.NativeCodeLoader
logger.native.level = error
"""


def quiet_spark_driver(
    conf_home: Path, environ: MutableMapping[str, str] = os.environ
) -> Path | None:
    """Point ``SPARK_CONF_DIR`` at ``conf_home`` holding an errors-only log4j2 profile;
    ``None`` (nothing changed) when the user already set ``SPARK_CONF_DIR``."""
    if environ.get("SPARK_CONF_DIR"):
        return None
    conf_home.mkdir(parents=True, exist_ok=True)
    (conf_home / "log4j2.properties").write_text(LOG4J2_PROPERTIES)
    environ["SPARK_CONF_DIR"] = str(conf_home)
    return conf_home
