"""The emulators install offline from what pip put in the venv: DuckDB extensions come from
their ``duckdb-extension-<name>`` packages, and a missing one is named with its pip package."""

from __future__ import annotations

import os
from pathlib import Path

import duckdb
import pytest

from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack.bigquery import (
    REQUIRED_EXTENSIONS,
    BigQueryEmulatorService,
    find_extension_file,
    install_extensions,
)
from kbqe_dagster.localstack.endpoints import local_endpoints
from kbqe_dagster.localstack.gcs import GcsService, fake_gcs_binary


def test_extensions_install_into_the_given_directory_once_and_then_load_offline(
    tmp_path: Path,
) -> None:
    ext_dir = tmp_path / "extensions"

    assert install_extensions(ext_dir, REQUIRED_EXTENSIONS) == list(REQUIRED_EXTENSIONS)
    assert install_extensions(ext_dir, REQUIRED_EXTENSIONS) == []

    con = duckdb.connect(
        config={"extension_directory": str(ext_dir), "autoinstall_known_extensions": False}
    )
    for name in REQUIRED_EXTENSIONS:
        con.execute(f"INSTALL {name}")  # what the emulator runs: a no-op once installed
        con.execute(f"LOAD {name}")
    loaded = {
        row[0]
        for row in con.execute(
            "SELECT extension_name FROM duckdb_extensions() WHERE loaded"
        ).fetchall()
    }
    assert set(REQUIRED_EXTENSIONS) <= loaded
    platform = con.execute("PRAGMA platform").fetchone()[0]
    assert {p.name for p in (ext_dir / f"v{duckdb.__version__}" / platform).iterdir()} >= {
        f"{name}.duckdb_extension" for name in REQUIRED_EXTENSIONS
    }


@pytest.mark.parametrize(
    ("name", "version", "message"),
    [
        (
            "nosuch",
            duckdb.__version__,
            f"pip install 'duckdb-extension-nosuch=={duckdb.__version__}'",
        ),
        ("avro", "0.0.1", "pip install 'duckdb-extension-avro==0.0.1'"),
    ],
    ids=["package-missing", "package-for-another-duckdb"],
)
def test_a_missing_extension_is_named_with_the_pip_package_to_install(
    name: str,
    version: str,
    message: str,
) -> None:
    with pytest.raises(StackError, match=f"'{name}'") as raised:
        find_extension_file(name, version)
    assert message in str(raised.value)


def test_emulator_duckdb_home_and_gcs_root_live_under_the_stack_home(tmp_path: Path) -> None:
    gcs = GcsService(tmp_path)
    bq = BigQueryEmulatorService(tmp_path)

    assert bq.gcs_root == gcs.filesystem_root == tmp_path / "run" / "gcs" / "data" / "storage"
    assert bq.duckdb_home == tmp_path / "run" / "bigquery" / "duckdb-home"
    assert bq.extension_dir == bq.duckdb_home / ".duckdb" / "extensions"
    assert bq.database_dir.is_relative_to(tmp_path / "run" / "bigquery" / "data")
    ep = local_endpoints()
    assert list(bq.ports) == [ep.bigquery_port, ep.bigquery_grpc_port]
    assert list(gcs.ports) == [ep.gcs_port]


def test_gcs_install_finds_the_binary_shipped_in_the_wrapper_package(tmp_path: Path) -> None:
    GcsService(tmp_path).install()

    binary = fake_gcs_binary()

    assert binary.name.startswith("fake-gcs-server-linux-")
    assert binary.stat().st_size > 1_000_000
    assert os.access(binary, os.X_OK)
    assert (tmp_path / "run" / "gcs" / "data" / "storage").is_dir()
