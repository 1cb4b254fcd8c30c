"""The standalone load checks (run from the UI or a schedule) judge the same facts as the
load op does as it loads: both go through core/load/checks.py. Here over a fake BigQuery at
the boundary and a real local staging directory."""

from __future__ import annotations

from datetime import date
from pathlib import Path

import dagster as dg
import pytest
import yaml

from kbqe_dagster.core.load.checks import NO_QUARANTINED_FILES, PENDING_FILES_FRESH, ROWS_LOADED
from kbqe_dagster.defs.bigquery.checks import load_checks
from kbqe_dagster.defs.bigquery.events import load_events
from kbqe_dagster.defs.keys import STAGING_KEY, Destinations
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.configurable import PipelineResource, StagingResource
from kbqe_dagster_tests.loading.conftest import ORDERS_V1, PAGE_VIEWS, TOPIC, pipeline
from kbqe_dagster_tests.loading.staged import stage_range

DAY = date(2024, 9, 12)
RAW_PIPELINE = {
    "version": 1,
    "topics": [{"name": TOPIC, "event_time": {"fields": ["eventTime"]}}],
    "allowed_destinations": ["acme_sales.*", "acme_web.page_views"],
    "load": {"max_retries": 2},
}


@pytest.fixture
def resources(tmp_path: Path, store, bq, monkeypatch) -> dict:
    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(RAW_PIPELINE))
    monkeypatch.setattr(BigQueryResource, "client", lambda self: bq)
    return {
        "pipeline": PipelineResource(config_path=str(path)),
        "staging": StagingResource(url=str(store.root)),
        "bigquery": BigQueryResource(project="p"),
    }


def _by_check(events) -> dict[tuple[str, str], bool]:
    return {
        (e.asset_key.to_user_string(), e.check_name): e.passed
        for e in events
        if isinstance(e, (dg.AssetCheckEvaluation, dg.AssetCheckResult))
    }


def test_the_standalone_checks_agree_with_the_load_op(
    store, bq, make_coordinator, resources
) -> None:
    stage_range(store, TOPIC, 0, 0, 9, [(ORDERS_V1, 4, DAY), (PAGE_VIEWS, 5, DAY)])
    bq.fail_tables[("acme_web", "page_views")] = 99
    report = make_coordinator().run_cycle()
    with dg.instance_for_test() as instance:
        destinations = Destinations.from_config(pipeline())
        during_load = _by_check(load_events(report, destinations, instance, freshness_limit_s=900))
        checks = load_checks(destinations)
        context = dg.build_asset_check_context(resources=resources, instance=instance)
        standalone = _by_check(checks(context))

    quarantine = ("bigquery/acme_web/page_views", NO_QUARANTINED_FILES)
    assert during_load[quarantine] is False and standalone[quarantine] is False
    rows = ("bigquery/acme_sales", ROWS_LOADED)
    assert during_load[rows] is True and standalone[rows] is True
    fresh = (STAGING_KEY.to_user_string(), PENDING_FILES_FRESH)
    assert during_load[fresh] is True and standalone[fresh] is True


def test_the_staging_check_alone_never_builds_a_bigquery_client(resources, monkeypatch) -> None:
    """What stage_job runs after staging (it selects the staging asset, and so its check): a
    BigQuery client there imported google-cloud-bigquery and pandas into every stage run."""

    def no_client(self):
        raise AssertionError("a BigQuery client was built for the staging check")

    monkeypatch.setattr(BigQueryResource, "client", no_client)
    fresh = dg.AssetCheckKey(STAGING_KEY, PENDING_FILES_FRESH)
    defs = dg.Definitions(
        assets=[dg.AssetSpec(STAGING_KEY)],
        asset_checks=[load_checks(Destinations.from_config(pipeline()))],
        jobs=[dg.define_asset_job("fresh_only", selection=dg.AssetSelection.checks(fresh))],
        resources=resources,
    )
    with dg.instance_for_test() as instance:
        result = defs.resolve_job_def("fresh_only").execute_in_process(instance=instance)
    assert [(e.check_name, e.passed) for e in result.get_asset_check_evaluations()] == [
        (PENDING_FILES_FRESH, True)
    ]
