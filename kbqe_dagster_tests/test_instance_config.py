"""The Dagster instance file per storage (kbqe_dagster/instance_config.py): the Postgres one is
the packaged dagster.yaml with every block kept and a storage block read from the environment,
valid for Dagster's own instance schema, and the repository's dagster-postgres.yaml is it."""

from __future__ import annotations

import pytest
import yaml

from kbqe_dagster.instance_config import (
    POSTGRES_ENV,
    base_instance_yaml,
    instance_yaml,
    postgres_environment,
)
from kbqe_dagster_tests.conftest import REPO_ROOT

BASE_BLOCKS = {"run_coordinator", "concurrency", "run_monitoring", "telemetry"}


def test_sqlite_is_the_packaged_file_as_it_is() -> None:
    assert (
        instance_yaml("sqlite") == base_instance_yaml() == (REPO_ROOT / "dagster.yaml").read_text()
    )


def test_postgres_keeps_every_block_of_the_packaged_file_unchanged() -> None:
    base = yaml.safe_load(base_instance_yaml())
    postgres = yaml.safe_load(instance_yaml("postgres"))
    assert set(base) >= BASE_BLOCKS  # what the limits and the slot freeing depend on
    assert {k: v for k, v in postgres.items() if k != "storage"} == base
    assert set(postgres) == set(base) | {"storage"}


def test_postgres_text_is_the_packaged_text_then_the_storage_block() -> None:
    base = base_instance_yaml()
    text = instance_yaml("postgres")
    assert text.startswith(base.rstrip("\n") + "\n")
    assert "storage:" not in base


def test_postgres_storage_reads_every_connection_setting_from_the_environment() -> None:
    """...and pins the psycopg2 driver: SQLAlchemy 2.1's default for postgresql:// is psycopg 3
    (the dev extra has it), on which dagster-postgres's event writes fail."""
    storage = yaml.safe_load(instance_yaml("postgres"))["storage"]
    assert storage == {
        "postgres": {
            "postgres_db": {
                "hostname": {"env": "KBQE_DAGSTER_PG_HOST"},
                "port": {"env": "KBQE_DAGSTER_PG_PORT"},
                "username": {"env": "KBQE_DAGSTER_PG_USER"},
                "password": {"env": "KBQE_DAGSTER_PG_PASSWORD"},
                "db_name": {"env": "KBQE_DAGSTER_PG_DB"},
                "scheme": "postgresql+psycopg2",
            }
        }
    }


def test_the_repository_postgres_file_is_the_builders_output() -> None:
    """Regenerate with `kbqe config dagster-yaml --storage postgres > dagster-postgres.yaml`."""
    assert (REPO_ROOT / "dagster-postgres.yaml").read_text() == instance_yaml("postgres")


def test_dagster_accepts_the_postgres_file(tmp_path, monkeypatch) -> None:
    """Dagster's own instance schema, with the variables resolved (no server is asked)."""
    from dagster._core.instance.config import dagster_instance_config

    env = postgres_environment("127.0.0.1", 35432, "kbqe", "kbqe", "dagster")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    (tmp_path / "dagster.yaml").write_text(instance_yaml("postgres"))
    config, _ = dagster_instance_config(str(tmp_path))
    assert config["storage"]["postgres"]["postgres_db"]["port"] == {"env": "KBQE_DAGSTER_PG_PORT"}
    assert config["concurrency"]["pools"] == {"default_limit": 1}
    assert config["run_monitoring"]["free_slots_after_run_end_seconds"] == 30


def test_dagster_postgres_accepts_the_storage_block_and_resolves_it(monkeypatch) -> None:
    """dagster-postgres's own config schema (the `postgres` extra), every key known to it, and
    the connection string it builds from the variables."""
    from dagster._config import process_config
    from dagster_postgres import DagsterPostgresStorage
    from dagster_postgres.utils import pg_url_from_config

    env = postgres_environment("db.internal", 6543, "dagster", "s3cret", "dagster_prod")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    block = yaml.safe_load(instance_yaml("postgres"))["storage"]["postgres"]
    result = process_config(DagsterPostgresStorage.config_type(), block)
    assert result.success, result.errors
    url = pg_url_from_config(result.value)
    assert url == "postgresql+psycopg2://dagster:s3cret@db.internal:6543/dagster_prod"


def test_postgres_environment_names_every_variable_the_file_reads() -> None:
    env = postgres_environment("db.internal", 5432, "dagster", "s3cret", "dagster_prod")
    assert set(env) == set(POSTGRES_ENV.values())
    assert env == {
        "KBQE_DAGSTER_PG_HOST": "db.internal",
        "KBQE_DAGSTER_PG_PORT": "5432",
        "KBQE_DAGSTER_PG_USER": "dagster",
        "KBQE_DAGSTER_PG_PASSWORD": "s3cret",
        "KBQE_DAGSTER_PG_DB": "dagster_prod",
    }


@pytest.mark.parametrize("line", ["storage:\n  sqlite: {}\n", "run_storage:\n  module: x\n"])
def test_a_base_that_chooses_a_storage_is_refused(line: str) -> None:
    with pytest.raises(ValueError, match="already chooses a storage"):
        instance_yaml("postgres", base="telemetry:\n  enabled: false\n" + line)


def test_an_unknown_storage_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown storage 'mysql'"):
        instance_yaml("mysql")
