"""``stage_loop_job`` run in-process against the local stack (Kafka, registry, fake GCS, the
BigQuery emulator's Storage Write API): one topic feeds ``orders`` (``delivery:
storage_write``, flat columns); while the loop runs, messages are produced in three bursts,
each committed (its rows appended: a range's done file follows its append) before the next;
the run's status set to CANCELING (what Dagster's terminate does first) ends the loop after
its round. Every message is then in the table
exactly once, the table's materializations are folded (one per Kafka partition and event day
for the whole run: its report interval is longer than the test) and sum to the messages, the
``rows_loaded`` check passed, and the ``staging`` materialization says why and after how many
rounds, idle ones among them.

Isolated like the other Storage Write tests: a topic, staging prefix, datasets and Dagster
instance of this test only. Named emulator gap: the BigQuery emulator can hang when a query
arrives while AppendRows requests are being served (one DuckDB connection for its REST and
gRPC sides), so the table is queried only once the loop has stopped; while it runs, the
staging area's done files say what was appended.
"""

from __future__ import annotations

import logging
import threading
import time

import dagster as dg
import pytest

from kbqe_dagster.definitions import build_definitions
from kbqe_dagster.defs.staging.jobs import stage_loop_run_config
from kbqe_dagster.localstack.endpoints import LOCAL_PROJECT
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.staging.backlog import topic_backlog
from kbqe_dagster_tests.support.storage_write_rig import Rig

pytestmark = [pytest.mark.integration, pytest.mark.slow]

log = logging.getLogger(__name__)

BURSTS = (40, 25, 35)
VISIBLE_WITHIN_S = 60  # the first burst waits for the SparkContext to start
IDLE_S = 3.5  # after the last burst: at least two idle rounds (one a second)


@pytest.fixture
def rig(local_stack, local_endpoints, tmp_path, monkeypatch):
    rig = Rig(local_endpoints, tmp_path)
    for name in (
        "KBQE_ENV",
        "KBQE_PIPELINE_CONFIG",
        "KBQE_STAGING_URL",
        "KBQE_GCS_ENDPOINT",
        "KBQE_GCP_PROJECT",
        "DAGSTER_HOME",
    ):
        monkeypatch.setenv(name, rig.env[name])
    yield rig
    rig.remove()


class Producer(threading.Thread):
    """Produces the bursts while the loop runs, each once the previous one is committed,
    then terminates the loop run as Dagster does (status CANCELING)."""

    def __init__(self, rig: Rig, instance: dg.DagsterInstance) -> None:
        super().__init__(daemon=True)
        self.rig, self.instance = rig, instance
        self.store = StagingLocation(
            rig.env["KBQE_STAGING_URL"], rig.endpoints.gcs_url, LOCAL_PROJECT
        ).open()
        self.kafka = KafkaSettings(rig.endpoints.kafka_bootstrap)
        self.seconds: list[float] = []  # produce -> every row appended, per burst
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            run = self._loop_run()
            for burst in BURSTS:
                started = time.monotonic()
                self.rig.produce(views=0, orders=burst)
                self._wait_visible(started)
                self.seconds.append(time.monotonic() - started)
            time.sleep(IDLE_S)  # rounds that find nothing new
            self.instance.report_run_canceling(self.instance.get_run_by_id(run.run_id))
        except BaseException as error:  # reported by the test, after the loop ended
            self.error = error
            run = self._loop_run()
            self.instance.report_run_canceling(self.instance.get_run_by_id(run.run_id))

    def _loop_run(self) -> dg.DagsterRun:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            runs = self.instance.get_runs(filters=dg.RunsFilter(job_name="stage_loop_job"))
            if runs:
                return runs[0]
            time.sleep(0.2)
        raise AssertionError("no stage_loop_job run started within 60 s")

    def _wait_visible(self, started: float) -> None:
        while time.monotonic() - started < VISIBLE_WITHIN_S:
            if self._lag() == 0:
                return
            time.sleep(0.2)
        raise AssertionError(
            f"{self._lag()} message(s) of {self.rig.produced['orders']} not "
            f"committed after {VISIBLE_WITHIN_S}s"
        )

    def _lag(self) -> int:
        """Messages in Kafka beyond the done files (each done file follows its range's append)."""
        return topic_backlog(self.store, self.kafka, self.rig.topic, with_oldest=False).lag


def test_the_loop_delivers_each_message_once_within_seconds_and_stops_when_terminated(rig) -> None:
    defs = build_definitions(rig.env["KBQE_PIPELINE_CONFIG"], "local")
    with dg.DagsterInstance.from_config(rig.env["DAGSTER_HOME"]) as instance:
        producer = Producer(rig, instance)
        producer.start()
        config = stage_loop_run_config([rig.topic])
        config["ops"]["staging"]["config"].update({"max_run_s": 240.0, "report_every_s": 600.0})
        result = defs.resolve_job_def("stage_loop_job").execute_in_process(
            run_config=config, instance=instance
        )
        producer.join(30)
        key = dg.AssetKey(["bigquery", rig.sales, "orders"])
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key), limit=1000
        ).records
        (check,) = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(key, "rows_loaded"), limit=1
        )
    assert producer.error is None, producer.error
    assert result.success
    [staging] = [
        e.materialization
        for e in result.get_asset_materialization_events()
        if e.materialization.asset_key == dg.AssetKey(["staging"])
    ]
    meta = {k: v.value for k, v in staging.metadata.items()}
    log.info(
        "produce -> appended: %s s; %d round(s), %d idle; rounds take %ss idle, %ss busy",
        [round(s, 2) for s in producer.seconds],
        meta["rounds"],
        meta["idle_rounds"],
        meta["idle_round_seconds"],
        meta["busy_round_seconds"],
    )
    assert meta["stopped_because"] == "terminated"
    assert meta["idle_rounds"] >= 2 and meta["rounds"] - meta["idle_rounds"] >= len(BURSTS)
    assert meta["dagster/row_count"] == sum(BURSTS)
    assert rig.counts(rig.sales, "orders") == (sum(BURSTS), sum(BURSTS))  # exactly once

    folds = [
        (
            r.asset_materialization.partition,
            r.asset_materialization.metadata["offset_ranges"].value[0]["partition"],
        )
        for r in records
    ]
    assert len(folds) == len(set(folds)), "one materialization per Kafka partition and day"
    assert sum(r.asset_materialization.metadata["dagster/row_count"].value for r in records) == sum(
        BURSTS
    )
    assert check.status.value == "SUCCEEDED"
    # After the first burst (which waited for the SparkContext), rows are appended within a
    # few seconds of being produced.
    assert max(producer.seconds[1:]) < 15, producer.seconds
