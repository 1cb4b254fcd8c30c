"""The wheel as a platform team uses it: built, installed without ``-e`` into a fresh virtual
environment outside the checkout, and run from a directory outside the checkout against the
local stack: ``kbqe --version``, ``kbqe stack status``, and one ``kbqe run --until-idle`` of
the sample pipeline that ships in the wheel.

Isolated from other tests and engineers: the sample pipeline is read from the installed wheel
and given a topic, datasets (a ``compute`` transform prefixes the records' ``datasetName``),
a staging prefix and a Dagster instance of this run only. The run's cost, wheel to report,
is ~30 s on the local stack (most of it Spark starting)."""

from __future__ import annotations

import json
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml

from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster_tests.kbqe_run import drop_datasets
from kbqe_dagster_tests.packaging.wheel import (
    REPO,
    FreshVenv,
    build_wheel,
    install_wheel,
    outside_env,
    project_version,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROBE = """
import json
import kbqe_dagster
from kbqe_dagster.localstack.kafka import kafka_version
from kbqe_dagster.packaged import checkout_root, data_file
from kbqe_dagster.localstack.base import stack_home
print(json.dumps({"package": kbqe_dagster.__file__, "pipeline": str(data_file("pipeline.yaml")),
                  "checkout": checkout_root() and str(checkout_root()),
                  "stack_home": str(stack_home()), "kafka": kafka_version()}))
"""


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> FreshVenv:
    work = tmp_path_factory.mktemp("wheel-venv")
    assert not work.resolve().is_relative_to(REPO), "the venv must live outside the checkout"
    return install_wheel(build_wheel(work), work / "venv")


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """The working directory of every command: outside the checkout."""
    assert not tmp_path.resolve().is_relative_to(REPO)
    return tmp_path


def run(venv: FreshVenv, cwd: Path, *args: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [venv.kbqe, *args],
        cwd=cwd,
        env=outside_env(**env),
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_the_wheel_installs_with_every_declared_dependency_satisfied(venv) -> None:
    done = venv.pip("check")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_installed_package_finds_its_files_in_site_packages(venv, outside) -> None:
    env = outside_env(HOME=str(outside))
    env.pop("KBQE_LOCAL_HOME", None)
    done = subprocess.run(
        [venv.python, "-c", PROBE],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    probe = json.loads(done.stdout)
    package = Path(probe["package"]).parent
    assert package.is_relative_to(venv.root) and probe["checkout"] is None
    assert Path(probe["pipeline"]) == package / "data" / "pipeline.yaml"
    assert Path(probe["pipeline"]).read_bytes() == (REPO / "examples/pipeline.yaml").read_bytes()
    # The Kafka version comes from the packaged pom; downloads and data of a stack started
    # from the wheel go to the user's home, never into site-packages.
    pom = (REPO / "stack/kafka/pom.xml").read_text()
    assert f"<kafka.version>{probe['kafka']}</kafka.version>" in pom
    assert Path(probe["stack_home"]) == outside / ".kbqe-local"


def packaged(venv: FreshVenv, cwd: Path, name: str) -> str:
    """The text of ``kbqe_dagster/data/<name>`` as the installed wheel reads it."""
    return subprocess.run(
        [
            venv.python,
            "-c",
            f"from kbqe_dagster.packaged import data_file; "
            f"print(data_file({name!r}).read_text(), end='')",
        ],
        cwd=cwd,
        env=outside_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def test_kbqe_version(venv, outside) -> None:
    done = run(venv, outside, "--version")
    assert (done.returncode, done.stdout) == (0, f"kbqe {project_version()}\n"), done.stderr


def test_kbqe_stack_status_sees_the_running_stack(venv, outside, local_stack) -> None:
    done = run(venv, outside, "stack", "status", "--json")
    assert done.returncode == 0, done.stderr
    running = {s["name"]: s["running"] for s in json.loads(done.stdout)}
    # The on-demand services (postgres, connect) are listed too, running or not: the suite's
    # change-data-capture tests start them for the rest of the session.
    assert set(running) == {"kafka", "apicurio", "gcs", "bigquery", "postgres", "connect"}
    assert {name: running[name] for name in ("kafka", "apicurio", "gcs", "bigquery")} == {
        "kafka": True,
        "apicurio": True,
        "gcs": True,
        "bigquery": True,
    }


def test_the_default_pipeline_is_the_packaged_sample(venv, outside, local_stack) -> None:
    done = run(venv, outside, "run", "--until-idle", "--topic", "absent")
    assert done.returncode == 1
    assert (
        "topic 'absent' is not in the pipeline file (topics: com.acme.events, com.acme.audit)"
        in done.stderr
    )


@pytest.fixture
def private(local_stack):
    """This run's names; its datasets and staging files removed afterwards (the emulators
    outlive the test)."""
    name = f"wheel{uuid.uuid4().hex[:8]}"
    yield name
    drop_datasets(
        local_bigquery_client(), f"{name}_acme_sales", f"{name}_acme_web", f"{name}_dead_letters"
    )
    store = StagingLocation(
        f"gs://{LOCAL_BUCKET}/{name}", local_stack.gcs_url, LOCAL_PROJECT
    ).open()
    for stored in store.list("_kbqe/") + store.list():
        store.delete(stored.name)


def test_one_run_until_idle_of_the_sample_pipeline_from_the_wheel(venv, outside, private):
    topic = f"com.acme.events.{private}"
    pipeline = yaml.safe_load(packaged(venv, outside, "pipeline.yaml"))
    sample, audit = pipeline["topics"]
    assert audit["format"] == "raw"  # the demo's raw archive: not this test's topic
    pipeline["topics"] = [sample]
    sample["name"] = topic
    sample["transforms"] = [
        {"compute": "datasetName", "expression": f"'{private}_' + datasetName", "type": "string"}
    ]
    pipeline["allowed_destinations"] = [f"{private}_{d}" for d in pipeline["allowed_destinations"]]
    pipeline["tables"] = {f"{private}_{t}": v for t, v in pipeline["tables"].items()}
    pipeline["dead_letter"]["dataset"] = f"{private}_dead_letters"
    (outside / "pipeline.yaml").write_text(yaml.safe_dump(pipeline, sort_keys=False))
    home = outside / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text(packaged(venv, outside, "dagster.yaml"))

    produced = run(venv, outside, "produce-sample", "--topic", topic, "--count", "100", "--json")
    assert produced.returncode == 0, produced.stderr
    sample_report = json.loads(produced.stdout)

    done = run(
        venv,
        outside,
        "run",
        "--until-idle",
        "--json",
        KBQE_ENV="local",
        KBQE_PIPELINE_CONFIG=str(outside / "pipeline.yaml"),
        DAGSTER_HOME=str(home),
        KBQE_STAGING_URL=f"gs://{LOCAL_BUCKET}/{private}",
    )

    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["ok"] is True
    good, bad = sum(sample_report["per_table"].values()), sum(sample_report["per_reason"].values())
    assert report["topics"][topic] | {"stage_runs": 0} == {
        "staged": good,
        "dead_lettered": bad,
        "tombstones": 1,
        "messages": good + bad,
        "stage_runs": 0,
    }
    loaded = {t: v["rows_loaded"] for t, v in report["tables"].items()}
    assert loaded == {f"{private}_{t}": n for t, n in sample_report["per_table"].items()} | {
        f"{private}_dead_letters.dead_letters": bad
    }
    rows = local_bigquery_client().query_and_wait(
        f"SELECT COUNT(*) FROM `{private}_acme_web.page_views`"
    )
    assert next(iter(rows))[0] == sample_report["per_table"]["acme_web.page_views"]
