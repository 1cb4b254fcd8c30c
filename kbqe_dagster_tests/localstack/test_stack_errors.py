"""How the local stack fails: before it downloads or starts anything, with one message that
names the port or the missing tool and says how to fix it. No service is started here."""

from __future__ import annotations

import base64
import socket
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from kbqe_dagster import cli
from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack import stack
from kbqe_dagster.localstack.apicurio import ApicurioService
from kbqe_dagster.localstack.base import LocalService, ServiceStatus
from kbqe_dagster.localstack.endpoints import local_endpoints
from kbqe_dagster.localstack.jvm import parse_java_version
from kbqe_dagster.localstack.kafka import KafkaService, new_cluster_id

JVM_SERVICES = [KafkaService, ApicurioService]
PORT_VARIABLES = [
    "KAFKA",
    "KAFKA_CONTROLLER",
    "REGISTRY",
    "GCS",
    "BIGQUERY",
    "BIGQUERY_GRPC",
    "POSTGRES",
    "CONNECT",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def isolated_ports(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """Every stack port moved to a free one and a fresh stack home, so a developer's running
    stack on the default ports neither interferes nor gets touched."""
    for name in PORT_VARIABLES:
        monkeypatch.setenv(f"KBQE_LOCAL_{name}_PORT", str(free_port()))
    monkeypatch.setenv("KBQE_LOCAL_HOME", str(tmp_path / "home"))


@pytest.fixture
def listening_socket() -> Iterator[socket.socket]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s


def fake_bin(tmp_path: Path, **scripts: str) -> Path:
    """A directory holding only the given shell scripts, to be the whole PATH."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in scripts.items():
        path = bin_dir / name
        path.write_text(f"#!/bin/sh\n{body}\n")
        path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return bin_dir


JAVA_17 = """echo 'openjdk version "17.0.15" 2025-04-15' >&2"""


@pytest.mark.parametrize(
    ("service_class", "port_variable", "port_field"),
    [
        (KafkaService, "KAFKA", "kafka_port"),
        (KafkaService, "KAFKA_CONTROLLER", "kafka_controller_port"),
        (ApicurioService, "REGISTRY", "registry_port"),
    ],
)
def test_a_taken_port_is_named_before_anything_is_downloaded(
    isolated_ports: None,
    listening_socket: socket.socket,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    service_class: type,
    port_variable: str,
    port_field: str,
) -> None:
    taken = listening_socket.getsockname()[1]
    monkeypatch.setenv(f"KBQE_LOCAL_{port_variable}_PORT", str(taken))
    service = service_class(tmp_path / "home")
    assert getattr(service.endpoints, port_field) == taken

    with pytest.raises(StackError) as raised:
        service.up()

    assert f"127.0.0.1:{taken} is already taken" in str(raised.value)
    assert str(raised.value).startswith(f"{service.name}:")
    assert not service.dirs.cache.exists() or not any(service.dirs.cache.iterdir())
    assert service.pid() is None


@pytest.mark.parametrize("service_class", JVM_SERVICES)
def test_missing_java_says_how_to_install_it(
    isolated_ports: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    service_class: type,
) -> None:
    monkeypatch.setenv("PATH", str(fake_bin(tmp_path)))

    with pytest.raises(StackError) as raised:
        service_class(tmp_path / "home").up()

    message = str(raised.value)
    assert "'java' was not found on PATH" in message
    assert "apt-get install openjdk-17-jdk-headless" in message


@pytest.mark.parametrize("service_class", JVM_SERVICES)
def test_a_java_older_than_17_is_refused(
    isolated_ports: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    service_class: type,
) -> None:
    java_11 = """echo 'openjdk version "11.0.2" 2019-01-15' >&2"""
    monkeypatch.setenv("PATH", str(fake_bin(tmp_path, java=java_11)))

    with pytest.raises(StackError) as raised:
        service_class(tmp_path / "home").install()

    assert "is Java 11, the local stack needs Java 17 or newer" in str(raised.value)


@pytest.mark.parametrize("service_class", JVM_SERVICES)
def test_missing_maven_says_how_to_install_it(
    isolated_ports: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    service_class: type,
) -> None:
    monkeypatch.setenv("PATH", str(fake_bin(tmp_path, java=JAVA_17)))

    with pytest.raises(StackError) as raised:
        service_class(tmp_path / "home").install()

    assert (
        "'mvn' was not found on PATH: install Maven (Debian/Ubuntu: `apt-get install maven`)"
        in str(raised.value)
    )


@pytest.mark.parametrize("service_class", JVM_SERVICES)
def test_a_failed_download_names_mavens_error_and_leaves_no_partial_install(
    isolated_ports: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    service_class: type,
) -> None:
    failing_mvn = (
        "printf '\\033[0m[ERROR] Could not transfer artifact from central: Connection refused\\n'"
        "\necho '[ERROR] Re-run Maven using the -X switch'\nexit 1"
    )
    monkeypatch.setenv("PATH", str(fake_bin(tmp_path, java=JAVA_17, mvn=failing_mvn)))
    service = service_class(tmp_path / "home")
    service.dirs.ensure()

    with pytest.raises(StackError) as raised:
        service.install()

    message = str(raised.value)
    assert (
        "with Maven failed (exit 1): Could not transfer artifact from central: Connection refused"
        in message
    )
    assert "check that Maven Central is reachable" in message
    assert [p for p in service.dirs.cache.rglob("*") if not p.is_dir()] == []
    assert [p.name for p in service.dirs.cache.rglob("*partial*")] == []


def test_the_cli_reports_a_stack_error_as_one_line_and_exit_code_1(
    isolated_ports: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PATH", str(fake_bin(tmp_path)))

    assert cli.main(["stack", "up", "kafka"]) == 1

    err_lines = capsys.readouterr().err.strip().splitlines()
    assert err_lines[-1].startswith("kbqe: error: 'java' was not found on PATH")
    assert not any("Traceback" in line for line in err_lines)


def test_the_cli_shows_the_traceback_with_verbose(
    isolated_ports: None,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("PATH", str(fake_bin(tmp_path)))

    assert cli.main(["stack", "up", "kafka", "--verbose"]) == 1

    err = capsys.readouterr().err
    assert "Traceback" in err
    assert "StackError" in err


def test_an_unknown_service_name_lists_the_known_ones(
    isolated_ports: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["stack", "status", "zookeeper"]) == 1

    err = capsys.readouterr().err.strip()
    assert err.startswith(
        "kbqe: error: unknown local service(s) zookeeper; the stack has kafka, apicurio"
    )


def test_status_of_a_stack_that_never_ran_says_not_running(
    isolated_ports: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert cli.main(["stack", "status", "kafka", "apicurio"]) == 0

    lines = capsys.readouterr().out.strip().splitlines()
    ep = local_endpoints()
    assert lines[0].split() == ["service", "running", "pid", "endpoint"]
    assert lines[1].split() == ["kafka", "no", "-", ep.kafka_bootstrap]
    assert lines[2].split() == ["apicurio", "no", "-", ep.registry_url]


def test_down_of_a_stack_that_never_ran_stops_nothing(isolated_ports: None) -> None:
    assert stack.down(["kafka", "apicurio"]) == []


@pytest.mark.parametrize(
    ("printed", "major"),
    [
        ('openjdk version "17.0.15" 2025-04-15', 17),
        ('openjdk version "21" 2023-09-19', 21),
        ('java version "1.8.0_392"', 8),
        ("no version here", None),
    ],
)
def test_java_versions_are_read_from_java_dash_version(printed: str, major: int | None) -> None:
    assert parse_java_version(printed) == major


class ScriptedService(LocalService):
    """A stand-in service whose up() succeeds or raises, to test the orchestration alone."""

    def __init__(self, name: str, failure: str | None, home: Path) -> None:
        self.name = name
        self.failure = failure
        self.calls: list[str] = []
        super().__init__(home)

    @property
    def endpoint(self) -> str:
        return f"scripted://{self.name}"

    def up(self) -> ServiceStatus:
        self.calls.append("up")
        if self.failure is not None:
            raise StackError(f"{self.name}: {self.failure}\n  last lines:\n    boom")
        return ServiceStatus(self.name, True, 4242, self.endpoint)


def test_when_services_fail_the_others_still_start_and_one_error_names_each_failure(
    tmp_path: Path,
) -> None:
    services = [
        ScriptedService("alpha", "port 127.0.0.1:1 is already taken", tmp_path),
        ScriptedService("beta", None, tmp_path),
        ScriptedService("gamma", "exited during start-up", tmp_path),
    ]

    with pytest.raises(StackError) as raised:
        stack.up_services(services)

    first_line = str(raised.value).splitlines()[0]
    assert first_line == (
        "2 services failed to start — alpha: port 127.0.0.1:1 is already taken; "
        "gamma: exited during start-up"
    )
    assert [s.calls for s in services] == [["up"], ["up"], ["up"]]


def test_a_single_failure_is_raised_as_it_is(tmp_path: Path) -> None:
    services = [
        ScriptedService("alpha", "exited during start-up", tmp_path),
        ScriptedService("beta", None, tmp_path),
    ]

    with pytest.raises(StackError) as raised:
        stack.up_services(services)

    assert str(raised.value).splitlines()[0] == "alpha: exited during start-up"


def test_a_service_whose_module_does_not_exist_yet_is_skipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        stack,
        "SERVICES",
        (
            ("kbqe_dagster.localstack.kafka", "KafkaService"),
            ("kbqe_dagster.localstack.not_written_yet", "FutureService"),
            ("kbqe_dagster.localstack.apicurio", "ApicurioService"),
        ),
    )

    assert stack.service_classes() == [KafkaService, ApicurioService]


def test_the_stack_starts_in_the_documented_order() -> None:
    assert [cls.name for cls in stack.service_classes()] == [
        "kafka",
        "apicurio",
        "gcs",
        "bigquery",
        "postgres",
        "connect",
    ]
    assert [s.name for s in stack.build()] == ["kafka", "apicurio", "gcs", "bigquery"]


def test_a_kafka_cluster_id_never_starts_with_a_dash() -> None:
    # 0xF8 0x00 ... encodes as "-A...": the storage tool's parser would read it as an option
    # and the stack would not start (one fresh stack in 64 did before).
    draws = iter([b"\xf8" + bytes(15), b"\x01" * 16])
    cluster_id = new_cluster_id(lambda: next(draws))
    assert cluster_id == base64.urlsafe_b64encode(b"\x01" * 16).decode().rstrip("=")
    assert base64.urlsafe_b64encode(b"\xf8" + bytes(15)).decode().startswith("-")
    assert all(not new_cluster_id().startswith("-") for _ in range(2000))
