"""``kbqe stack up --fresh`` deletes the local services' data — never the download cache —
says what it deletes, and refuses while a service runs. Run on a temporary stack home with
fake data directories and no service: never on the shared stack."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kbqe_dagster import cli
from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack import stack

SERVICES = ("kafka", "apicurio", "gcs", "bigquery")


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stack home as a used stack leaves it: data, logs, a download cache, a Dagster
    instance; no process running."""
    home = tmp_path / "kbqe-local"
    monkeypatch.setenv("KBQE_LOCAL_HOME", str(home))
    for name in SERVICES:
        (home / "run" / name / "data" / "state").mkdir(parents=True)
        (home / "run" / name / "data" / "state" / "file").write_text("old data")
        (home / "run" / name / f"{name}.log").write_text("log")
    (home / "cache" / "kafka-4.1.0" / "libs").mkdir(parents=True)
    (home / "cache" / "kafka-4.1.0" / "libs" / "kafka.jar").write_text("jar")
    (home / "dagster_home" / "storage").mkdir(parents=True)
    return home


def test_fresh_deletes_every_data_dir_and_the_dagster_instance_and_keeps_cache_and_logs(
    home: Path,
) -> None:
    wiped = stack.wipe_data(home=home)
    assert [w.path for w in wiped] == [
        *(home / "run" / name / "data" for name in SERVICES),
        home / "dagster_home",
    ]
    assert [w.what for w in wiped] == [
        "kafka data",
        "apicurio data",
        "gcs data",
        "bigquery data",
        "the demo's Dagster instance",
    ]
    assert not any((home / "run" / name / "data").exists() for name in SERVICES)
    assert not (home / "dagster_home").exists()
    assert (home / "cache" / "kafka-4.1.0" / "libs" / "kafka.jar").read_text() == "jar"
    assert all((home / "run" / name / f"{name}.log").exists() for name in SERVICES)


def test_fresh_for_some_services_deletes_only_their_data(home: Path) -> None:
    wiped = stack.wipe_data(["gcs"], home=home)
    assert [w.path for w in wiped] == [home / "run" / "gcs" / "data"]
    assert (home / "run" / "kafka" / "data" / "state" / "file").exists()
    assert (home / "dagster_home").exists()


def test_fresh_twice_has_nothing_left_to_delete(home: Path) -> None:
    stack.wipe_data(home=home)
    assert stack.wipe_data(home=home) == []


def test_fresh_refuses_while_a_service_runs_and_deletes_nothing(home: Path) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (home / "run" / "gcs" / "gcs.pid").write_text(str(sleeper.pid))
        with pytest.raises(StackError, match=r"gcs still run: `kbqe stack down` first"):
            stack.wipe_data(home=home)
    finally:
        sleeper.kill()
        sleeper.wait()
    assert all((home / "run" / name / "data" / "state" / "file").exists() for name in SERVICES)


def test_the_command_prints_each_deleted_directory_before_starting(
    home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started = []
    monkeypatch.setattr(stack, "up", lambda names=None: started.append(names) or [])
    assert cli.main(["stack", "up", "--fresh"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[:5] == [
        *(f"deleted {home / 'run' / name / 'data'} ({name} data)" for name in SERVICES),
        f"deleted {home / 'dagster_home'} (the demo's Dagster instance)",
    ]
    assert started == [None]


def test_the_command_without_fresh_deletes_nothing(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(stack, "up", lambda names=None: [])
    assert cli.main(["stack", "up"]) == 0
    assert all((home / "run" / name / "data" / "state" / "file").exists() for name in SERVICES)
