"""Kafka connection settings and the clients built from them, for every Kafka reader of the
package: :class:`KafkaSettings` (its ``repr`` hides secrets, so it can be logged, and it travels
to Spark executors), the range consumer's configuration, the error every read raises, and the
logger librdkafka's own lines go to.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from kbqe_dagster.core.client_properties import redacted
from kbqe_dagster.core.errors import KbqeError

CLIENT_LOG = logging.getLogger("kbqe_dagster.kafka")
"""Where librdkafka's own lines go (a broker not answering yet, a retried connection): the
logger every Kafka client of the package uses, which the console shows only from ERROR
(cli/logs.py), instead of librdkafka printing ``%4|...`` straight to stderr. In a process
without logging set up (a Spark python worker, a fault-suite child) they go nowhere, as a
library's logs should: a read that fails raises an error naming topic, partition, offset."""
CLIENT_LOG.addHandler(logging.NullHandler())


class KafkaReadError(KbqeError):
    """Kafka could not be read; the message names topic/partition/offset."""


class TopicMissing(KafkaReadError):
    """A configured topic Kafka does not hold: not created yet (a pipeline started before its
    producers), or deleted. A normal state, not a failure: whoever reads it skips the topic
    with this one-line reason and serves the others."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        super().__init__(
            f"topic {topic!r} does not exist in Kafka (not created yet, or "
            "deleted); not staged until it exists"
        )


@dataclass(frozen=True)
class KafkaSettings:
    """Bootstrap servers plus any librdkafka client setting (``security.protocol``,
    ``sasl.mechanism``, ``sasl.password``, ``ssl.certificate.location``, ``ssl.key.location``,
    ``sasl.oauthbearer.config``, ...): what every client of the package gets, the stage
    tasks' on the executors (this object is pickled to them), the sensors' and the operator
    commands' alike. Its ``repr`` shows no secret property's value
    (:func:`~kbqe_dagster.core.client_properties.is_secret_property`)."""

    bootstrap_servers: str
    client_config: Mapping[str, str] = field(default_factory=dict)

    def config(self, **overrides: object) -> dict:
        conf = {
            "bootstrap.servers": self.bootstrap_servers,
            "logger": CLIENT_LOG,
            **self.client_config,
        }
        conf.update(overrides)
        return conf

    def __repr__(self) -> str:
        shown = redacted(self.client_config)
        return f"KafkaSettings(bootstrap_servers={self.bootstrap_servers!r}, client_config={shown})"


# Consumer tuning a pipeline's client_config may override (bench/bench_stage.py measures it):
# - librdkafka (>= 2.4) waits fetch.queue.backoff.ms (1 s by default) before refetching a
#   partition whose local queue passed its threshold, and a reader that drains its queue as
#   fast as a stage task does would wait out that second again and again. At 0 the broker
#   thread spins instead (clock, lock and poll calls without end) and took a third of a stage
#   task's CPU on two cores. At 20 ms, about the time a stage task takes to drain the queue
#   below, the next fetch is under way before the task runs dry, and nothing spins: 27 % less
#   CPU per range than at 0, at the same or better wall time.
# - 4 MiB per partition per fetch (1 MiB by default): a quarter of the fetch round trips.
# - The prefetch queue (64 MB by default) is most of a stage worker's memory. 4 MB, one fetch,
#   keeps a task fed (make bench: the same msg/s as 16 MB) for about 30 MB less per worker.
CONSUMER_TUNING = {
    "fetch.queue.backoff.ms": 20,
    "max.partition.fetch.bytes": 4 * 1024 * 1024,
    "queued.max.messages.kbytes": 4_096,
}


def consumer_config(settings: KafkaSettings) -> dict:
    """The range consumer's settings (both the confluent-kafka and the native consumer's)."""
    # group.id is required by librdkafka even for assign(); nothing is ever committed to it.
    conf = settings.config(
        **{
            "group.id": "kbqe-stage",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        }
    )
    for key, value in CONSUMER_TUNING.items():
        conf.setdefault(key, value)
    return conf


def connected_consumer(settings: KafkaSettings) -> Consumer:
    """A consumer with the range reader's settings, connected at once (see
    :func:`connected_admin`): a watermark query through a new client answers ~50 ms sooner."""
    return Consumer({"enable.sparse.connections": False, **consumer_config(settings)})


def connected_admin(settings: KafkaSettings) -> AdminClient:
    """An admin client for one or two metadata or offset requests. librdkafka's sparse
    connections make a new client's first metadata request wait about 50 ms for a broker
    connection it only starts on demand; connecting to the bootstrap brokers at once answers
    in 2 ms (a stage run's preparation and every sensor tick ask through a new client)."""
    conf = settings.config()
    conf.setdefault("enable.sparse.connections", False)
    return AdminClient(conf)
