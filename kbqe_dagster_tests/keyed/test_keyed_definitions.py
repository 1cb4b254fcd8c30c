"""A keyed topic in Dagster: lineage changelog → current / history, the merge job in the load
pool, the checks on the current table; and the runner step that runs that job."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from kbqe_dagster.core.config.pipeline import load_pipeline_config
from kbqe_dagster.definitions import build_definitions
from kbqe_dagster.defs.bigquery.jobs import LOAD_POOL
from kbqe_dagster.keyed.merge import MERGE_JOB
from kbqe_dagster.runner.after_load import AfterLoadContext, JobRun, TableMerge
from kbqe_dagster.runner.keyed_merge import merge_keyed_tables

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "debezium.yaml"


def key(*path: str) -> dg.AssetKey:
    return dg.AssetKey(["bigquery", *path])


def test_the_changelog_feeds_the_current_table_and_its_history() -> None:
    defs = build_definitions(str(EXAMPLE), env="local")
    specs = {spec.key: spec for spec in defs.resolve_all_asset_specs()}
    changelog = key("inventory", "customers_changelog")
    assert changelog in specs and specs[changelog].partitions_def is not None  # DAY partitions
    assert {d.asset_key for d in specs[key("inventory", "customers")].deps} == {changelog}
    assert {d.asset_key for d in specs[key("inventory", "customers_history")].deps} == {changelog}
    assert key("inventory", "orders_history") not in specs  # history: false
    assert specs[key("inventory", "customers")].partitions_def is None  # merged, not loaded


def test_the_merge_job_runs_in_the_load_pool_and_the_checks_cover_each_current_table() -> None:
    defs = build_definitions(str(EXAMPLE), env="local")
    job = defs.resolve_job_def(MERGE_JOB)
    [node] = job.graph.node_defs
    assert node.pool == LOAD_POOL
    checks = {(k.asset_key, k.name) for k in defs.resolve_asset_graph().asset_check_keys}
    assert (key("inventory", "customers"), "keys_unique") in checks
    assert (key("inventory", "customers"), "matches_changelog") in checks
    assert (key("inventory", "orders"), "no_deleted_rows") in checks  # deletes: hard
    assert (key("inventory", "customers"), "no_deleted_rows") not in checks  # soft


def _context(run: JobRun) -> tuple[AfterLoadContext, list]:
    calls = []

    def run_job(name, run_config=None, tags=None):
        calls.append((name, run_config))
        return run

    return AfterLoadContext(1, load_pipeline_config(EXAMPLE), {}, run_job), calls


def test_the_runner_step_forces_a_merge_and_reports_each_table() -> None:
    run = JobRun(
        MERGE_JOB,
        "r1",
        True,
        materializations=(
            (
                ("bigquery", "inventory", "customers"),
                {"keys_merged": 7, "merge_bytes_processed": 10},
            ),
            (
                ("bigquery", "inventory", "customers_history"),
                {"view": "p.inventory.customers_history"},
            ),
        ),
    )
    context, calls = _context(run)
    result = merge_keyed_tables(context)
    assert calls == [(MERGE_JOB, {"ops": {"merge_keyed_tables_op": {"config": {"force": True}}}})]
    assert result.tables == {"inventory.customers": TableMerge(7, 10)}
    assert result.error is None and result.run_ids == ("r1",)


def test_the_runner_step_fails_on_a_failed_merge_or_check() -> None:
    failed = merge_keyed_tables(_context(JobRun(MERGE_JOB, "r2", False, "MergeError: x"))[0])
    assert failed.error == "merge run r2: MergeError: x"
    checked = merge_keyed_tables(
        _context(
            JobRun(MERGE_JOB, "r3", True, failed_checks=("bigquery/inventory/orders:keys_unique",))
        )[0]
    )
    assert checked.error == "merge run r3: failed check(s) bigquery/inventory/orders:keys_unique"


def test_the_daemon_merges_on_a_schedule_only_when_the_pipeline_has_keyed_topics() -> None:
    keyed = build_definitions(str(EXAMPLE), env="local")
    assert keyed.resolve_schedule_def("merge_keyed_tables").job_name == MERGE_JOB
    append = build_definitions(str(EXAMPLE.parent / "pipeline.yaml"), env="local")
    assert "merge_keyed_tables" not in {s.name for s in append.schedules}


def test_the_merge_schedule_requests_a_merge_with_no_load_run_behind_it(tmp_path) -> None:
    """A changelog delivered by storage_write gets rows with no load: the schedule does not wait
    for one (the merge op finds the committed ranges itself, keyed/merge.py)."""
    import yaml

    raw = yaml.safe_load(EXAMPLE.read_text())
    for topic in raw["topics"]:
        topic["delivery"] = "storage_write"
    pipeline = tmp_path / "debezium-storage-write.yaml"
    pipeline.write_text(yaml.safe_dump(raw))
    defs = build_definitions(str(pipeline), env="local")
    schedule = defs.resolve_schedule_def("merge_keyed_tables")
    with dg.instance_for_test() as instance:
        assert not instance.get_runs()  # nothing ever loaded
        tick = schedule.evaluate_tick(dg.build_schedule_context(instance=instance))
    assert [r.job_name or schedule.job_name for r in tick.run_requests] == [MERGE_JOB]
