"""The local stack's Apache Kafka: one KRaft process that is both broker and controller, on
127.0.0.1, run from the broker's jars on Maven Central (``stack/kafka/pom.xml``, shipped in the
package as ``kbqe_dagster/data/kafka-pom.xml``). The jars go to the stack home's download cache
(``localstack/base.py`` ``stack_home``), never next to the pom: site-packages stays read-only.

Choices, and why:
- Static quorum (``controller.quorum.voters=1@127.0.0.1:<controller port>``), not a dynamic
  ``--standalone`` quorum: a dynamic quorum writes the controller's address into the
  formatted log directory, so moving the controller port (``KBQE_LOCAL_KAFKA_CONTROLLER_PORT``)
  would strand a formatted data directory. With static voters the port is only config.
- ``auto.create.topics.enable=false``: production clusters usually forbid it, and a typo in a
  topic name should fail loudly in tests too. Tests and the demo create their topics with an
  AdminClient (partition count explicit); ``num.partitions=1`` is only the broker default.
- Replication factors and min ISR of the internal topics are 1 (one node), and
  ``group.initial.rebalance.delay.ms=0`` so a consumer group starts at once in tests.
- Data persists in ``run/kafka/data`` across ``kbqe stack down/up`` like the other services'
  data (staging files and load state refer to offsets); delete the directory for a new cluster.
- Heap -Xmx384m: plenty for a development broker, and the tests run next to Spark.
"""

from __future__ import annotations

import base64
import logging
import re
import subprocess
import uuid
from collections.abc import Callable, Mapping, Sequence
from functools import cached_property
from pathlib import Path

from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient

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
from kbqe_dagster.packaged import data_file

log = logging.getLogger(__name__)

KAFKA_POM = data_file("kafka-pom.xml")
NODE_ID = 1
JVM_OPTIONS = ("-Xmx384m", "-Xms128m", "-XX:+ExitOnOutOfMemoryError", "-Djava.awt.headless=true")
FORMAT_TIMEOUT = 180.0

