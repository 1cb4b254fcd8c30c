"""The Dagster instance's ``dagster.yaml`` for each storage: SQLite (the packaged file as it is,
what ``kbqe dev`` and the tests use) or PostgreSQL (production: runs, events, schedules and
the pools' concurrency slots in one Postgres database; the CI soak runs on it).

The Postgres file is the packaged ``dagster.yaml`` unchanged, followed by a ``storage:
postgres:`` block (dagster-postgres, the ``postgres`` extra) whose connection comes from
environment variables, read by Dagster when the instance loads. Built, never kept as a second
hand-written copy: the run coordinator, the tag limits, the pools and ``run_monitoring`` exist
once, in ``dagster.yaml``, and the Postgres file cannot drift from them.
``dagster-postgres.yaml`` (beside ``dagster.yaml``, in the repository) is this function's
output, checked by a test.

A leaf beside ``packaged``: imports nothing else of the package.
"""

from __future__ import annotations

from kbqe_dagster.packaged import data_file

STORAGES = ("sqlite", "postgres")

POSTGRES_ENV = {
    "hostname": "KBQE_DAGSTER_PG_HOST",
    "port": "KBQE_DAGSTER_PG_PORT",
    "username": "KBQE_DAGSTER_PG_USER",
    "password": "KBQE_DAGSTER_PG_PASSWORD",
    "db_name": "KBQE_DAGSTER_PG_DB",
}
"""dagster-postgres's ``postgres_db`` keys and the environment variable each is read from."""

POSTGRES_SCHEME = "postgresql+psycopg2"
"""The SQLAlchemy URL scheme, naming the driver (see the block's comment)."""

POSTGRES_BLOCK = (
    "\n"
    "# PostgreSQL storage (kbqe_dagster/instance_config.py appends this block to dagster.yaml):\n"
    "# runs, the event log (with the pools' concurrency slots) and schedules in one database,\n"
    "# which must exist; Dagster creates its tables on first use. The connection is read from\n"
    "# the environment when the instance loads, so no secret is written here.\n"
    "storage:\n"
    "  postgres:\n"
    "    postgres_db:\n"
    + "".join(f"      {key}: {{env: {var}}}\n" for key, var in POSTGRES_ENV.items())
    + "      # The driver dagster-postgres is written for (it brings psycopg2-binary). SQLAlchemy\n"
    "      # 2.1 takes psycopg 3 for a bare postgresql://: missing, or where installed, its\n"
    "      # server-side parameters break dagster-postgres's `NOTIFY run_events, :id` and\n"
    "      # every event write fails (found by the soak).\n"
    f"      scheme: {POSTGRES_SCHEME}\n"
)


def base_instance_yaml() -> str:
    """The packaged ``dagster.yaml`` (SQLite storage under ``$DAGSTER_HOME``)."""
    return data_file("dagster.yaml").read_text()


def instance_yaml(storage: str = "sqlite", base: str | None = None) -> str:
    """The instance file for ``storage``: ``base`` (default: the packaged ``dagster.yaml``)
    as it is for SQLite, followed by :data:`POSTGRES_BLOCK` for Postgres. ``base`` must not
    choose a storage itself: two ``storage`` keys would leave the choice to the YAML reader."""
    if storage not in STORAGES:
        raise ValueError(
            f"dagster.yaml: unknown storage {storage!r} (one of {', '.join(STORAGES)})"
        )
    text = base_instance_yaml() if base is None else base
    if storage == "sqlite":
        return text
    if any(
        line.startswith(("storage:", "run_storage:", "event_log_storage:"))
        for line in text.splitlines()
    ):
        raise ValueError("dagster.yaml: the base file already chooses a storage; remove it first")
    return text.rstrip("\n") + "\n" + POSTGRES_BLOCK


def postgres_environment(
    host: str, port: int, user: str, password: str, database: str
) -> dict[str, str]:
    """The variables the Postgres file reads, for one server and database."""
    values = {"hostname": host, "port": str(port), "username": user, "password": password}
    values["db_name"] = database
    return {POSTGRES_ENV[key]: value for key, value in values.items()}
