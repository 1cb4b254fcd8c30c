"""One suite run's own corner of the local stack, and the undisturbed steps between faults.

Every run gets a unique topic (with dots: names are parsed from the right), a unique staging
prefix in the local bucket and its own three datasets, so nothing collides with other tests
or earlier runs. The steps here are the *restarts*: a stage pass (plan on the driver, then
one ``stage_range`` per planned range — what the Spark job runs, without the Spark
scheduler) repeated until nothing is planned, load cycles until nothing is left to do, and
done-file retention.

A second topic of its own, :attr:`World.sw_topic`, feeds tables of both kinds in one range:
its orders go to ``orders_live``, ``delivery: storage_write`` (appended through the
emulator's Storage Write API as each range commits), its page views and bad input to the
loaded ``page_views`` and dead-letter tables, like the first topic's. Its faults are
reliability/faults_storage_write.py. With a storage_write table in the file, every topic
routed per record plans one range per partition per stage run, as the stage job does
(``PipelineConfig.topic_may_deliver_by_storage_write``): the first topic too.
"""

from __future__ import annotations

import logging
import random
import uuid
from dataclasses import dataclass, field
from datetime import date

from kbqe_dagster.core.config.pipeline import PipelineConfig, parse_pipeline_config
from kbqe_dagster.delivery.sink import delivery_sink
from kbqe_dagster.delivery.tables import TableKeeperSettings
from kbqe_dagster.demo.samples import produce, register_schemas
from kbqe_dagster.loading.coordinator import LoadCoordinator
from kbqe_dagster.loading.report import CycleReport
from kbqe_dagster.loading.retention_deletes import RetentionResult, apply_retention
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import HOST, LOCAL_BUCKET, LOCAL_PROJECT, LocalEndpoints
from kbqe_dagster.resources.bigquery import BigQueryLoads, BigQueryResource, EmulatorBigQueryLoads
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG, KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation, StagingStore
from kbqe_dagster.stager_registry import stage_context
from kbqe_dagster.staging.context import RangeResult, StageContext
from kbqe_dagster.staging.prepare import Preparation, prepare_topic
from kbqe_dagster.staging.task import stage_range
from reliability.messages import Datasets, Ledger, SchemaIds, batch

log = logging.getLogger(__name__)

PARTITIONS = 3
SW_PARTITIONS = 2
MAX_MESSAGES_PER_RANGE = 60  # small ranges: many files and commit points per stage pass
MAX_RETRIES = 1  # a refused table is retried once, then quarantined
DEAD_LETTER_TABLE = "dead_letters"


