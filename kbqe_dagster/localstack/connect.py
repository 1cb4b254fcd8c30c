"""The local stack's Kafka Connect worker, on demand only (``kbqe stack up connect``): one
distributed-mode worker with its REST API on 127.0.0.1, its internal topics on the stack's
Kafka, and two plugins: Debezium's PostgreSQL connector and Apicurio's Avro converter.

Choices, and why:
- Jars from Maven Central, like the broker: ``stack/connect/pom.xml`` (the runtime, the same
  Kafka version as ``stack/kafka/pom.xml``, log4j2 as the broker) and one pom per plugin
  (``plugin-*.xml``), shipped as ``kbqe_dagster/data/connect-*.xml``. Each plugin is fetched
  without the ``org.apache.kafka`` group into its own directory of ``plugin.path``: the
  worker's Connect API is the only one, and each plugin keeps its own Jackson, Avro, ...
- Distributed mode (not standalone): connectors are created, replaced and deleted through the
  REST API (``localstack/cdc.py``), as on a real cluster, and their offsets live in Kafka.
  Internal topics ``kbqe-local-connect-{configs,offsets,status}`` with replication factor 1.
- The worker's default converters are JsonConverter; a connector names its own (Apicurio's
  Avro converter or JsonConverter), see ``cdc.py``. Source connectors create their topics
  through the worker (``topic.creation.*`` in the connector's config), since the local broker
  does not create topics on first use.
- Requires ``kafka`` and ``apicurio``: ``kbqe stack up connect`` starts them first.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path

from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack.base import HOST, LocalService, port_open
from kbqe_dagster.localstack.endpoints import LocalEndpoints
from kbqe_dagster.localstack.jvm import (
    DEPENDENCY_PLUGIN,
    install_once,
    require_java,
    run_maven,
    spawn_java,
)
from kbqe_dagster.localstack.kafka import LOG4J2_PROPERTIES, kafka_version
from kbqe_dagster.localstack.probe import request_json
from kbqe_dagster.packaged import data_file

log = logging.getLogger(__name__)

CONNECT_POM = data_file("connect-pom.xml")
# plugin directory name -> its pom (packaged file name)
PLUGIN_POMS = {
    "debezium-postgres": "connect-plugin-debezium-postgres.xml",
    "apicurio-converter": "connect-plugin-apicurio-converter.xml",
}
REQUIRED_PLUGIN_CLASSES = (
    "io.debezium.connector.postgresql.PostgresConnector",
    "io.apicurio.registry.utils.converter.AvroConverter",
)
GROUP_ID = "kbqe-local-connect"
INTERNAL_TOPICS = {
    "config.storage.topic": f"{GROUP_ID}-configs",
    "offset.storage.topic": f"{GROUP_ID}-offsets",
    "status.storage.topic": f"{GROUP_ID}-status",
}
JVM_OPTIONS = ("-Xmx512m", "-Xms128m", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true")
MAIN_CLASS = "org.apache.kafka.connect.cli.ConnectDistributed"
# The worker logs each plugin class it scans and every config at start; keep the log readable.
CONNECT_LOG4J2 = (
    LOG4J2_PROPERTIES
    + """\
logger.reflections.name = org.reflections
logger.reflections.level = ERROR
logger.isolation.name = org.apache.kafka.connect.runtime.isolation
logger.isolation.level = WARN
"""
)


def pom_kafka_version(pom: Path) -> str:
    match = re.search(r"<kafka\.version>\s*([^<\s]+)\s*</kafka\.version>", pom.read_text())
    if match is None:
        raise StackError(f"{pom} does not set the <kafka.version> property")
    return match.group(1)


def worker_properties(endpoints: LocalEndpoints, plugin_path: Path) -> str:
    """The worker's configuration (see the module docstring for the choices)."""
    settings = {
        "bootstrap.servers": endpoints.kafka_bootstrap,
        "group.id": GROUP_ID,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        **INTERNAL_TOPICS,
        "config.storage.replication.factor": "1",
        "offset.storage.replication.factor": "1",
        "status.storage.replication.factor": "1",
        "offset.storage.partitions": "5",
        "status.storage.partitions": "1",
        "listeners": f"http://{HOST}:{endpoints.connect_port}",
        "rest.advertised.host.name": HOST,
        "rest.advertised.port": str(endpoints.connect_port),
        "plugin.path": str(plugin_path),
        # Source offsets reach Kafka within a second: a restarted test resumes where it was.
        "offset.flush.interval.ms": "1000",
        "scheduled.rebalance.max.delay.ms": "0",
    }
    return "".join(f"{key}={value}\n" for key, value in settings.items())


