"""``kbqe run --until-idle --json`` as a user runs it, for the real-stack tests that drive the
product through its command line (formats, patterns, keyed, completeness)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

KBQE = str(Path(sys.executable).parent / "kbqe")
REPO = Path(__file__).resolve().parents[1]


def create_topic(bootstrap: str, topic: str, partitions: int = 2) -> None:
    """A topic of the local Kafka for one test, created before it returns."""
    from confluent_kafka.admin import AdminClient, NewTopic

    from kbqe_dagster.resources.kafka.clients import CLIENT_LOG

    admin = AdminClient({"bootstrap.servers": bootstrap, "logger": CLIENT_LOG})
    admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)])[
        topic
    ].result(30)


def drop_datasets(client, *names: str) -> None:
    """Remove a test's BigQuery datasets (the emulator outlives test runs)."""
    for name in names:
        client.delete_dataset(name, delete_contents=True, not_found_ok=True)


def until_idle(
    env: dict, cwd: str | Path | None = None, *, verbose: bool = False
) -> subprocess.CompletedProcess:
    """One ``kbqe run --until-idle --json`` (``-v``: every library's debug lines too); it must
    exit 0 (its stderr tail otherwise)."""
    done = subprocess.run(
        [KBQE, *(["-v"] if verbose else []), "run", "--until-idle", "--json"],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def cli_env(tmp_path: Path, pipeline: dict, staging_url: str) -> dict:
    """The environment a user's ``kbqe`` runs in for one test: ``pipeline`` written as the
    pipeline file, a Dagster home of its own (the repository's dagster.yaml), staging under
    ``staging_url``, the local stack."""
    import os
    import shutil

    import yaml

    path = tmp_path / "pipeline.yaml"
    path.write_text(yaml.safe_dump(pipeline))
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    return {
        **os.environ,
        "KBQE_ENV": "local",
        "KBQE_PIPELINE_CONFIG": str(path),
        "KBQE_STAGING_URL": staging_url,
        "DAGSTER_HOME": str(home),
    }
