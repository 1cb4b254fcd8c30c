"""The on-demand services of the local stack (PostgreSQL, Kafka Connect with Debezium) without
starting them: which services a command covers, the order of start-up, how the PostgreSQL
binaries are chosen and unpacked, the generated configurations, and the errors that name
what is missing."""

from __future__ import annotations

import io
import json
import os
import socket
import tarfile
import zipfile
from pathlib import Path

import pytest

from kbqe_dagster import cli
from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack import cdc, connect, postgres, stack
from kbqe_dagster.localstack.base import LocalService, ServiceStatus
from kbqe_dagster.localstack.endpoints import local_endpoints
from kbqe_dagster.localstack.kafka import KAFKA_POM, kafka_version
from kbqe_dagster.packaged import data_file

DEFAULT = ["kafka", "apicurio", "gcs", "bigquery"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def isolated(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """Every stack port free and a fresh home: nothing of a running stack is seen."""
    for name in ("KAFKA", "KAFKA_CONTROLLER", "REGISTRY", "GCS", "BIGQUERY", "BIGQUERY_GRPC",
                 "POSTGRES", "CONNECT"):  # fmt: skip
        monkeypatch.setenv(f"KBQE_LOCAL_{name}_PORT", str(free_port()))
    home = tmp_path / "home"
    monkeypatch.setenv("KBQE_LOCAL_HOME", str(home))
    return home


# --- which services a command covers ------------------------------------------------------------
def test_a_plain_up_builds_the_default_services_only() -> None:
    assert [s.name for s in stack.build()] == DEFAULT


def test_naming_connect_brings_the_services_it_requires_in_start_order() -> None:
    assert [s.name for s in stack.build(["connect", "postgres"])] == [
        "kafka",
        "apicurio",
        "postgres",
        "connect",
    ]


def test_down_and_status_without_names_cover_the_on_demand_services_too(isolated) -> None:
    assert [s.name for s in stack.status()] == [*DEFAULT, "postgres", "connect"]
    assert stack.down() == []  # nothing of ours runs in a fresh home


def test_status_of_named_services_is_only_theirs(isolated) -> None:
    assert [s.name for s in stack.status(["connect"])] == ["connect"]


def test_status_json_gives_postgres_connection_and_connect_url(isolated, capsys) -> None:
    assert cli.main(["stack", "status", "--json"]) == 0
    entries = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
    endpoints = local_endpoints()
    pg = entries["postgres"]
    assert (pg["host"], pg["port"], pg["user"], pg["password"], pg["database"]) == (
        "127.0.0.1",
        endpoints.postgres_port,
        "kbqe",
        "kbqe",
        "kbqe",
    )
    assert pg["running"] is False
    assert entries["connect"]["url"] == f"http://127.0.0.1:{endpoints.connect_port}"
    assert "connection" not in pg
    assert "url" not in entries["kafka"]


class Scripted(LocalService):
    """A stand-in whose up() records the order of calls (and may fail)."""

    def __init__(self, name: str, log: list[str], requires=(), fails: bool = False) -> None:
        self.name = name
        self.requires = tuple(requires)
        self.log = log
        self.fails = fails
        super().__init__(Path("/nonexistent"))

    @property
    def endpoint(self) -> str:
        return f"scripted://{self.name}"

    def up(self) -> ServiceStatus:
        self.log.append(self.name)
        if self.fails:
            raise StackError(f"{self.name}: exited during start-up")
        return ServiceStatus(self.name, True, 1, self.endpoint)


def test_a_service_starts_after_the_services_it_requires() -> None:
    log: list[str] = []
    services = [
        Scripted("kafka", log),
        Scripted("connect", log, requires=("kafka",)),
        Scripted("postgres", log),
    ]
    statuses = stack.up_services(services)
    assert [s.name for s in statuses] == ["kafka", "connect", "postgres"]
    assert log.index("connect") > log.index("kafka")
    assert log[-1] == "connect"


def test_a_service_is_not_started_when_one_it_requires_failed() -> None:
    log: list[str] = []
    services = [Scripted("kafka", log, fails=True), Scripted("connect", log, requires=("kafka",))]
    with pytest.raises(StackError, match="kafka: exited during start-up"):
        stack.up_services(services)
    assert log == ["kafka"]


# --- PostgreSQL binaries --------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("value", "mode"),
    [(None, "auto"), ("", "auto"), ("maven", "maven"), ("System", "system"), ("auto", "auto")],
)
def test_the_binaries_mode_comes_from_the_environment(value: str | None, mode: str) -> None:
    environ = {} if value is None else {postgres.BINARIES_ENV: value}
    assert postgres.binaries_mode(environ) == mode


def test_an_unknown_binaries_mode_is_an_error_naming_the_variable() -> None:
    with pytest.raises(StackError, match="KBQE_LOCAL_POSTGRES_BINARIES='docker'"):
        postgres.binaries_mode({postgres.BINARIES_ENV: "docker"})


def fake_bin(directory: Path) -> Path:
    directory.mkdir(parents=True)
    for tool in ("initdb", "postgres"):
        (directory / tool).write_text("#!/bin/sh\n")
    return directory


def test_system_binaries_are_found_through_initdb_on_path_links_resolved(tmp_path) -> None:
    real = fake_bin(tmp_path / "usr/lib/postgresql/15/bin")
    link_dir = tmp_path / "usr/local/bin"
    link_dir.mkdir(parents=True)
    (link_dir / "initdb").symlink_to(real / "initdb")
    found = postgres.find_system_binaries(
        which=lambda name: str(link_dir / name), candidates=lambda: []
    )
    assert found == real.resolve()


def test_without_initdb_on_path_the_newest_versioned_directory_is_chosen(tmp_path) -> None:
    dirs = [fake_bin(tmp_path / f"postgresql/{major}/bin") for major in (9, 16, 13)]
    found = postgres.find_system_binaries(
        which=lambda name: None, candidates=lambda: [str(d) for d in dirs]
    )
    assert found == tmp_path / "postgresql/16/bin"


def test_no_system_binaries_is_none(tmp_path) -> None:
    (tmp_path / "postgresql/15/bin").mkdir(parents=True)  # a directory without the tools
    found = postgres.find_system_binaries(
        which=lambda name: None, candidates=lambda: [str(tmp_path / "postgresql/15/bin")]
    )
    assert found is None


def test_maven_mode_uses_the_embedded_binaries_in_the_cache(isolated, monkeypatch) -> None:
    monkeypatch.setenv(postgres.BINARIES_ENV, "maven")
    monkeypatch.setattr(postgres, "run_as", lambda: postgres.RunAs(None, None))
    service = postgres.PostgresService()
    assert service.binaries == postgres.PostgresBinaries(
        isolated / "cache" / f"postgres-embedded-{postgres.EMBEDDED_VERSION}" / "bin", "maven"
    )


def test_auto_mode_without_a_system_server_uses_the_embedded_binaries(
    isolated, monkeypatch
) -> None:
    monkeypatch.setenv(postgres.BINARIES_ENV, "auto")
    monkeypatch.setattr(postgres, "find_system_binaries", lambda: None)
    assert postgres.PostgresService().binaries.source == "maven"


def test_system_mode_without_a_system_server_is_an_error_saying_what_to_do(
    isolated, monkeypatch
) -> None:
    monkeypatch.setenv(postgres.BINARIES_ENV, "system")
    monkeypatch.setattr(postgres, "find_system_binaries", lambda: None)
    with pytest.raises(StackError) as raised:
        _ = postgres.PostgresService().binaries
    message = str(raised.value)
    assert "initdb" in message and "KBQE_LOCAL_POSTGRES_BINARIES=maven" in message


@pytest.mark.parametrize(
    ("machine", "suffix"), [("x86_64", "linux-amd64"), ("aarch64", "linux-arm64v8")]
)
def test_the_embedded_artifact_matches_the_architecture(machine: str, suffix: str) -> None:
    assert postgres.embedded_artifact(machine) == (
        f"io.zonky.test.postgres:embedded-postgres-binaries-{suffix}:{postgres.EMBEDDED_VERSION}"
    )


def test_an_architecture_without_embedded_binaries_is_an_error_naming_it() -> None:
    with pytest.raises(StackError, match="'riscv64'"):
        postgres.embedded_artifact("riscv64")


def embedded_jar(path: Path, members: list[str]) -> Path:
    """A jar shaped like embedded-postgres's: one .txz holding ``members``."""
    txz = io.BytesIO()
    with tarfile.open(fileobj=txz, mode="w:xz") as tar:
        for name in members:
            info = tarfile.TarInfo(name)
            body = b"#!/bin/sh\n"
            info.size, info.mode = len(body), 0o755
            tar.addfile(info, io.BytesIO(body))
    with zipfile.ZipFile(path, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        jar.writestr("postgres-linux-x86_64.txz", txz.getvalue())
    return path


COMPLETE = ["bin/initdb", "bin/postgres", "bin/pg_ctl", "lib/postgresql/pgoutput.so"]


def test_an_embedded_jar_unpacks_into_a_directory_another_user_may_enter(tmp_path) -> None:
    jar = embedded_jar(tmp_path / "pg.jar", COMPLETE)
    target = tmp_path / "out"
    target.mkdir(mode=0o700)
    postgres.unpack_embedded_jar(jar, target)
    assert (target / "bin/postgres").is_file()
    assert os.access(target / "bin/initdb", os.X_OK)
    assert target.stat().st_mode & 0o777 == 0o755


def test_an_embedded_jar_without_pgoutput_is_an_error_naming_it(tmp_path) -> None:
    jar = embedded_jar(tmp_path / "pg.jar", ["bin/initdb", "bin/postgres"])
    with pytest.raises(StackError, match="lib/postgresql/pgoutput.so"):
        postgres.unpack_embedded_jar(jar, tmp_path / "out")


def test_a_jar_without_binaries_is_an_error_naming_it(tmp_path) -> None:
    jar = tmp_path / "empty.jar"
    with zipfile.ZipFile(jar, "w") as z:
        z.writestr("META-INF/MANIFEST.MF", "")
    with pytest.raises(StackError, match="empty.jar holds no .txz"):
        postgres.unpack_embedded_jar(jar, tmp_path / "out")


def test_maven_fetching_no_jar_is_an_error_naming_the_artifact(isolated, monkeypatch) -> None:
    monkeypatch.setattr(postgres, "run_maven", lambda *args, **kwargs: None)
    service = postgres.PostgresService()
    with pytest.raises(StackError, match="embedded-postgres-binaries-linux"):
        service._download(isolated / "partial")


def test_missing_installed_binaries_are_an_error_naming_the_file(isolated, monkeypatch) -> None:
    bin_dir = isolated / "nowhere" / "bin"
    monkeypatch.setattr(
        postgres.PostgresService, "binaries", postgres.PostgresBinaries(bin_dir, "system")
    )
    with pytest.raises(StackError, match=str(bin_dir / "initdb")):
        postgres.PostgresService().install()


# --- running as an unprivileged user -----------------------------------------------------------
def test_a_non_root_user_runs_the_server_as_itself() -> None:
    assert postgres.run_as(euid=1000) == postgres.RunAs(None, None)


def test_root_runs_the_server_as_nobody() -> None:
    import pwd

    nobody = pwd.getpwnam("nobody")
    assert postgres.run_as(euid=0) == postgres.RunAs(nobody.pw_uid, nobody.pw_gid)


def test_root_without_the_unprivileged_user_is_an_error_naming_it() -> None:
    with pytest.raises(StackError, match="useradd --system --no-create-home kbqe-no-such-user"):
        postgres.run_as(euid=0, user="kbqe-no-such-user")


def test_a_home_the_server_user_can_enter_keeps_the_servers_files(isolated, monkeypatch) -> None:
    monkeypatch.setattr(postgres, "unreachable_parent", lambda path, uid, gid: None)
    monkeypatch.setattr(postgres, "run_as", lambda: postgres.RunAs(65534, 65534))
    service = postgres.PostgresService()
    assert service.server_base is None
    assert service.data_dirs() == (isolated / "run" / "postgres" / "data",)


def test_a_home_the_server_user_cannot_enter_moves_its_files_to_tmp(
    isolated, monkeypatch, tmp_path
) -> None:
    monkeypatch.setattr(postgres, "unreachable_parent", lambda path, uid, gid: Path("/root"))
    monkeypatch.setattr(postgres, "run_as", lambda: postgres.RunAs(65534, 65534))
    monkeypatch.setattr(postgres.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.setenv(postgres.BINARIES_ENV, "maven")
    service = postgres.PostgresService()
    base = service.server_base
    assert base is not None and base.parent == tmp_path
    assert base.name.startswith("kbqe-postgres-")
    assert service.binaries.bin_dir.is_relative_to(base)
    # --fresh deletes both the home's data directory and the moved one
    assert service.data_dirs() == (isolated / "run" / "postgres" / "data", base / "data")
    # one place per stack home
    assert postgres.PostgresService().server_base == base


def test_a_parent_directory_the_server_user_may_not_enter_is_named(tmp_path) -> None:
    # as the directories' owner, so that pytest's own private base directory is passable
    uid, gid = os.getuid(), os.getgid()
    closed = tmp_path / "closed"
    (closed / "inside").mkdir(parents=True)
    closed.chmod(0o600)
    try:
        assert postgres.unreachable_parent(closed / "inside" / "x", uid, gid) == closed
        closed.chmod(0o700)
        assert postgres.unreachable_parent(closed / "inside" / "x", uid, gid) is None
    finally:
        closed.chmod(0o755)


@pytest.mark.parametrize(
    ("status", "ready"), [("ready   ", True), ("starting", False), ("stopping", False)]
)
def test_the_server_is_ready_when_its_pid_file_says_so(tmp_path, status, ready) -> None:
    pid_file = tmp_path / "postmaster.pid"
    pid_file.write_text(f"123\n/data\n1700000000\n15432\n\n127.0.0.1\n  1 2\n{status}\n")
    assert postgres.postmaster_ready(pid_file) is ready
    assert postgres.postmaster_ready(tmp_path / "absent.pid") is False


def test_the_server_settings_enable_logical_decoding_on_loopback_only() -> None:
    settings = postgres.server_settings(15432)
    assert settings["wal_level"] == "logical"
    assert int(settings["max_replication_slots"]) > 0 and int(settings["max_wal_senders"]) > 0
    assert settings["listen_addresses"] == "127.0.0.1"
    assert settings["port"] == "15432"
    assert settings["unix_socket_directories"] == ""


# --- Kafka Connect ------------------------------------------------------------------------------
def test_the_connect_runtime_pins_the_brokers_kafka_version() -> None:
    assert connect.pom_kafka_version(data_file("connect-pom.xml")) == kafka_version(KAFKA_POM)


def test_the_worker_properties_put_its_topics_on_the_local_kafka(isolated, tmp_path) -> None:
    endpoints = local_endpoints()
    text = connect.worker_properties(endpoints, tmp_path / "plugins")
    props = dict(line.split("=", 1) for line in text.splitlines())
    assert props["bootstrap.servers"] == endpoints.kafka_bootstrap
    assert props["listeners"] == f"http://127.0.0.1:{endpoints.connect_port}"
    assert props["plugin.path"] == str(tmp_path / "plugins")
    topics = {"config": "configs", "offset": "offsets", "status": "status"}
    for kind, suffix in topics.items():
        assert props[f"{kind}.storage.topic"] == f"kbqe-local-connect-{suffix}"
        assert props[f"{kind}.storage.replication.factor"] == "1"


def test_connect_without_kafka_and_registry_is_an_error_naming_them(isolated) -> None:
    with pytest.raises(StackError) as raised:
        connect.ConnectService()._require_kafka_and_registry()
    message = str(raised.value)
    assert "kafka (127.0.0.1:" in message and "apicurio (127.0.0.1:" in message
    assert "kbqe stack up kafka apicurio connect" in message


def test_every_connect_plugin_has_a_packaged_pom() -> None:
    for pom in connect.PLUGIN_POMS.values():
        assert data_file(pom).is_file()


# --- Debezium connector configurations ---------------------------------------------------------
def test_the_avro_connector_writes_confluent_framing_with_content_ids(isolated) -> None:
    endpoints = local_endpoints()
    config = cdc.debezium_postgres_config(endpoints, "shop", "shop_slot", ["public.orders"])
    for part in ("key", "value"):
        assert config[f"{part}.converter"] == "io.apicurio.registry.utils.converter.AvroConverter"
        assert config[f"{part}.converter.apicurio.registry.url"] == (
            f"http://127.0.0.1:{endpoints.registry_port}/apis/registry/v2"
        )
        assert config[f"{part}.converter.apicurio.registry.headers.enabled"] == "false"
        assert config[f"{part}.converter.apicurio.registry.id-handler"].endswith(
            "Legacy4ByteIdHandler"
        )
        assert config[f"{part}.converter.apicurio.registry.use-id"] == "contentId"
        assert config[f"{part}.converter.apicurio.registry.auto-register"] == "true"
    assert config["database.port"] == str(endpoints.postgres_port)
    assert (config["slot.name"], config["publication.name"]) == (
        "shop_slot",
        "shop_slot_publication",
    )
    assert config["topic.prefix"] == "shop"
    assert config["table.include.list"] == "public.orders"
    assert config["plugin.name"] == "pgoutput"
    assert config["topic.creation.default.replication.factor"] == "1"


def test_the_json_connector_embeds_schemas_and_overrides_come_last(isolated) -> None:
    config = cdc.debezium_postgres_config(
        local_endpoints(), "p", "s", ["public.t"], "json", {"skipped.operations": "none"}
    )
    assert config["value.converter"] == "org.apache.kafka.connect.json.JsonConverter"
    assert config["value.converter.schemas.enable"] == "true"
    assert config["key.converter.schemas.enable"] == "true"
    assert config["skipped.operations"] == "none"
    assert not any("apicurio" in key for key in config)


def test_an_unknown_converter_is_an_error_naming_it(isolated) -> None:
    with pytest.raises(StackError, match="'protobuf'"):
        cdc.debezium_postgres_config(local_endpoints(), "p", "s", ["public.t"], "protobuf")


def test_a_connector_request_to_no_worker_says_to_start_connect(isolated) -> None:
    client = cdc.ConnectClient(local_endpoints().connect_url)
    with pytest.raises(StackError, match="kbqe stack up connect"):
        client.put("orders", {"connector.class": cdc.POSTGRES_CONNECTOR})
    assert client.status("orders") is None


def test_a_failed_task_is_reported_with_its_trace() -> None:
    status = {
        "connector": {"state": "RUNNING"},
        "tasks": [{"id": 0, "state": "FAILED", "trace": "org.postgresql.util.PSQLException: x"}],
    }
    assert cdc._failure(status) == "task 0 FAILED: org.postgresql.util.PSQLException: x"
