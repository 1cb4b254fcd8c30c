"""One suite run's own corner of the local stack, and the undisturbed steps between faults.

Every run gets a unique topic (with dots: names are parsed from the right), a unique staging
prefix in the local bucket and its own three datasets, so nothing collides with other tests
or earlier runs. The steps here are the *restarts*: a stage pass (plan on the driver, then
one ``stage_range`` per planned range — what the Spark job runs, without the Spark
scheduler) repeated until nothing is planned, load cycles until nothing is left to do, and
done-file retention.
"""

from __future__ import annotations

import logging
import random
import uuid
from dataclasses import dataclass, field
from datetime import date

from kbqe_dagster.core.config.pipeline import PipelineConfig, parse_pipeline_config
from kbqe_dagster.demo.samples import produce, register_schemas
from kbqe_dagster.loading.coordinator import LoadCoordinator
from kbqe_dagster.loading.report import CycleReport
from kbqe_dagster.loading.retention import RetentionResult, apply_retention
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT, LocalEndpoints
from kbqe_dagster.resources.bigquery import BigQueryLoads, EmulatorBigQueryLoads
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG, KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster.resources.staging_store import StagingLocation, StagingStore
from kbqe_dagster.stagers import stage_context
from kbqe_dagster.staging.context import RangeResult, StageContext
from kbqe_dagster.staging.prepare import Preparation, prepare_topic
from kbqe_dagster.staging.task import stage_range
from reliability.messages import Datasets, Ledger, SchemaIds, batch

log = logging.getLogger(__name__)

PARTITIONS = 3
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
    ledger: Ledger = field(default_factory=Ledger)

    @classmethod
    def create(cls, endpoints: LocalEndpoints, seed: int, today: date) -> World:
        """A fresh topic and schema ids; the seed drives everything drawn afterwards."""
        from confluent_kafka.admin import AdminClient, NewTopic

        world = cls(uuid.uuid4().hex[:8], endpoints, today, random.Random(seed))
        admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap, "logger": CLIENT_LOG})
        admin.create_topics([NewTopic(world.topic, num_partitions=PARTITIONS,
                                      replication_factor=1)])[world.topic].result(30)
        world.ids = register_schemas(endpoints.registry_url)
        log.info("suite run %s: topic %s, staging %s", world.run_id, world.topic,
                 world.staging.url)
        return world

    # --- names ------------------------------------------------------------------------------
    @property
    def topic(self) -> str:
        return f"rel.faults.t{self.run_id}"

    @property
    def datasets(self) -> Datasets:
        return Datasets(f"rel_{self.run_id}_sales", f"rel_{self.run_id}_web",
                        f"rel_{self.run_id}_dead")

    @property
    def tables(self) -> tuple[tuple[str, str], ...]:
        ds = self.datasets
        return (ds.orders, ds.page_views)

    @property
    def dead_letter_table(self) -> tuple[str, str]:
        return (self.datasets.dead, DEAD_LETTER_TABLE)

    @property
    def staging(self) -> StagingLocation:
        return StagingLocation(f"gs://{LOCAL_BUCKET}/rel-{self.run_id}", self.endpoints.gcs_url,
                               LOCAL_PROJECT)

    @property
    def config(self) -> PipelineConfig:
        ds = self.datasets
        return parse_pipeline_config({
            "version": 1,
            "topics": [{
                "name": self.topic,
                "routing": {"mode": "fields"},
                "event_time": {"fields": ["eventTime", "occurredAt"]},
                "staging": {"max_messages_per_range": MAX_MESSAGES_PER_RANGE},
            }],
            "allowed_destinations": [f"{ds.sales}.*", f"{ds.web}.*"],
            "dead_letter": {"dataset": ds.dead, "table": DEAD_LETTER_TABLE},
            "load": {"max_retries": MAX_RETRIES, "job_id_prefix": f"rel_{self.run_id}"},
        }, source=f"fault suite {self.run_id}")

    @property
    def ctx(self) -> StageContext:
        return stage_context(KafkaSettings(self.endpoints.kafka_bootstrap),
                            RegistrySettings(self.endpoints.registry_url), self.staging,
                            self.config, self.topic)

    def store(self) -> StagingStore:
        return self.staging.open()

    def bigquery(self) -> EmulatorBigQueryLoads:
        return local_loads(self.endpoints)

    # --- producing --------------------------------------------------------------------------
    def produce_batch(self, count: int, step: str) -> int:
        """Produce ``count`` seeded messages for ``step`` and record where Kafka put them."""
        messages = batch(self.rnd, self.ids, self.datasets, count, self.today)
        placed = produce(self.endpoints.kafka_bootstrap, self.topic, messages, PARTITIONS,
                         {"logger": CLIENT_LOG})
        self.ledger.add(placed, step)
        return len(messages)

    # --- undisturbed steps (the restarts) ---------------------------------------------------
    def prepare(self) -> Preparation:
        return prepare_topic(
            self.store(), self.ctx.kafka, self.topic,
            max_messages_per_run=1_000_000, max_messages_per_range=MAX_MESSAGES_PER_RANGE,
            start_policy=self.ctx.start_policy,
        )

    def stage_pass(self, max_runs: int = 10) -> tuple[Preparation, list[RangeResult]]:
        """Stage runs until one plans nothing (a partition without commits gets one range per
        run): the first run's preparation (its recovery) and every range staged."""
        ctx = self.ctx
        first: Preparation | None = None
        results: list[RangeResult] = []
        for _ in range(max_runs):
            prep = self.prepare()
            first = first or prep
            if not prep.plan.ranges:
                break
            results += [stage_range(ctx, rng) for rng in prep.plan.ranges]
        assert first is not None
        return first, results

    def load_until_settled(self, loads: BigQueryLoads | None = None,
                           max_cycles: int = 4) -> list[CycleReport]:
        """Load cycles until one plans nothing and leaves nothing pending."""
        reports = []
        for _ in range(max_cycles):
            report = LoadCoordinator(self.store(), loads or self.bigquery(), self.config).run_cycle()
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
            admin = AdminClient({"bootstrap.servers": self.endpoints.kafka_bootstrap,
                                 "logger": CLIENT_LOG})
            admin.delete_topics([self.topic])[self.topic].result(30)
        except Exception as error:  # noqa: BLE001
            log.warning("could not remove staging files or topic of run %s: %s", self.run_id, error)


def local_loads(endpoints: LocalEndpoints) -> EmulatorBigQueryLoads:
    """The local stack's BigQuery loads, as ``kbqe`` configures them for the emulator."""
    return EmulatorBigQueryLoads(local_bigquery_client(endpoints))
