"""Stage and load through a Kafka that requires authentication, configured the way a user
configures it: environment variables only (``KBQE_KAFKA_CONF_<name>`` and the named
``KBQE_KAFKA_*``), then ``kbqe run --until-idle``.

A broker of the test's own (``secured_kafka.py``: KRaft, the stack's jars, its own ports),
started once for the module, has two authenticated listeners:

- mutual TLS: a CA, server and client certificates the test makes (``certificates.py``), the
  client key encrypted, so ``ssl.key.password`` is needed, and must never be shown;
- SASL OAUTHBEARER the way a user's OIDC provider is configured
  (``sasl.oauthbearer.method=oidc``): the client id and secret go to a token endpoint of the
  test's own (``token_endpoint.py``), which checks them and hands out an unsigned token that
  the broker's unsecured JWS validator accepts. The client secret must never be shown.

Through each: a control shows the listener refuses a client without the settings; topic
creation, producing Confluent-framed Avro messages, both stage readers (confluent-kafka's and
the native kernel's) and the real stage + load of one ``kbqe -v run`` (its planning, Spark
stage tasks, loads into the BigQuery emulator, completeness) get the settings from the
environment. Every message lands exactly once, and neither the run's output (debug lines
included) nor any file of its Dagster instance holds the key password or the client secret,
as is or in base64. That a second run is idle is the other ``kbqe run`` tests' concern: one run
per listener keeps this test cheap.
The local stack's registry, fake GCS and BigQuery emulator serve as they always do.
"""

from __future__ import annotations

import io
import json
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient
from fastavro import parse_schema, schemaless_writer

