"""The Dagster definitions load, validate, and expose the asset keys the docs promise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg

from kbqe_dagster.definitions import build_definitions

REPO = Path(__file__).resolve().parents[1]


def test_definitions_expose_topic_staging_and_jobs() -> None:
    defs = build_definitions(str(REPO / "examples" / "pipeline.yaml"), env="local")
    keys = {spec.key for spec in defs.resolve_all_asset_specs()}
    assert dg.AssetKey(["kafka", "com.acme.events"]) in keys
    assert dg.AssetKey(["staging"]) in keys
    assert defs.resolve_job_def("stage_job") is not None
    sensors = {s.name for s in defs.sensors}
    assert {"kafka_backlog_sensor", "staging_observation_sensor"} <= sensors


def test_loading_the_definitions_starts_no_spark_jvm() -> None:
    # In a fresh interpreter: other tests of this session may have started Spark.
    probe = (
        "from kbqe_dagster.definitions import build_definitions\n"
        f"build_definitions({str(REPO / 'examples' / 'pipeline.yaml')!r}, env='local')\n"
        "from pyspark import SparkContext\n"
        "print('spark active' if SparkContext._active_spark_context else 'no spark')\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=300
    )
    assert result.stdout.strip().splitlines()[-1:] == ["no spark"], result.stderr[-2000:]


def test_every_asset_has_a_description_group_and_kinds() -> None:
    defs = build_definitions(str(REPO / "examples" / "pipeline.yaml"), env="local")
    for spec in defs.resolve_all_asset_specs():
        assert spec.description, spec.key
        assert spec.group_name and spec.group_name != "default", spec.key
        assert spec.kinds, spec.key


def test_dagster_definitions_validate_accepts_the_workspace(tmp_path: Path) -> None:
    env = {**os.environ, "DAGSTER_HOME": str(tmp_path)}
    (tmp_path / "dagster.yaml").write_text((REPO / "dagster.yaml").read_text())
    result = subprocess.run(
        [
            str(Path(sys.executable).parent / "dagster"),
            "definitions",
            "validate",
            "-w",
            "workspace.yaml",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]


def test_the_pipeline_file_is_read_once_per_definitions_load(tmp_path) -> None:
    # Sensors, ops and checks see the pipeline the assets were built from, even when the
    # file is edited before the code location reloads.
    path = tmp_path / "pipeline.yaml"
    path.write_text((REPO / "examples" / "pipeline.yaml").read_text())
    defs = build_definitions(str(path), env="local")
    path.write_text("not: [a, pipeline")
    with dg.build_resources({"pipeline": defs.resources["pipeline"]}) as resources:
        config = resources.pipeline.load()
    assert [t.name for t in config.topics] == ["com.acme.events", "com.acme.audit"]
