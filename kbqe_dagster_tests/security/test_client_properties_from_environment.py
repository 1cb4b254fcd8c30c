"""Any librdkafka property as ``KBQE_KAFKA_CONF_<name>`` and any registry client property as
``KBQE_SCHEMA_REGISTRY_CONF_<name>``, from the environment to every client kbqe builds, in
both environments, and never shown.

What is checked: the resources of ``local`` and ``gcp`` read the variables (with the named
``KBQE_KAFKA_SASL_*`` ones); the definitions hold the variables' names, never their values;
the stage task's consumer settings (Python and native reader alike), the admin clients' and
an operator command's ``--bootstrap-servers`` get the properties; conflicts are refused by
name; reprs and log lines show no secret. The registry's client certificate is used for real:
a stub registry over HTTPS that requires one (Python's ``ssl``) answers a schema lookup made
with the variables' settings, and refuses one without them. The real brokers with mTLS and
OAUTHBEARER are in ``test_authenticated_kafka_on_local_stack.py``.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import dagster as dg
import pytest
from dagster._core.remote_representation.external_data import RepositorySnap
from dagster._serdes import serialize_value

from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.definitions import build_definitions
from kbqe_dagster.resources.environment import (
    kafka_settings_for,
    resolved,
    resources_for_environment,
)
from kbqe_dagster.resources.kafka.clients import KafkaSettings, consumer_config
from kbqe_dagster.resources.kafka.native_reader import native_settings
from kbqe_dagster.resources.schema_registry import (
    RegistrySettings,
    RegistryUnavailableError,
    SchemaLookup,
    forget_found_schemas,
)
from kbqe_dagster_tests.security.certificates import CLIENT_NAME, Certificates, make_certificates
from kbqe_dagster_tests.security.conftest import (
    KAFKA_SECRET,
    STUB_SCHEMA,
    STUB_SCHEMA_ID,
    log_text,
    secrets_in,
)

REPO = Path(__file__).resolve().parents[2]
MTLS_ENV = {
    "KBQE_KAFKA_CONF_SECURITY_PROTOCOL": "SSL",
    "KBQE_KAFKA_SSL_CA_LOCATION": "/etc/kbqe/ca.pem",  # a named variable, mixed with CONF_ ones
    "KBQE_KAFKA_CONF_SSL_CERTIFICATE_LOCATION": "/etc/kbqe/client.pem",
    "KBQE_KAFKA_CONF_SSL_KEY_LOCATION": "/etc/kbqe/client.key",
    "KBQE_KAFKA_CONF_SSL_KEY_PASSWORD": KAFKA_SECRET,
    "KBQE_KAFKA_CONF_SASL_OAUTHBEARER_CONFIG": f"principal=kbqe scope=x secret={KAFKA_SECRET}",
}
KAFKA_PROPERTIES = {
    "security.protocol": "SSL",
    "ssl.ca.location": "/etc/kbqe/ca.pem",
    "ssl.certificate.location": "/etc/kbqe/client.pem",
    "ssl.key.location": "/etc/kbqe/client.key",
    "ssl.key.password": KAFKA_SECRET,
    "sasl.oauthbearer.config": f"principal=kbqe scope=x secret={KAFKA_SECRET}",
}
REGISTRY_ENV = {
    "KBQE_SCHEMA_REGISTRY_CONF_SSL_CERTIFICATE_LOCATION": "/etc/kbqe/registry-client.pem",
    "KBQE_SCHEMA_REGISTRY_CONF_SSL_KEY_LOCATION": "/etc/kbqe/registry-client.key",
    "KBQE_SCHEMA_REGISTRY_CONF_SSL_KEY_PASSWORD": KAFKA_SECRET,
    "KBQE_SCHEMA_REGISTRY_CONF_TIMEOUT": "7",
}
GCP_ENV = {
    "KBQE_KAFKA_BOOTSTRAP_SERVERS": "broker:9093",
    "KBQE_SCHEMA_REGISTRY_URL": "https://registry:8081",
    "KBQE_STAGING_URL": "gs://bucket/staging",
    "KBQE_GCP_PROJECT": "acme",
    "KBQE_PIPELINE_CONFIG": str(REPO / "examples" / "pipeline.yaml"),
}


@pytest.fixture
def environ(monkeypatch) -> Iterator[pytest.MonkeyPatch]:
    """No Kafka or registry variable of the developer's shell leaks into these tests."""
    import os

    for name in list(os.environ):
        if name.startswith(("KBQE_KAFKA_", "KBQE_SCHEMA_REGISTRY_")):
            monkeypatch.delenv(name)
    monkeypatch.setenv("KBQE_PIPELINE_CONFIG", GCP_ENV["KBQE_PIPELINE_CONFIG"])
    yield monkeypatch


