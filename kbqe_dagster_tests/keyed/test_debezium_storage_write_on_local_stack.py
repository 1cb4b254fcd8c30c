"""Debezium change streams whose changelogs are delivered through the Storage Write API
(``delivery: storage_write`` on the topics), end to end on the local stack: real Kafka, the
registry, fake GCS, Spark and the BigQuery emulator with its Storage Write API, driven by
``kbqe run --until-idle``.

No load job ever touches the changelogs (no avro file of theirs in the staging area): their
rows are appended as each range commits, and the MERGE, run after every round whether or not
anything was loaded, folds exactly the committed ranges it has not merged yet. After each round
``D.T`` and ``D.T_history`` equal the oracle (the same one the load path's test compares with),
for soft and for hard deletes; the changelog holds each change once; a column added by schema
v2 mid-stream arrives as for loads; a run killed between the appends and the done files is
repaired by the next; a round with nothing new merges nothing. A changelog switched from load
to storage_write and back between runs merges every change once, by the path that delivered it.

The changelog's columns are flat (the customers row, the change and enrichment columns), which
the emulator appends; it loses appended rows of RECORD columns (docs/architecture.md, "Local
stack").
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from kbqe_dagster.demo.debezium import MODES, CustomersTable, KeyedRig, wrong
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT
from kbqe_dagster.resources.staging_store import StagingLocation

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 2


@pytest.fixture
def rig(local_stack, local_endpoints, tmp_path):
    rig = KeyedRig.create(local_endpoints, tmp_path, partitions=PARTITIONS)
    rig.endpoints = local_endpoints
    set_delivery(rig, "storage_write")
    yield rig
    rig.remove()


def set_delivery(rig: KeyedRig, delivery: str) -> None:
    """Rewrite the pipeline file between runs: both topics' changelogs delivered so."""
    pipeline = Path(rig.env["KBQE_PIPELINE_CONFIG"])
    raw = yaml.safe_load(pipeline.read_text())
    for topic in raw["topics"]:
        topic["delivery"] = delivery
    pipeline.write_text(yaml.safe_dump(raw))


def run_until_idle(rig: KeyedRig, crash_at: str | None = None) -> dict:
    done = rig.run_until_idle(crash_at=crash_at)
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    return json.loads(done.stdout)


def staging_names(rig: KeyedRig) -> list[str]:
    store = StagingLocation(
        rig.env["KBQE_STAGING_URL"], rig.endpoints.gcs_url, LOCAL_PROJECT
    ).open()
    return sorted(f.name for f in store.list(""))


def changelog_counts(rig: KeyedRig, mode: str) -> tuple[int, int]:
    """(rows, distinct (partition, offset)) of the changelog."""
    [row] = list(
        rig.client.query(
            f"SELECT COUNT(*) AS n, COUNT(DISTINCT FORMAT('%d:%d', _kafka_partition, _kafka_offset)) "
            f"AS d FROM `{rig.dataset}.customers_{mode}_changelog`"
        ).result()
    )
    return row["n"], row["d"]


def assert_as_the_oracle_says(rig: KeyedRig, table: CustomersTable) -> None:
    differences = rig.differences()
    assert wrong(differences) == 0, differences
    changes = sum(1 for c in table.changes if not c.is_tombstone)
    for mode in MODES:
        assert differences[mode]["current_rows"] > 0 and differences[mode]["history_rows"] > 0
        assert changelog_counts(rig, mode) == (changes, changes), mode


def assert_never_loaded(rig: KeyedRig) -> None:
    names = staging_names(rig)
    assert not [n for n in names if "_changelog." in n and n.endswith(".avro")], (
        "a changelog delivered by storage_write is never staged for a load"
    )
    assert [n for n in names if "_changelog." in n and n.endswith(".done")]


def merge_metadata(rig: KeyedRig, mode: str) -> list:
    """The metadata of the merge job's materializations of ``D.T`` in the run's instance."""
    import dagster as dg

    key = dg.AssetKey(["bigquery", rig.dataset, f"customers_{mode}"])
    with dg.DagsterInstance.from_config(rig.env["DAGSTER_HOME"]) as instance:
        records = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key), limit=100
        ).records
    return [r.asset_materialization.metadata for r in records]


def test_a_debezium_changelog_delivered_by_storage_write_merges_as_the_oracle_says(rig) -> None:
    assert LOCAL_BUCKET in rig.env["KBQE_STAGING_URL"]
    table = CustomersTable(seed=31, partitions=PARTITIONS)

    # Round 1: a snapshot, then live changes of schema v1; nothing is ever loaded.
    table.snapshot(20)
    table.round(inserts=8, updates=12, deletes=4)
    rig.topics.produce(table)
    report = run_until_idle(rig)
    assert report["ok"] is True
    for mode in MODES:
        assert report["tables"][f"{rig.dataset}.customers_{mode}"]["keys_merged"] > 0
        changelog = report["tables"].get(f"{rig.dataset}.customers_{mode}_changelog", {})
        assert not changelog.get("load_jobs"), changelog
    assert_as_the_oracle_says(rig, table)
    assert_never_loaded(rig)
    merges = merge_metadata(rig, "soft")
    assert merges and all(m["load_jobs_merged"].value == 0 for m in merges)
    merged = {
        (r["partition"], r["first"]) for m in merges for r in m["delivered_ranges_merged"].value
    }
    assert {p for p, _ in merged} == set(range(PARTITIONS)) and (0, 0) in merged

    # Round 2: schema v2 adds a column mid-stream; the run is killed after the appends of a
    # range, before its done files: the next run rolls the range forward, then merges it.
    table.schema_version = 2
    table.round(inserts=6, updates=10, deletes=3)
    rig.topics.produce(table)
    killed = rig.run_until_idle(crash_at="storage_write_delivered:1")
    assert killed.returncode != 0, killed.stderr[-2000:]
    assert run_until_idle(rig)["ok"] is True  # exits 0 only when the keyed checks pass
    assert_as_the_oracle_says(rig, table)
    assert_never_loaded(rig)

    # Round 3: nothing new: nothing staged, nothing merged, the tables unchanged.
    before = {m: sorted(rig.current_rows(m), key=repr) for m in MODES}
    report = run_until_idle(rig)
    for mode in MODES:
        assert report["topics"][rig.by_mode[mode]]["staged"] == 0
        merged = report["tables"].get(f"{rig.dataset}.customers_{mode}", {})
        assert merged.get("keys_merged", 0) == 0
        assert sorted(rig.current_rows(mode), key=repr) == before[mode]
    assert_as_the_oracle_says(rig, table)


def test_a_changelog_switched_between_load_and_storage_write_merges_every_change_once(rig):
    table = CustomersTable(seed=37, partitions=PARTITIONS)
    for number, delivery in enumerate(("load", "storage_write", "load")):
        set_delivery(rig, delivery)  # between runs: at a range boundary
        if number == 0:
            table.snapshot(15)
        table.round(inserts=5, updates=8, deletes=3)
        rig.topics.produce(table)
        report = run_until_idle(rig)  # exits 0 only when the keyed checks pass
        loads = sum(
            report["tables"].get(f"{rig.dataset}.customers_{m}_changelog", {}).get("load_jobs", 0)
            for m in MODES
        )
        assert (loads > 0) == (delivery == "load"), (delivery, report["tables"])
        assert_as_the_oracle_says(rig, table)