@dataclass
class World:
    """The topic, staging prefix, datasets and pipeline of one suite run."""

    run_id: str
    endpoints: LocalEndpoints
    today: date
    rnd: random.Random
    ids: SchemaIds = field(default_factory=dict)
    ledgers: dict[str, Ledger] = field(default_factory=dict)
    """Per topic: where every produced offset must end up."""

    @classmethod
    def create(cls, endpoints: LocalEndpoints, seed: int, today: date) -> World:
        """A fresh topic and schema ids; the seed drives everything drawn afterwards."""
        from confluent_kafka.admin import AdminClient, NewTopic

        world = cls(uuid.uuid4().hex[:8], endpoints, today, random.Random(seed))
        world.ledgers = {world.topic: Ledger(), world.sw_topic: Ledger()}
        admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap, "logger": CLIENT_LOG})
        created = admin.create_topics(
            [
                NewTopic(world.topic, num_partitions=PARTITIONS, replication_factor=1),
                NewTopic(world.sw_topic, num_partitions=SW_PARTITIONS, replication_factor=1),
            ]
        )
        for future in created.values():
            future.result(30)
        world.ids = register_schemas(endpoints.registry_url)
        log.info("suite run %s: topic %s, staging %s", world.run_id, world.topic, world.staging.url)
        return world

    # --- names ------------------------------------------------------------------------------
    @property
    def topic(self) -> str:
        return f"rel.faults.t{self.run_id}"

    @property
    def sw_topic(self) -> str:
        """The topic feeding the storage_write table (and the loaded ones)."""
        return f"rel.faults.sw{self.run_id}"

    @property
    def ledger(self) -> Ledger:
        """The first topic's ledger (the faults of the load path produce there)."""
        return self.ledgers[self.topic]

    @property
    def datasets(self) -> Datasets:
        return Datasets(
            f"rel_{self.run_id}_sales", f"rel_{self.run_id}_web", f"rel_{self.run_id}_dead"
        )

    @property
    def loaded_tables(self) -> tuple[tuple[str, str], ...]:
        """The destination tables of ``delivery: load`` (the dead-letter table aside)."""
        ds = self.datasets
        return (ds.orders, ds.page_views)

    @property
    def tables(self) -> tuple[tuple[str, str], ...]:
        """Every destination table (the dead-letter table aside)."""
        return (*self.loaded_tables, *self.storage_write_tables)

    @property
    def storage_write_tables(self) -> tuple[tuple[str, str], ...]:
        return (self.datasets.orders_live,)

    @property
    def dead_letter_table(self) -> tuple[str, str]:
        return (self.datasets.dead, DEAD_LETTER_TABLE)

    @property
    def staging(self) -> StagingLocation:
        return StagingLocation(
            f"gs://{LOCAL_BUCKET}/rel-{self.run_id}", self.endpoints.gcs_url, LOCAL_PROJECT
        )

    @property
    def config(self) -> PipelineConfig:
        ds = self.datasets
        return parse_pipeline_config(
            {
                "version": 1,
                "topics": [
                    {
                        "name": name,
                        "routing": {"mode": "fields"},
                        "event_time": {"fields": ["eventTime", "occurredAt"]},
                        "staging": {"max_messages_per_range": MAX_MESSAGES_PER_RANGE},
                    }
                    for name in (self.topic, self.sw_topic)
                ],
                "allowed_destinations": [f"{ds.sales}.*", f"{ds.web}.*"],
                "tables": {
                    ".".join(t): {"delivery": "storage_write"} for t in self.storage_write_tables
                },
                "dead_letter": {"dataset": ds.dead, "table": DEAD_LETTER_TABLE},
                "load": {"max_retries": MAX_RETRIES, "job_id_prefix": f"rel_{self.run_id}"},
            },
            source=f"fault suite {self.run_id}",
        )

    @property
    def ctx(self) -> StageContext:
        return self.ctx_of(self.topic)

    def ctx_of(self, topic: str) -> StageContext:
        """The stage context of ``topic``, with the delivery sink the stage job gives it."""
        return local_stage_context(self.endpoints, self.staging, self.config, topic)

    def store(self) -> StagingStore:
        return self.staging.open()

    def bigquery(self) -> EmulatorBigQueryLoads:
        return local_loads(self.endpoints)

    # --- producing --------------------------------------------------------------------------
    def produce_batch(self, count: int, step: str, topic: str | None = None) -> int:
        """Produce ``count`` seeded messages for ``step`` into ``topic`` (the first topic by
        default) and record where Kafka put them."""
        topic = topic or self.topic
        sw = topic == self.sw_topic
        messages = batch(
            self.rnd,
            self.ids,
            self.datasets,
            count,
            self.today,
            orders_table="orders_live" if sw else "orders",
        )
        placed = produce(
            self.endpoints.kafka_bootstrap,
            topic,
            messages,
            SW_PARTITIONS if sw else PARTITIONS,
            {"logger": CLIENT_LOG},
        )
        self.ledgers[topic].add(placed, step)
        return len(messages)

    # --- undisturbed steps (the restarts) ---------------------------------------------------
    def prepare(self, topic: str | None = None) -> Preparation:
        return plan_run(self.ctx_of(topic or self.topic))

    def stage_pass(
        self, max_runs: int = 20, topic: str | None = None
    ) -> tuple[Preparation, list[RangeResult]]:
        """Stage runs of ``topic`` (the first by default) until one plans nothing (a
        partition without commits, or a topic that may write a storage_write table, gets one
        range per run): the first run's preparation (its recovery) and every range staged."""
        ctx = self.ctx_of(topic or self.topic)
        first: Preparation | None = None
        results: list[RangeResult] = []
        for _ in range(max_runs):
            prep = plan_run(ctx)
            first = first or prep
            if not prep.plan.ranges:
                break
            results += [stage_range(ctx, rng) for rng in prep.plan.ranges]
        assert first is not None
        return first, results

    def load_until_settled(
        self, loads: BigQueryLoads | None = None, max_cycles: int = 4
    ) -> list[CycleReport]:
        """Load cycles until one plans nothing and leaves nothing pending."""
        reports = []
        for _ in range(max_cycles):
            report = LoadCoordinator(
                self.store(), loads or self.bigquery(), self.config
            ).run_cycle()
            reports.append(report)
            if not report.planned and report.pending_after == 0:
                break
        return reports

    def retention(self) -> RetentionResult:
        return apply_retention(self.store())

    # --- clean-up ---------------------------------------------------------------------------
    def remove(self) -> None:
        """Drop this run's datasets, staging files and topic (best effort, logged)."""
        from confluent_kafka.admin import AdminClient

        client = local_bigquery_client(self.endpoints)
        for dataset in (self.datasets.sales, self.datasets.web, self.datasets.dead):
            try:
                client.delete_dataset(dataset, delete_contents=True, not_found_ok=True)
            except Exception as error:  # noqa: BLE001 - clean-up never hides the result
                log.warning("could not drop dataset %s: %s", dataset, error)
        try:
            store = self.store()
            for stored in store.list("_kbqe/") + store.list():
                store.delete(stored.name)
            admin = AdminClient(
                {"bootstrap.servers": self.endpoints.kafka_bootstrap, "logger": CLIENT_LOG}
            )
            for future in admin.delete_topics([self.topic, self.sw_topic]).values():
                future.result(30)
        except Exception as error:  # noqa: BLE001
            log.warning("could not remove staging files or topic of run %s: %s", self.run_id, error)