def _set(monkeypatch: pytest.MonkeyPatch, values: dict[str, str]) -> None:
    for name, value in values.items():
        monkeypatch.setenv(name, value)


def _built(env: str) -> tuple[KafkaSettings, RegistrySettings]:
    """The settings a run's op gets from the resources of ``env`` (Dagster resolves them)."""
    resources = resources_for_environment(env)
    with dg.build_resources(
        {"kafka": resources["kafka"], "schema_registry": resources["schema_registry"]}
    ) as built:
        return built.kafka.settings(), built.schema_registry.settings()


@pytest.mark.parametrize("env", ["local", "gcp"])
def test_every_kafka_property_of_the_environment_reaches_the_settings(environ, env):
    _set(environ, {**GCP_ENV, **MTLS_ENV})
    kafka, _ = _built(env)
    assert dict(kafka.client_config) == KAFKA_PROPERTIES


@pytest.mark.parametrize("env", ["local", "gcp"])
def test_registry_client_certificates_reach_the_registry_client_config(environ, env):
    _set(environ, {**GCP_ENV, **REGISTRY_ENV})
    _, registry = _built(env)
    conf = registry.client_config()
    assert conf["ssl.certificate.location"] == "/etc/kbqe/registry-client.pem"
    assert conf["ssl.key.location"] == "/etc/kbqe/registry-client.key"
    assert conf["ssl.key.password"] == KAFKA_SECRET
    assert conf["timeout"] == 7  # the client takes numbers only as numbers


def test_the_registry_variables_may_set_the_named_fields_too(environ):
    _set(environ, {"KBQE_SCHEMA_REGISTRY_CONF_SSL_CA_LOCATION": "/etc/kbqe/registry-ca.pem"})
    _, registry = _built("local")
    assert registry.ssl_ca_location == "/etc/kbqe/registry-ca.pem"
    assert registry.client_config()["ssl.ca.location"] == "/etc/kbqe/registry-ca.pem"


def test_the_stage_readers_and_admin_clients_get_the_properties_and_keep_kbqes_own(environ):
    _set(environ, MTLS_ENV)
    settings, _ = _built("local")
    # The stage task's consumer (confluent-kafka's), with kbqe's exactly-once settings intact.
    consumer = consumer_config(settings)
    assert KAFKA_PROPERTIES.items() <= consumer.items()
    assert consumer["isolation.level"] == "read_committed"
    assert consumer["enable.auto.commit"] is False
    # The native kernel's consumer gets the same librdkafka strings.
    native = dict(native_settings(settings) or [])
    assert KAFKA_PROPERTIES.items() <= native.items()
    # Every admin client (planning, sensors, commands): KafkaSettings.config.
    assert KAFKA_PROPERTIES.items() <= settings.config().items()


def test_kbqes_consumer_settings_win_over_a_conf_variable(environ):
    _set(environ, {"KBQE_KAFKA_CONF_ISOLATION_LEVEL": "read_uncommitted"})
    settings, _ = _built("local")
    assert consumer_config(settings)["isolation.level"] == "read_committed"


