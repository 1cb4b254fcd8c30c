"""The soak's fleet: its topics, its pipeline file, and the producer that feeds it.

The fleet is what users run, in one pipeline file of the soak's own (unique topic, dataset and
staging names, so nothing collides with other runs on the same stack):

- ``hot``: one busy Avro topic (6 partitions), routed by its records' fields into ``orders``
  and ``page_views``; orders are schema v1 only until the evolution point, then v1 and v2 (v2
  adds a field) mixed, as a producer fleet upgrades;
- ``small.00`` … ``small.19``: twenty small Avro topics of the same kind (the sensor packs them
  into shared stage runs);
- ``pat.<n>``: a topic no ``topics:`` entry lists, found by ``topic_patterns`` and created
  during the run;
- ``hourly``: page views routed statically into an HOUR-partitioned table;
- ``json``: schemaless JSON under an inline schema (``format: json``);
- ``proto``: Confluent-framed Protobuf under a registry ``.proto`` (``format: protobuf``);
- ``cdc.soft`` / ``cdc.hard``: Debezium change events into keyed tables with soft and hard
  deletes (history on), fed the same changes, with a schema evolution of the source table.

Every Avro, JSON and Protobuf topic also gets bad input (about 3 %, every kind its format
dead-letters), so the dead-letter table is part of every check. The ledger records where Kafka
put each message and what must be found there; the Debezium topics are checked against their
oracle instead (``kbqe_dagster.demo.debezium``).
"""

from __future__ import annotations

import logging
import random
import struct
import threading
import time
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from kbqe_dagster.core.formats.protobuf_wire import varint
from kbqe_dagster.core.reasons import Reason
from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.demo.debezium import CustomersTable, DebeziumTopics
from kbqe_dagster.demo.samples import ORDER_V1, PAGE_VIEW, SampleMessage, register_schemas
from kbqe_dagster.localstack.endpoints import LocalEndpoints
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG
from reliability.messages import Datasets, Ledger, SchemaIds, _body, _order, _page_view, bad_message

log = logging.getLogger(__name__)

HOT_PARTITIONS = 6
SMALL_TOPICS = 20
BAD_RATIO = 0.03
CDC_PARTITIONS = 3

JSON_SCHEMA = {
    "type": "record",
    "name": "JsonEvent",
    "namespace": "soak",
    "fields": [
        {"name": "id", "type": "long"},
        {"name": "kind", "type": "string"},
        {"name": "eventTime", "type": "string"},
    ],
}
PROTO = """syntax = "proto3";
package soak;
message Reading {
  string sensor = 1;
  double value = 2;
  string eventTime = 3;
}
"""


def _pb_string(number: int, text: str) -> bytes:
    data = text.encode()
    return varint(number << 3 | 2) + varint(len(data)) + data


def reading_body(sensor: str, value: float, event_time: str) -> bytes:
    """``soak.Reading`` in Protobuf's wire format, after the message indexes ``[0]`` (written
    by hand: three fields need no compiled class)."""
    return (
        b"\x00"
        + _pb_string(1, sensor)
        + varint(2 << 3 | 1)
        + struct.pack("<d", value)
        + _pb_string(3, event_time)
    )