class ConnectService(LocalService):
    """A Kafka Connect worker (distributed mode) with Debezium PostgreSQL (on demand)."""

    name = "connect"
    start_timeout = 180.0
    on_demand = True
    requires = ("kafka", "apicurio")

    @property
    def endpoint(self) -> str:
        return self.endpoints.connect_url

    @property
    def ports(self) -> Sequence[int]:
        return (self.endpoints.connect_port,)

    def connection(self) -> dict[str, str | int]:
        return {"url": self.endpoints.connect_url}

    @cached_property
    def version(self) -> str:
        version = pom_kafka_version(CONNECT_POM)
        broker = kafka_version()
        if version != broker:
            raise StackError(
                f"connect: {CONNECT_POM} pins Kafka {version} and the broker's pom {broker}; "
                f"set the same <kafka.version> in stack/connect/pom.xml"
            )
        return version

    @property
    def libs(self) -> Path:
        return self.dirs.cache / f"connect-{self.version}" / "libs"

    @property
    def plugin_path(self) -> Path:
        return self.dirs.cache / f"connect-{self.version}" / "plugins"

    @property
    def config_file(self) -> Path:
        return self.dirs.run / "worker.properties"

    def install(self) -> None:
        require_java()
        install_once(self.libs, self._download_runtime)
        for plugin, pom in PLUGIN_POMS.items():
            install_once(
                self.plugin_path / plugin,
                functools.partial(self._download_plugin, pom=pom, plugin=plugin),
            )

    def _download_runtime(self, target: Path) -> None:
        run_maven(
            [
                "-f",
                str(CONNECT_POM),
                f"{DEPENDENCY_PLUGIN}:copy-dependencies",
                f"-DoutputDirectory={target}",
            ],
            what=f"Kafka Connect {self.version}",
            cwd=self.dirs.cache,
        )

    def _download_plugin(self, target: Path, pom: str, plugin: str) -> None:
        run_maven(
            [
                "-f",
                str(data_file(pom)),
                f"{DEPENDENCY_PLUGIN}:copy-dependencies",
                f"-DoutputDirectory={target}",
                # The worker provides Kafka's API and the logging facade.
                "-DexcludeGroupIds=org.apache.kafka",
                "-DexcludeArtifactIds=slf4j-api",
            ],
            what=f"the Kafka Connect plugin {plugin}",
            cwd=self.dirs.cache,
        )

    def _require_kafka_and_registry(self) -> None:
        kafka, registry = self.endpoints.kafka_port, self.endpoints.registry_port
        missing = [
            f"{name} (127.0.0.1:{port})"
            for name, port in (("kafka", kafka), ("apicurio", registry))
            if not port_open(port)
        ]
        if missing:
            raise StackError(
                f"connect needs {' and '.join(missing)} running: "
                f"`kbqe stack up kafka apicurio connect`"
            )

    def launch(self) -> int:
        java = require_java()
        self._require_kafka_and_registry()
        self.dirs.ensure()
        self.config_file.write_text(worker_properties(self.endpoints, self.plugin_path))
        return spawn_java(
            self.dirs, java, JVM_OPTIONS, CONNECT_LOG4J2, self.libs, MAIN_CLASS,
            str(self.config_file),
        )  # fmt: skip

    def ready(self) -> bool:
        """The REST API lists the connectors (the worker has joined its group)."""
        answer = request_json("GET", f"{self.endpoint}/connectors")
        return answer is not None and answer.status == 200 and isinstance(answer.body, list)

    def after_ready(self) -> None:
        """The worker found the plugins (a plugin directory it cannot load is only logged)."""
        answer = request_json("GET", f"{self.endpoint}/connector-plugins?connectorsOnly=false")
        found = {p.get("class") for p in answer.body} if answer and answer.status == 200 else set()
        for needed in REQUIRED_PLUGIN_CLASSES:
            if needed not in found:
                raise StackError(
                    f"connect: the worker at {self.endpoint} has no plugin {needed} (plugin.path "
                    f"{self.plugin_path}); see {self.dirs.log_file}"
                )