# Kafka 4 logs through log4j2; everything goes to stdout, which spawn() sends to the log file.
LOG4J2_PROPERTIES = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
# The broker prints every config value on start; keep the log readable.
logger.config.name = org.apache.kafka.common.config.AbstractConfig
logger.config.level = WARN
"""


def kafka_version(pom: Path = KAFKA_POM) -> str:
    """The Kafka version pinned in ``stack/kafka/pom.xml`` (the single place it is set)."""
    try:
        text = pom.read_text()
    except OSError as err:
        raise StackError(
            f"the Kafka pom {pom} is missing ({err}): reinstall kbqe_dagster (its wheel ships "
            f"kbqe_dagster/data/kafka-pom.xml; a checkout links it to stack/kafka/pom.xml)"
        ) from err
    match = re.search(r"<kafka\.version>\s*([^<\s]+)\s*</kafka\.version>", text)
    if match is None:
        raise StackError(f"{pom} does not set the <kafka.version> property")
    return match.group(1)


def server_properties(
    endpoints: LocalEndpoints, log_dir: Path, extra: Mapping[str, str] | None = None
) -> str:
    """The single-node KRaft configuration (see the module docstring for the choices);
    ``extra``: settings added or replaced (a test's own broker with more listeners)."""
    broker, controller = endpoints.kafka_port, endpoints.kafka_controller_port
    settings = {
        "process.roles": "broker,controller",
        "node.id": str(NODE_ID),
        "listeners": f"PLAINTEXT://{HOST}:{broker},CONTROLLER://{HOST}:{controller}",
        "advertised.listeners": f"PLAINTEXT://{HOST}:{broker}",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "PLAINTEXT",
        "controller.listener.names": "CONTROLLER",
        "controller.quorum.voters": f"{NODE_ID}@{HOST}:{controller}",
        "log.dirs": str(log_dir),
        "num.partitions": "1",
        "auto.create.topics.enable": "false",
        "offsets.topic.replication.factor": "1",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "min.insync.replicas": "1",
        "group.initial.rebalance.delay.ms": "0",
        # Local data keeps whatever timestamps it was produced with (tests and demos produce
        # 2024 events): time-based retention would delete a partition's old-stamped segments
        # minutes after a fresh broker starts, and a range would stage half its messages.
        "log.retention.ms": "-1",
    }
    settings.update(extra or {})
    return "".join(f"{key}={value}\n" for key, value in settings.items())


def new_cluster_id(random_bytes: Callable[[], bytes] = lambda: uuid.uuid4().bytes) -> str:
    """A Kafka cluster id: 16 random bytes, URL-safe base64 without padding (Kafka's Uuid).

    Never one that starts with ``-``: the storage tool's argument parser reads such an id as
    an option (``--cluster-id: expected one argument``), so one fresh stack in 64 failed to
    start. Kafka's own ``Uuid.randomUuid`` draws again for the same reason."""
    while True:
        cluster_id = base64.urlsafe_b64encode(random_bytes()).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaService(LocalService):
    """A single-node KRaft Kafka (broker + controller) on 127.0.0.1."""

    name = "kafka"
    start_timeout = 120.0

    @property
    def endpoint(self) -> str:
        return self.endpoints.kafka_bootstrap

    @property
    def ports(self) -> Sequence[int]:
        return (self.endpoints.kafka_port, self.endpoints.kafka_controller_port)

    @cached_property
    def version(self) -> str:
        return kafka_version()

    @property
    def libs(self) -> Path:
        return self.dirs.cache / f"kafka-{self.version}" / "libs"

    @property
    def config_file(self) -> Path:
        return self.dirs.run / "server.properties"

    @property
    def log_dir(self) -> Path:
        return self.dirs.data / "kraft"

    def extra_properties(self) -> dict[str, str]:
        """Settings added to or replacing :func:`server_properties`' (none for the stack's own
        broker; a test's broker with authenticated listeners adds them)."""
        return {}

    def install(self) -> None:
        require_java()
        install_once(self.libs, self._download)

    def _download(self, target: Path) -> None:
        run_maven(
            [
                "-f",
                str(KAFKA_POM),
                f"{DEPENDENCY_PLUGIN}:copy-dependencies",
                f"-DoutputDirectory={target}",
            ],
            what=f"Apache Kafka {self.version}",
            cwd=self.dirs.cache,
        )

    def launch(self) -> int:
        java = require_java()
        self.dirs.ensure()
        self.config_file.write_text(
            server_properties(self.endpoints, self.log_dir, self.extra_properties())
        )
        self._format_storage(java)
        return spawn_java(
            self.dirs, java, JVM_OPTIONS, LOG4J2_PROPERTIES, self.libs, "kafka.Kafka",
            str(self.config_file),
        )  # fmt: skip

    def _format_storage(self, java: str) -> None:
        """Format the KRaft log directory once; a formatted directory is left as it is."""
        if (self.log_dir / "meta.properties").exists():
            return
        log.info("formatting Kafka storage in %s", self.log_dir)
        with open(self.dirs.log_file, "ab") as out:
            proc = subprocess.run(
                [
                    java,
                    "-Xmx256m",
                    "-cp",
                    f"{self.libs}/*",
                    "kafka.tools.StorageTool",
                    "format",
                    "-t",
                    new_cluster_id(),
                    "-c",
                    str(self.config_file),
                    "--ignore-formatted",
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                timeout=FORMAT_TIMEOUT,
            )
        if proc.returncode != 0:
            raise StackError(
                f"kafka: formatting the storage directory {self.log_dir} failed "
                f"(exit {proc.returncode}); see {self.dirs.log_file}"
            )

    def ready(self) -> bool:
        """The broker answers a metadata request and lists itself (not just an open port)."""
        if not port_open(self.endpoints.kafka_port):
            return False
        # librdkafka's own connection chatter goes to our logger, never to stderr.
        admin = AdminClient(
            {
                "bootstrap.servers": self.endpoint,
                "logger": log,
                "socket.timeout.ms": 2000,
            }
        )
        try:
            metadata = admin.list_topics(timeout=2)
        except KafkaException:
            return False
        return NODE_ID in metadata.brokers