def plan_run(ctx: StageContext) -> Preparation:
    """A stage run's recovery and plan for ``ctx``'s topic, as the stage job makes it (one
    range per partition for a topic that may write a storage_write table)."""
    return prepare_topic(
        ctx.staging.open(),
        ctx.kafka,
        ctx.topic_name,
        max_messages_per_run=1_000_000,
        max_messages_per_range=MAX_MESSAGES_PER_RANGE,
        start_policy=ctx.start_policy,
        one_range_per_partition=ctx.pipeline.topic_may_deliver_by_storage_write(ctx.topic_name),
    )


def local_stage_context(
    endpoints: LocalEndpoints, staging: StagingLocation, config: PipelineConfig, topic: str
) -> StageContext:
    """The stage context of ``topic`` on the local stack, with the delivery sink the stage job
    gives it (for the world's topics and for a keyed rig's)."""
    bigquery = local_bigquery_resource(endpoints)
    sink = delivery_sink(
        config, bigquery.storage_write_settings(), TableKeeperSettings.of(bigquery)
    )
    return stage_context(
        KafkaSettings(endpoints.kafka_bootstrap),
        RegistrySettings(endpoints.registry_url),
        staging,
        config,
        topic,
        sink=sink,
    )


def local_bigquery_resource(endpoints: LocalEndpoints) -> BigQueryResource:
    """The local stack's BigQuery resource (its Storage Write API on the gRPC port)."""
    return BigQueryResource(
        project=LOCAL_PROJECT,
        api_endpoint=endpoints.bigquery_url,
        anonymous_credentials=True,
        emulator=True,
        storage_write_endpoint=f"{HOST}:{endpoints.bigquery_grpc_port}",
    )


def local_loads(endpoints: LocalEndpoints) -> EmulatorBigQueryLoads:
    """The local stack's BigQuery loads, as ``kbqe`` configures them for the emulator."""
    return EmulatorBigQueryLoads(local_bigquery_client(endpoints))