from kbqe_dagster.core.record.wire import encode_frame
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.resources.environment import kafka_settings_for
from kbqe_dagster.resources.kafka.clients import (
    CLIENT_LOG,
    KafkaSettings,
    connected_admin,
)
from kbqe_dagster.resources.kafka.native_reader import native_range_reader
from kbqe_dagster.resources.kafka.range_reader import RangeReader, read_range
from kbqe_dagster_tests.kbqe_run import cli_env, drop_datasets, until_idle
from kbqe_dagster_tests.security.certificates import (
    CLIENT_KEY_PASSWORD,
    make_certificates,
)
from kbqe_dagster_tests.security.conftest import (
    OAUTH_CLIENT_SECRET,
    files_with_secrets,
    secrets_in,
)
from kbqe_dagster_tests.security.secured_kafka import SecuredKafkaService
from kbqe_dagster_tests.security.token_endpoint import TokenEndpoint, token_endpoint

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MESSAGES = 40
PARTITIONS = 2
SCHEMA = {
    "type": "record",
    "name": "Login",
    "namespace": "com.acme.auth",
    "fields": [
        {"name": "n", "type": "long"},
        {"name": "who", "type": "string"},
        {"name": "at", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}
AT = 1_726_238_205_000


@pytest.fixture(scope="module")
def secured_kafka(local_stack, tmp_path_factory) -> Iterator[SecuredKafkaService]:
    """The test's own broker, started here and stopped here (its own pid file: exactly the
    process this fixture started, never the stack's broker)."""
    certificates = make_certificates(tmp_path_factory.mktemp("certificates"))
    service = SecuredKafkaService(tmp_path_factory.mktemp("kafka-auth"), certificates)
    try:
        service.up()
        yield service
    finally:
        service.down()


@pytest.fixture(scope="module")
def oauth_provider() -> Iterator[TokenEndpoint]:
    with token_endpoint("kbqe-stage", OAUTH_CLIENT_SECRET) as endpoint:
        yield endpoint


def listener_environment(
    service: SecuredKafkaService, listener: str, provider: TokenEndpoint
) -> dict[str, str]:
    """What a user sets to reach ``listener``: the local environment's Kafka port (the
    bootstrap servers of ``KBQE_ENV=local``) and how to authenticate."""
    certs = service.certificates
    if listener == "mtls":
        return {
            "KBQE_LOCAL_KAFKA_PORT": str(service.mtls_port),
            "KBQE_KAFKA_CONF_SECURITY_PROTOCOL": "SSL",
            "KBQE_KAFKA_SSL_CA_LOCATION": str(certs.ca),
            "KBQE_KAFKA_CONF_SSL_CERTIFICATE_LOCATION": str(certs.client_certificate),
            "KBQE_KAFKA_CONF_SSL_KEY_LOCATION": str(certs.client_key),
            "KBQE_KAFKA_CONF_SSL_KEY_PASSWORD": CLIENT_KEY_PASSWORD,
        }
    return {
        "KBQE_LOCAL_KAFKA_PORT": str(service.oauth_port),
        "KBQE_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
        "KBQE_KAFKA_SASL_MECHANISM": "OAUTHBEARER",
        "KBQE_KAFKA_CONF_SASL_OAUTHBEARER_METHOD": "oidc",
        "KBQE_KAFKA_CONF_SASL_OAUTHBEARER_TOKEN_ENDPOINT_URL": provider.url,
        "KBQE_KAFKA_CONF_SASL_OAUTHBEARER_CLIENT_ID": provider.client_id,
        "KBQE_KAFKA_CONF_SASL_OAUTHBEARER_CLIENT_SECRET": provider.client_secret,
    }


WITHOUT_SETTINGS = {
    # a TLS client that trusts the broker but has no certificate of its own
    "mtls": lambda s: {"security.protocol": "SSL", "ssl.ca.location": str(s.certificates.ca)},
    # a client that does not speak SASL
    "oauthbearer": lambda s: {},
}


@pytest.mark.parametrize("listener", ["mtls", "oauthbearer"])
def test_the_listener_refuses_a_client_without_the_settings(secured_kafka, listener):
    port = secured_kafka.mtls_port if listener == "mtls" else secured_kafka.oauth_port
    errors: list[KafkaError] = []
    admin = AdminClient(
        {
            "bootstrap.servers": f"127.0.0.1:{port}",
            "logger": CLIENT_LOG,
            "socket.timeout.ms": 3000,
            "error_cb": errors.append,
            **WITHOUT_SETTINGS[listener](secured_kafka),
        }
    )
    # The broker drops the connection at once (a refused handshake, a request before SASL):
    # the client says so well before a timeout would, and still lists nothing.
    deadline = time.monotonic() + 10
    while not errors and time.monotonic() < deadline:
        admin.poll(0.1)
    assert errors, "no connection error within 10 s"
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=1)


def _frames(schema_id: int) -> list[bytes]:
    parsed = parse_schema(SCHEMA)
    out = []
    for n in range(MESSAGES):
        body = io.BytesIO()
        schemaless_writer(body, parsed, {"n": n, "who": f"user-{n}", "at": AT + n})
        out.append(encode_frame(schema_id, body.getvalue()))
    return out


def _produce(settings: KafkaSettings, topic: str, schema_id: int) -> None:
    producer = Producer(settings.config(**{"enable.idempotence": True, "linger.ms": 5}))
    failed: list[str] = []
    for n, frame in enumerate(_frames(schema_id)):
        producer.produce(
            topic,
            frame,
            partition=n % PARTITIONS,
            on_delivery=lambda err, _msg: failed.append(str(err)) if err else None,
        )
    assert producer.flush(30) == 0 and failed == [], failed


def _read_natively(reader: RangeReader) -> int:
    count = 0
    for batch in reader.batches():
        for i in range(len(batch)):  # a native batch is indexed, as the stage loop does
            if reader.accept(batch[i]):
                count += 1
            elif reader.finished:
                break
    return count


@pytest.mark.parametrize("listener", ["mtls", "oauthbearer"])
def test_stage_and_load_through_an_authenticated_listener(
    secured_kafka, oauth_provider, local_endpoints, tmp_path, monkeypatch, listener
):
    auth = listener_environment(secured_kafka, listener, oauth_provider)
    for name, value in auth.items():
        monkeypatch.setenv(name, value)
    run = uuid.uuid4().hex[:8]
    topic, dataset, dead = f"auth.{listener}.{run}", f"auth_{listener}_{run}", f"auth_dead_{run}"

    # The settings the environment gives, for this process's own clients too.
    settings = kafka_settings_for(env="local")
    assert settings.bootstrap_servers == f"127.0.0.1:{auth['KBQE_LOCAL_KAFKA_PORT']}"
    admin = connected_admin(settings)  # kept: a dropped client cancels its requests
    admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)])[
        topic
    ].result(30)
    registry = SchemaRegistryClient({"url": local_endpoints.registry_url})
    schema_id = registry.register_schema(f"{topic}-value", Schema(json.dumps(SCHEMA), "AVRO"))
    _produce(settings, topic, schema_id)
    per_partition = MESSAGES // PARTITIONS

    # Both stage readers authenticate with the same settings.
    for partition in range(PARTITIONS):
        python = list(read_range(settings, topic, partition, 0, per_partition, idle_timeout=10))
        assert len(python) == per_partition
        native = native_range_reader(settings, topic, partition, 0, per_partition)
        if native is not None:  # None: the native kernel is not built here
            assert _read_natively(native) == per_partition

    pipeline = {
        "version": 1,
        "topics": [
            {
                "name": topic,
                "event_time": {"fields": ["at"]},
                "routing": {"mode": "static", "dataset": dataset, "table": "logins"},
                "staging": {"max_messages_per_batch": 10},
            }
        ],
        "dead_letter": {"dataset": dead, "table": "dead_letters"},
    }
    env = {**cli_env(tmp_path, pipeline, f"gs://{LOCAL_BUCKET}/auth-{run}"), **auth}
    client = local_bigquery_client()
    try:
        granted = len(oauth_provider.granted)
        started = time.monotonic()
        done = until_idle(env, verbose=True)  # debug lines: where a leak would show first
        took = time.monotonic() - started
        assert json.loads(done.stdout)["topics"][topic]["staged"] == MESSAGES
        rows = client.query(
            f"SELECT n, who, _kafka_partition AS p, _kafka_offset AS o FROM `{dataset}.logins`"
        ).result()
        landed = sorted((r["n"], r["who"], r["p"], r["o"]) for r in rows)
        # Every message exactly once, each where it was produced.
        assert landed == [
            (n, f"user-{n}", n % PARTITIONS, n // PARTITIONS) for n in range(MESSAGES)
        ]
        assert not secrets_in(done.stdout + done.stderr)
        assert files_with_secrets(tmp_path) == {}  # the Dagster instance, its logs included
        if listener == "oauthbearer":  # control: the run's clients sent the secret for tokens
            assert len(oauth_provider.granted) > granted and oauth_provider.refused == 0
        print(
            f"\n{listener}: {MESSAGES} messages staged and loaded by kbqe run in {took:.1f}s "
            f"(native reader: {native_range_reader(settings, topic, 0, 0, 1) is not None})"
        )
    finally:
        drop_datasets(client, dataset, dead)
