"""Storage Write delivery end to end on the local stack (Kafka, registry, fake GCS, the
BigQuery emulator and its Storage Write API on its gRPC port): one topic feeds ``page_views``
(``delivery: load``) and ``orders`` (``delivery: storage_write``); ``kbqe run --until-idle``
twice, the second idle; each table holds every message exactly once (count == distinct
offsets == produced); the orders were appended, never loaded (no avro file of theirs ever in
the staging area, no load job); a kill at each new crash point then a rerun gives exactly one
copy; a table switched from load to storage_write between runs, and back, loses and doubles
nothing.

Isolated like the other ``kbqe run`` tests: a topic, staging prefix, datasets and Dagster
instance of this test only.
"""

from __future__ import annotations

import dagster as dg
import pytest

from kbqe_dagster_tests.support.storage_write_rig import Rig

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def rig(local_stack, local_endpoints, tmp_path):
    rig = Rig(local_endpoints, tmp_path)
    yield rig
    rig.remove()


def test_one_topic_two_tables_each_row_once_and_the_appended_table_never_loaded(rig) -> None:
    rig.produce(views=30, orders=24)
    first = rig.until_idle()
    assert first["topics"][rig.topic]["staged"] == 54
    again = rig.until_idle()
    assert again["topics"][rig.topic]["staged"] == 0, "the second run is idle"
    rig.assert_exactly_once()
    names = rig.staging_names()
    assert not [n for n in names if ".orders." in n and n.endswith(".avro")]
    assert [n for n in names if ".orders." in n and n.endswith(".done")]
    assert not [
        n
        for n in names
        if n.endswith(".intent") and ".orders." in n and n.replace(".intent", ".done") not in names
    ], "no open intent left"
    with dg.DagsterInstance.from_config(rig.env["DAGSTER_HOME"]) as instance:
        key = dg.AssetKey(["bigquery", rig.sales, "orders"])
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key), limit=100
        ).records
        metadata = [r.asset_materialization.metadata for r in records]
        (check,) = instance.event_log_storage.get_asset_check_execution_history(
            dg.AssetCheckKey(key, "rows_loaded"), limit=1
        )
    assert sum(m["dagster/row_count"].value for m in metadata) == 24
    assert all(m["delivery"].value == "storage_write" and "job_id" not in m for m in metadata)
    assert check.status.value == "SUCCEEDED"


@pytest.mark.parametrize(
    "point", ["storage_write_intent:1", "storage_write_appended:1", "storage_write_delivered:1"]
)
def test_a_kill_at_each_new_crash_point_then_a_rerun_gives_exactly_one_copy(rig, point) -> None:
    rig.produce(views=10, orders=10)
    rig.until_idle()
    rig.produce(views=8, orders=12)
    killed = rig.kbqe_run(crash_at=point)
    assert killed.returncode != 0, "the crash point was reached"
    assert [
        n
        for n in rig.staging_names()
        if n.endswith(".intent") and n.replace(".intent", ".done") not in rig.staging_names()
    ], "an open intent"
    rig.until_idle()
    rig.until_idle()
    rig.assert_exactly_once()


def test_switching_a_table_between_load_and_storage_write_loses_and_doubles_nothing(
    rig, local_stack
) -> None:
    rig.set_delivery("load")
    rig.produce(views=6, orders=9)
    rig.until_idle()
    rig.assert_exactly_once()
    rig.set_delivery("storage_write")
    rig.produce(views=5, orders=11)
    rig.until_idle()
    rig.assert_exactly_once()
    rig.set_delivery("load")
    rig.produce(views=4, orders=7)
    rig.until_idle()
    rig.until_idle()
    rig.assert_exactly_once()