def test_an_operator_commands_bootstrap_servers_keep_the_environments_authentication(environ):
    _set(environ, MTLS_ENV)
    settings = kafka_settings_for("other-broker:9094", env="local")
    assert settings.bootstrap_servers == "other-broker:9094"
    assert dict(settings.client_config) == KAFKA_PROPERTIES
    _set(environ, GCP_ENV)
    assert kafka_settings_for(env="gcp").bootstrap_servers == "broker:9093"


@pytest.mark.parametrize(
    ("variables", "named"),
    [
        (
            {"KBQE_KAFKA_SASL_PASSWORD": "a1b2c3", "KBQE_KAFKA_CONF_SASL_PASSWORD": "d4e5f6"},
            ("KBQE_KAFKA_SASL_PASSWORD", "KBQE_KAFKA_CONF_SASL_PASSWORD"),
        ),
        (
            {
                "KBQE_KAFKA_SECURITY_PROTOCOL": "SSL",
                "KBQE_KAFKA_CONF_SECURITY_PROTOCOL": "SASL_SSL",
            },
            ("KBQE_KAFKA_SECURITY_PROTOCOL", "KBQE_KAFKA_CONF_SECURITY_PROTOCOL"),
        ),
        (
            {
                "KBQE_SCHEMA_REGISTRY_BASIC_AUTH": "u:a1b2c3",
                "KBQE_SCHEMA_REGISTRY_CONF_BASIC_AUTH_USER_INFO": "u:d4e5f6",
            },
            ("KBQE_SCHEMA_REGISTRY_BASIC_AUTH", "KBQE_SCHEMA_REGISTRY_CONF_BASIC_AUTH_USER_INFO"),
        ),
        (
            {"KBQE_KAFKA_CONF_BOOTSTRAP_SERVERS": "x:1"},
            ("KBQE_KAFKA_CONF_BOOTSTRAP_SERVERS", "KBQE_KAFKA_BOOTSTRAP_SERVERS"),
        ),
        (
            {"KBQE_SCHEMA_REGISTRY_CONF_URL": "http://x"},
            ("KBQE_SCHEMA_REGISTRY_CONF_URL", "KBQE_SCHEMA_REGISTRY_URL"),
        ),
    ],
)
@pytest.mark.parametrize("env", ["local", "gcp"])
def test_one_property_from_two_variables_is_refused_naming_both(environ, env, variables, named):
    _set(environ, {**GCP_ENV, **variables})
    with pytest.raises(ConfigError) as refused:
        resources_for_environment(env)
    message = str(refused.value)
    assert all(name in message for name in named), message
    assert "a1b2c3" not in message and "d4e5f6" not in message


def test_a_variable_unset_after_the_definitions_loaded_is_a_clear_error(environ):
    _set(environ, MTLS_ENV)
    resource = resources_for_environment("local")["kafka"]
    environ.delenv("KBQE_KAFKA_CONF_SSL_KEY_PASSWORD")
    with pytest.raises(ConfigError, match="KBQE_KAFKA_CONF_SSL_KEY_PASSWORD.*not set"):
        resolved(resource).settings()


# --- never shown --------------------------------------------------------------------------------
def test_reprs_and_log_lines_of_the_settings_show_no_secret_value(environ, caplog):
    _set(environ, {**MTLS_ENV, **REGISTRY_ENV})
    kafka, registry = _built("local")
    resources = resources_for_environment("local")
    log = logging.getLogger("kbqe.test")
    with caplog.at_level(logging.DEBUG):
        for holder in (kafka, registry, resources["kafka"], resources["schema_registry"]):
            log.warning("settings: %r / %s", holder, holder)
    text = log_text(caplog.records)
    assert "ssl.key.password" in text and "/etc/kbqe/client.pem" in text  # control: logged
    assert not secrets_in(text)
    assert kafka.config()["ssl.key.password"] == KAFKA_SECRET  # control: the secret is there


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # Dagster's own, in the snapshot code
@pytest.mark.parametrize("env", ["local", "gcp"])
def test_the_definitions_name_the_variables_and_hold_none_of_their_values(environ, env):
    _set(environ, {**GCP_ENV, **MTLS_ENV, **REGISTRY_ENV})
    defs = build_definitions(GCP_ENV["KBQE_PIPELINE_CONFIG"], env=env)
    snapshot = serialize_value(RepositorySnap.from_def(defs.get_repository_def()))
    assert "KBQE_KAFKA_CONF_SSL_KEY_PASSWORD" in snapshot  # control: the config is in it
    assert "KBQE_SCHEMA_REGISTRY_CONF_SSL_KEY_PASSWORD" in snapshot
    assert not secrets_in(snapshot)