@dataclass
class Fleet:
    """The soak run's names and pipeline file."""

    run_id: str
    staging_url: str

    @property
    def prefix(self) -> str:
        return f"soak.{self.run_id}"

    @property
    def hot(self) -> str:
        return f"{self.prefix}.hot"

    @property
    def small(self) -> list[str]:
        return [f"{self.prefix}.small.{i:02d}" for i in range(SMALL_TOPICS)]

    @property
    def pattern_topic(self) -> str:
        return f"{self.prefix}.pat.late"

    @property
    def hourly(self) -> str:
        return f"{self.prefix}.hourly"

    @property
    def json_topic(self) -> str:
        return f"{self.prefix}.json"

    @property
    def proto_topic(self) -> str:
        return f"{self.prefix}.proto"

    @property
    def cdc(self) -> dict[str, str]:
        return {mode: f"{self.prefix}.cdc.{mode}" for mode in ("soft", "hard")}

    @property
    def datasets(self) -> Datasets:
        r = self.run_id
        return Datasets(f"soak_{r}_sales", f"soak_{r}_web", f"soak_{r}_dead")

    @property
    def keyed_dataset(self) -> str:
        return f"soak_{self.run_id}_inv"

    @property
    def hourly_table(self) -> tuple[str, str]:
        return (self.datasets.web, "views_hourly")

    @property
    def json_table(self) -> tuple[str, str]:
        return (self.datasets.web, "json_events")

    @property
    def proto_table(self) -> tuple[str, str]:
        return (self.datasets.web, "readings")

    @property
    def tables(self) -> tuple[tuple[str, str], ...]:
        ds = self.datasets
        return (ds.orders, ds.page_views, self.hourly_table, self.json_table, self.proto_table)

    @property
    def storage_write_tables(self) -> tuple[tuple[str, str], ...]:
        return ()

    @property
    def dead_letter_table(self) -> tuple[str, str]:
        return (self.datasets.dead, "dead_letters")

    @property
    def fields_topics(self) -> list[str]:
        """The Avro topics routed by their records' fields (the pattern topic among them)."""
        return [self.hot, *self.small, self.pattern_topic]

    def pipeline(self) -> dict[str, Any]:
        ds = self.datasets
        avro = {
            "routing": {"mode": "fields"},
            "event_time": {"fields": ["eventTime", "occurredAt"]},
        }
        static = lambda table, fields, **extra: {  # noqa: E731
            "routing": {"mode": "static", "dataset": table[0], "table": table[1]},
            "event_time": {"fields": fields, **extra},
        }
        return {
            "version": 1,
            "topics": [
                {"name": self.hot, **avro},
                *({"name": t, **avro} for t in self.small),
                {"name": self.hourly, **static(self.hourly_table, ["occurredAt"], date_rule="utc")},
                {
                    "name": self.json_topic,
                    "format": "json",
                    "schema": JSON_SCHEMA,
                    **static(self.json_table, ["eventTime"]),
                },
                {
                    "name": self.proto_topic,
                    "format": "protobuf",
                    **static(self.proto_table, ["eventTime"]),
                },
                *(
                    {
                        "name": topic,
                        "format": "debezium",
                        "routing": {
                            "mode": "static",
                            "dataset": self.keyed_dataset,
                            "table": f"customers_{mode}",
                        },
                        "keyed": {"deletes": mode, "history": True},
                    }
                    for mode, topic in self.cdc.items()
                ),
            ],
            "topic_patterns": [{"match": rf"soak\.{self.run_id}\.pat\..*", **avro}],
            "allowed_destinations": [f"{ds.sales}.*", f"{ds.web}.*"],
            "tables": {".".join(self.hourly_table): {"partitioning": "hour"}},
            "staging": {"allowed_latency": "30s", "max_messages_per_range": 5_000},
            # A burst of the hot topic makes it "hot" (its own run), the rest share runs.
            "stage_runs": {"max_messages_per_run": 2_000},
            "dead_letter": {"dataset": ds.dead, "table": "dead_letters"},
            "load": {
                # The shortest cadence the config check admits (a table's load jobs stay under
                # half of BigQuery's 1,500 a day); the poll and merges every minute.
                "cadence": "2m",
                "poll_interval": "1m",
                "job_id_prefix": f"soak_{self.run_id}",
            },
            "retention": {"cadence": "2m"},
            "completeness": {"lateness": "1m"},
        }

    def write_pipeline(self, path: Path) -> Path:
        path.write_text(yaml.safe_dump(self.pipeline(), sort_keys=False))
        return path


# --- messages ----------------------------------------------------------------------------------
def avro_batch(
    rnd: random.Random, ids: SchemaIds, ds: Datasets, count: int, today: date, evolved: bool
) -> list[SampleMessage]:
    """Orders and page views over the last three days, bad input mixed in; orders only in
    schema v1 before the evolution point."""
    out: list[SampleMessage] = []
    for _ in range(count):
        if rnd.random() < BAD_RATIO:
            out.append(bad_message(rnd, ids, ds))
            continue
        day = today - timedelta(days=rnd.randrange(3))
        if rnd.random() < 0.5:
            if evolved:  # v1 and v2 mixed in one table, as during a rolling upgrade
                out.append(_order(rnd, ids, ds, rnd.randrange(10**9), day))
            else:
                out.append(_v1_order(rnd, ids, ds, day))
        else:
            out.append(_page_view(rnd, ids, ds, rnd.randrange(10**9), day))
    return out


def _v1_order(rnd: random.Random, ids: SchemaIds, ds: Datasets, day: date) -> SampleMessage:
    record = {
        "datasetName": ds.sales,
        "tableName": "orders",
        "orderId": f"o-{rnd.randrange(10**9)}",
        "customerId": rnd.randrange(10_000),
        "amountCents": rnd.randrange(100, 100_000),
        "currency": "EUR",
        "eventTime": f"{day.isoformat()}T12:00:00.000+02:00[Europe/Paris]",
    }
    return SampleMessage(
        b"v1",
        encode_frame(ids["orders_v1"], _body(ORDER_V1, record)),
        ds.orders,
        None,
        day.isoformat(),
    )


