"""The erasure wiring: a pipeline with ``erasure:`` has the ``erasure`` job (its op in the
load pool, its runs tagged for dagster.yaml's limit), ``erasure_request_sensor``, the audit
table's asset and its check; one without has none of them."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import yaml

from kbqe_dagster.definitions import build_definitions
from kbqe_dagster.defs.bigquery.jobs import LOAD_POOL
from kbqe_dagster.defs.erasure.jobs import ERASURE_TAG

REPO = Path(__file__).resolve().parents[2]


def test_an_erasure_pipeline_has_the_job_sensor_audit_asset_and_check() -> None:
    defs = build_definitions(str(REPO / "examples" / "erasure.yaml"), env="local")
    job = defs.resolve_job_def("erasure")
    (node,) = job.nodes
    assert node.definition.pool == LOAD_POOL
    assert job.tags[ERASURE_TAG] == "1"
    assert defs.resolve_sensor_def("erasure_request_sensor").job_name == "erasure"
    audit = dg.AssetKey(["bigquery", "kbqe_audit", "erasure_requests"])
    spec = next(s for s in defs.resolve_all_asset_specs() if s.key == audit)
    assert spec.group_name == "erasure" and spec.description
    checks = defs.resolve_asset_graph().asset_check_keys
    assert dg.AssetCheckKey(audit, "erasure_audit_holds_every_request") in checks


def test_a_pipeline_without_erasure_has_none_of_it() -> None:
    defs = build_definitions(str(REPO / "examples" / "pipeline.yaml"), env="local")
    assert "erasure" not in {j.name for j in defs.resolve_all_job_defs()}
    assert "erasure_request_sensor" not in {s.name for s in defs.sensors or []}


def test_dagster_yaml_limits_erasure_runs_to_one() -> None:
    for path in (REPO / "dagster.yaml", REPO / "kbqe_dagster" / "data" / "dagster.yaml"):
        limits = yaml.safe_load(path.read_text())["concurrency"]["runs"]["tag_concurrency_limits"]
        assert {"key": ERASURE_TAG, "limit": 1} in limits
