"""One staging area per (table, topic) on the real local services (core/load/feeds.py): the
incident of the shared dev stack replayed with Dagster's ``load_job``. A first staging prefix
loads a topic; a second prefix, which staged the same topic again from offset 0, is refused:
the BigQuery emulator's tables keep one row per Kafka offset, carry the first prefix as their
label, and the second prefix's files are quarantined with a note naming both."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import date, timedelta
from pathlib import Path

import dagster as dg
import pytest
import yaml

from kbqe_dagster.core.load.feeds import feed_label_key, feed_label_value
from kbqe_dagster.definitions import build_definitions
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT, local_endpoints
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster_tests.loading.staged import ORDER_V1, Table, stage_range
from kbqe_dagster_tests.localstack.emulators import emulators  # noqa: F401 (fixture)

pytestmark = [pytest.mark.integration, pytest.mark.usefixtures("emulators")]

DAY = date.today() - timedelta(days=1)


@dataclass(frozen=True)
class Areas:
    prefix: str
    topic: str
    config_path: Path
    first: StagingLocation
    second: StagingLocation
    orders: Table
    dead: Table

    def rows(self, table: Table) -> list[tuple]:
        columns = (
            "`partition`, `offset`" if table is self.dead else "_kafka_partition, _kafka_offset"
        )
        sql = f"SELECT {columns} FROM `{table.dataset}.{table.table}`"
        return sorted(tuple(r.values()) for r in local_bigquery_client().query_and_wait(sql))

    def labels(self, table: Table) -> dict[str, str]:
        return dict(local_bigquery_client().get_table(f"{table.dataset}.{table.table}").labels)


@pytest.fixture
def areas(tmp_path: Path) -> Iterator[Areas]:
    prefix = f"it2sa{uuid.uuid4().hex[:8]}"
    topic = f"{prefix}.events"
    config = {
        "version": 1,
        "topics": [{"name": topic, "event_time": {"fields": ["eventTime"]}}],
        "allowed_destinations": [f"{prefix}_sales.orders"],
        "dead_letter": {"dataset": f"{prefix}_dead", "table": "dead_letters"},
        "load": {"max_retries": 1},
    }
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(config))
    gcs = local_endpoints().gcs_url
    first = StagingLocation(f"gs://{LOCAL_BUCKET}/{prefix}-rawdemo", gcs, LOCAL_PROJECT)
    second = StagingLocation(f"gs://{LOCAL_BUCKET}/{prefix}-staging", gcs, LOCAL_PROJECT)
    yield Areas(
        prefix,
        topic,
        path,
        first,
        second,
        Table(f"{prefix}_sales", "orders", 11, ORDER_V1),
        Table(f"{prefix}_dead", "dead_letters", 0, {}),
    )
    client = local_bigquery_client()
    for dataset in ("sales", "dead"):
        client.delete_dataset(f"{prefix}_{dataset}", delete_contents=True, not_found_ok=True)
    for location in (first, second):
        store = location.open()
        for stored in store.list("_kbqe/") + store.list():
            store.delete(stored.name)


def load_from(areas: Areas, staging: StagingLocation, monkeypatch: pytest.MonkeyPatch):
    """Dagster's load job with ``KBQE_STAGING_URL`` at ``staging``, as `kbqe demo` was run."""
    monkeypatch.setenv("KBQE_PIPELINE_CONFIG", str(areas.config_path))
    monkeypatch.setenv("KBQE_STAGING_URL", staging.url)
    defs = build_definitions(str(areas.config_path), env="local")
    return defs.resolve_job_def("load_job").execute_in_process(
        instance=dg.DagsterInstance.ephemeral()
    )


def test_a_second_staging_prefix_restaging_from_offset_0_is_quarantined_not_loaded_twice(
    areas: Areas, monkeypatch: pytest.MonkeyPatch
) -> None:
    stage_range(
        areas.first.open(), areas.topic, 0, 0, 9, [(areas.orders, 8, DAY), (areas.dead, 2, DAY)]
    )
    assert load_from(areas, areas.first, monkeypatch).success
    label = {feed_label_key(areas.topic): feed_label_value(areas.first.url)}
    assert areas.labels(areas.orders) == label and areas.labels(areas.dead) == label
    second = areas.second.open()
    stage_range(second, areas.topic, 0, 0, 19, [(areas.orders, 16, DAY), (areas.dead, 4, DAY)])

    result = load_from(areas, areas.second, monkeypatch)

    assert result.success, "a refused table does not fail the run"
    assert areas.rows(areas.orders) == [(0, o) for o in range(8)], "no offset loaded twice"
    assert areas.rows(areas.dead) == [(0, 8), (0, 9)]
    notes = {
        f.name: json.loads(second.read_bytes(f.name)) for f in second.list("_kbqe/quarantine/")
    }
    assert {n["table"] for n in notes.values()} == {"orders", "dead_letters"}
    error = next(n["error"] for n in notes.values() if n["table"] == "orders")
    assert f"table {areas.orders.dataset}.orders is fed with topic {areas.topic}" in error
    assert feed_label_value(areas.first.url) in error and areas.second.url in error
    assert areas.labels(areas.orders) == label, "the feeding staging area stays recorded"