def hourly_batch(
    rnd: random.Random, ids: SchemaIds, table: tuple[str, str], count: int, now: datetime
) -> list[SampleMessage]:
    """Page views statically routed into the HOUR table, over the last six hours (UTC)."""
    out = []
    for i in range(count):
        if rnd.random() < BAD_RATIO:
            out.append(SampleMessage(b"bad", b"\x00\x00", None, str(Reason.TOO_SHORT)))
            continue
        moment = (now - timedelta(minutes=rnd.randrange(360))).replace(microsecond=0)
        record = {
            "datasetName": "ignored",
            "tableName": "ignored",
            "url": f"/h/{i}",
            "sessionId": f"s-{rnd.randrange(5_000)}",
            "durationMs": rnd.randrange(60_000),
            "occurredAt": moment,
        }
        value = encode_frame(ids["page_views"], _body(PAGE_VIEW, record))
        out.append(SampleMessage(None, value, table, None, moment.date().isoformat()))
    return out


def json_batch(
    rnd: random.Random, table: tuple[str, str], count: int, today: date
) -> list[SampleMessage]:
    import json

    out = []
    for i in range(count):
        day = today - timedelta(days=rnd.randrange(3))
        stamp = f"{day.isoformat()}T{rnd.randrange(24):02d}:{rnd.randrange(60):02d}:00Z"
        roll = rnd.random()
        if roll < BAD_RATIO / 2:
            out.append(SampleMessage(b"bad", b"{not json", None, str(Reason.JSON_DECODE_ERROR)))
        elif roll < BAD_RATIO:
            value = json.dumps({"id": "x", "kind": 1, "eventTime": stamp}).encode()
            out.append(SampleMessage(b"bad", value, None, str(Reason.JSON_SCHEMA_MISMATCH)))
        else:
            value = json.dumps({"id": i, "kind": rnd.choice("abc"), "eventTime": stamp}).encode()
            out.append(SampleMessage(None, value, table, None, day.isoformat()))
    return out


def proto_batch(
    rnd: random.Random, schema_id: int, table: tuple[str, str], count: int, today: date
) -> list[SampleMessage]:
    out = []
    for i in range(count):
        day = today - timedelta(days=rnd.randrange(3))
        stamp = f"{day.isoformat()}T{rnd.randrange(24):02d}:{rnd.randrange(60):02d}:00Z"
        if rnd.random() < BAD_RATIO:
            # Message indexes, then a length-delimited field whose length runs past the end.
            body = b"\x00" + b"\x0a\x7f" + b"x"
            out.append(
                SampleMessage(
                    b"bad", encode_frame(schema_id, body), None, str(Reason.PROTOBUF_DECODE_ERROR)
                )
            )
            continue
        body = reading_body(f"s{i % 50}", rnd.random() * 100, stamp)
        out.append(SampleMessage(None, encode_frame(schema_id, body), table, None, day.isoformat()))
    return out