# --- the registry's client certificate, used for real --------------------------------------------
class _SchemaHandler(BaseHTTPRequestHandler):
    clients: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        peer = self.connection.getpeercert()  # type: ignore[attr-defined]
        self.clients.append(dict(x[0] for x in peer["subject"])["commonName"])
        found = self.path.split("?")[0] == f"/schemas/ids/{STUB_SCHEMA_ID}"
        body = (
            {"schema": json.dumps(STUB_SCHEMA), "schemaType": "AVRO"}
            if found
            else {"error_code": 40403, "message": "Schema not found"}
        )
        raw = json.dumps(body).encode()
        self.send_response(200 if found else 404)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def mtls_registry(tmp_path) -> Iterator[tuple[str, Certificates, list[str]]]:
    """A registry stub over HTTPS on 127.0.0.1 that requires a client certificate of the test's
    CA: the URL, the certificates and the common names of the clients it served."""
    certs = make_certificates(tmp_path / "certs")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(certs.server_certificate, certs.server_key)
    context.load_verify_locations(certs.ca)
    context.verify_mode = ssl.CERT_REQUIRED
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SchemaHandler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    clients: list[str] = []
    _SchemaHandler.clients = clients
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    forget_found_schemas()  # a schema found through another test's settings is not proof
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", certs, clients
    finally:
        server.shutdown()
        server.server_close()
        forget_found_schemas()


def test_a_registry_requiring_client_certificates_serves_the_environments_settings(
    environ, mtls_registry, caplog
):
    url, certs, clients = mtls_registry
    _set(
        environ,
        {
            "KBQE_SCHEMA_REGISTRY_SSL_CA_LOCATION": str(certs.ca),
            "KBQE_SCHEMA_REGISTRY_CONF_SSL_CERTIFICATE_LOCATION": str(certs.client_certificate),
            "KBQE_SCHEMA_REGISTRY_CONF_SSL_KEY_LOCATION": str(certs.client_key),
            "KBQE_SCHEMA_REGISTRY_CONF_SSL_KEY_PASSWORD": KAFKA_SECRET,
        },
    )
    resource = resources_for_environment("local")["schema_registry"].model_copy(update={"url": url})
    caplog.set_level(logging.DEBUG)
    found = SchemaLookup(resolved(resource).settings()).get(STUB_SCHEMA_ID)
    assert found is not None and found.schema == STUB_SCHEMA
    assert clients == [CLIENT_NAME]  # the registry saw the client's certificate
    assert not secrets_in(log_text(caplog.records))


def test_without_the_client_certificate_the_registry_refuses(environ, mtls_registry):
    url, certs, clients = mtls_registry
    with pytest.raises(RegistryUnavailableError, match=f"id {STUB_SCHEMA_ID}"):
        SchemaLookup(RegistrySettings(url, ssl_ca_location=str(certs.ca))).get(STUB_SCHEMA_ID)
    assert clients == []


def test_a_registry_number_property_that_is_no_number_is_refused_naming_it(environ):
    _set(environ, {"KBQE_SCHEMA_REGISTRY_CONF_MAX_RETRIES": "three"})
    with pytest.raises(ConfigError, match="max.retries: 'three' is not a number"):
        _built("local")
