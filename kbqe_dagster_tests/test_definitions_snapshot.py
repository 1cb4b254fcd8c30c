"""The shape of the Dagster definitions, pinned: asset keys (with partitioning and deps),
asset checks, jobs with the pools of their ops, sensors and schedules, for the example
pipelines. A change to the graph fails this test until the snapshot is regenerated on purpose:

    KBQE_UPDATE_SNAPSHOTS=1 .venv/bin/python -m pytest kbqe_dagster_tests/test_definitions_snapshot.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from kbqe_dagster.definitions import build_definitions

REPO = Path(__file__).resolve().parents[1]
SNAPSHOTS = Path(__file__).resolve().parent / "snapshots"
EXAMPLES = ("pipeline", "debezium", "hourly")


def shape(example: str) -> dict:
    defs = build_definitions(str(REPO / "examples" / f"{example}.yaml"), env="local")
    graph = defs.resolve_asset_graph()
    assets = {}
    for spec in sorted(defs.resolve_all_asset_specs(), key=lambda s: s.key.to_user_string()):
        assets[spec.key.to_user_string()] = {
            "partitions": type(spec.partitions_def).__name__ if spec.partitions_def else None,
            "deps": sorted(d.asset_key.to_user_string() for d in spec.deps),
            "group": spec.group_name,
        }
    jobs = {}
    for job in sorted(defs.resolve_all_job_defs(), key=lambda j: j.name):
        if job.name.startswith("__"):
            continue
        jobs[job.name] = sorted(
            f"{node.name}@{getattr(node.definition, 'pool', None)}" for node in job.graph.nodes
        )
    return {
        "assets": assets,
        "checks": sorted(
            f"{k.asset_key.to_user_string()}:{k.name}" for k in graph.asset_check_keys
        ),
        "jobs": jobs,
        "sensors": sorted(s.name for s in defs.sensors),
        "schedules": sorted(f"{s.name}@{s.cron_schedule}" for s in defs.schedules),
    }


@pytest.mark.parametrize("example", EXAMPLES)
def test_the_definitions_match_their_snapshot(example: str) -> None:
    path = SNAPSHOTS / f"definitions_{example}.json"
    current = shape(example)
    if os.environ.get("KBQE_UPDATE_SNAPSHOTS") == "1":
        path.write_text(json.dumps(current, indent=1, sort_keys=True) + "\n")
    assert current == json.loads(path.read_text()), (
        f"the definitions of examples/{example}.yaml changed; if on purpose, regenerate "
        "(see this module's docstring) and review the diff"
    )