# --- producing ---------------------------------------------------------------------------------
@dataclass
class Produced:
    """What was produced: per topic the ledger, per (topic, partition) when each offset was
    produced (for freshness), and counts per kind."""

    ledgers: dict[str, Ledger] = field(default_factory=dict)
    sent_at: dict[tuple[str, int], list[tuple[int, float]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    per_kind: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    failed: list[str] = field(default_factory=list)


class FleetProducer:
    """One idempotent producer for the whole fleet (what a service fleet's clients amount to),
    recording where each message landed."""

    def __init__(self, endpoints: LocalEndpoints, fleet: Fleet, seed: int) -> None:
        from confluent_kafka import Producer

        self.endpoints, self.fleet = endpoints, fleet
        self.rnd = random.Random(seed)
        self.lock = threading.Lock()
        self.out = Produced()
        self.producer = Producer(
            {
                "bootstrap.servers": endpoints.kafka_bootstrap,
                "enable.idempotence": True,
                "linger.ms": 20,
                # A broker restart or a long outage must not drop messages: retried for 10 min.
                "message.timeout.ms": 600_000,
                "logger": CLIENT_LOG,
            }
        )
        self.ids: SchemaIds = {}
        self.proto_id = 0
        self.customers = CustomersTable(seed, CDC_PARTITIONS)
        self.cdc: DebeziumTopics | None = None
        self.evolved = False
        self.pattern_created = False

    # --- setup ---------------------------------------------------------------------------------
    def create_topics(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic
        from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

        f = self.fleet
        admin = AdminClient(
            {"bootstrap.servers": self.endpoints.kafka_bootstrap, "logger": CLIENT_LOG}
        )
        wanted = [NewTopic(f.hot, num_partitions=HOT_PARTITIONS, replication_factor=1)]
        wanted += [NewTopic(t, num_partitions=1, replication_factor=1) for t in f.small]
        wanted += [
            NewTopic(t, num_partitions=2, replication_factor=1)
            for t in (f.hourly, f.json_topic, f.proto_topic)
        ]
        for future in admin.create_topics(wanted).values():
            future.result(30)
        self.ids = register_schemas(self.endpoints.registry_url)
        registry = SchemaRegistryClient({"url": self.endpoints.registry_url})
        self.proto_id = registry.register_schema(
            f"{f.proto_topic}-value", Schema(PROTO, "PROTOBUF")
        )
        self.cdc = DebeziumTopics(
            self.endpoints.kafka_bootstrap,
            self.endpoints.registry_url,
            list(f.cdc.values()),
            CDC_PARTITIONS,
        )
        for topic in [*f.fields_topics, f.hourly, f.json_topic, f.proto_topic]:
            self.out.ledgers[topic] = Ledger()

    def create_pattern_topic(self) -> None:
        from confluent_kafka.admin import AdminClient, NewTopic

        admin = AdminClient(
            {"bootstrap.servers": self.endpoints.kafka_bootstrap, "logger": CLIENT_LOG}
        )
        for future in admin.create_topics(
            [NewTopic(self.fleet.pattern_topic, num_partitions=2, replication_factor=1)]
        ).values():
            future.result(30)
        self.pattern_created = True
        log.info("created %s (found by topic_patterns only)", self.fleet.pattern_topic)

    # --- one tick --------------------------------------------------------------------------------
    def tick(self, scale: int) -> int:
        """One round of the fleet's traffic, ``scale`` times the steady rate (a burst > 1)."""
        f, rnd, ds = self.fleet, self.rnd, self.fleet.datasets
        now = datetime.now(UTC)
        today = now.date()
        n = 0
        n += self.send(
            f.hot, avro_batch(rnd, self.ids, ds, 40 * scale, today, self.evolved), "avro"
        )
        for topic in rnd.sample(f.small, 4):
            n += self.send(
                topic, avro_batch(rnd, self.ids, ds, rnd.randint(1, 5), today, self.evolved), "avro"
            )
        if self.pattern_created:
            n += self.send(
                f.pattern_topic, avro_batch(rnd, self.ids, ds, 5, today, self.evolved), "avro"
            )
        n += self.send(f.hourly, hourly_batch(rnd, self.ids, f.hourly_table, 5, now), "avro_hourly")
        n += self.send(f.json_topic, json_batch(rnd, f.json_table, 5, today), "json")
        n += self.send(
            f.proto_topic, proto_batch(rnd, self.proto_id, f.proto_table, 5, today), "protobuf"
        )
        self.producer.flush(0)
        return n

    def cdc_round(self) -> int:
        assert self.cdc is not None
        if not self.customers.changes:
            self.customers.snapshot(30)
        else:
            self.customers.round(inserts=3, updates=5, deletes=1)
        # A kafka_restart fault may be under way: wait it out (librdkafka's own delivery
        # bound), as the soak's other producers do; a restart under load takes over 30 s.
        sent = self.cdc.produce(self.customers, deliver_within=300.0)
        self.out.per_kind["debezium"] += sent * len(self.fleet.cdc)
        return sent

    def evolve(self) -> None:
        """Producers upgrade: orders v2 from now on, and the source table of the Debezium
        topics gains a column."""
        self.evolved = True
        self.customers.schema_version = 2
        log.info("schema evolution: orders v2, customers v2")

    def send(self, topic: str, messages: list[SampleMessage], kind: str) -> int:
        ledger = self.out.ledgers[topic]
        partitions = (
            HOT_PARTITIONS if topic == self.fleet.hot else (1 if topic in self.fleet.small else 2)
        )
        for i, sample in enumerate(messages):

            def done(err: Any, msg: Any, sample: SampleMessage = sample) -> None:
                if err is not None:
                    self.out.failed.append(f"{topic}: {err}")
                    return
                with self.lock:
                    ledger.add({(msg.partition(), msg.offset()): sample}, kind)
                    self.out.sent_at[(topic, msg.partition())].append((msg.offset(), time.time()))
                    self.out.per_kind[
                        kind if sample.expect_table else f"bad:{sample.expect_reason}"
                    ] += 1

            while True:
                try:
                    self.producer.produce(
                        topic,
                        value=sample.value,
                        key=sample.key,
                        partition=self.rnd.randrange(partitions) if i % 7 else i % partitions,
                        on_delivery=done,
                    )
                    break
                except BufferError:
                    self.producer.poll(0.5)
            self.producer.poll(0)
        return len(messages)

    def flush(self, timeout: float = 700) -> None:
        left = self.producer.flush(timeout)
        if left:
            self.out.failed.append(f"{left} message(s) still undelivered after {timeout:.0f}s")
