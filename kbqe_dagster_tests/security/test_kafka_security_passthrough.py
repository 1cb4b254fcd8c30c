"""SASL/SSL settings pass from the Dagster resource to the librdkafka client kbqe builds, and
from there onto the wire — without a SASL broker.

Three levels: the settings dict (``KafkaResource`` → ``KafkaSettings.config()``), librdkafka's
own view of its configuration (its ``debug=conf`` dump of the consumer kbqe's ``read_range``
creates), and the bytes the client sends to a fake broker (``fake_broker.py``): the SASL
mechanism and credentials, or a TLS ClientHello.
"""

from __future__ import annotations

import contextlib
import logging

import dagster as dg
import pytest
from confluent_kafka import KafkaException

from kbqe_dagster.defs.resources import resources_for_environment
from kbqe_dagster.resources.configurable import KafkaResource
from kbqe_dagster.resources.kafka import clients as kafka_module
from kbqe_dagster.resources.kafka.clients import (
    CLIENT_LOG,
    KafkaReadError,
    KafkaSettings,
)
from kbqe_dagster.resources.kafka.cluster import watermarks
from kbqe_dagster.resources.kafka.range_reader import read_range
from kbqe_dagster_tests.security.conftest import KAFKA_SECRET, secrets_in
from kbqe_dagster_tests.security.fake_broker import SASL_AUTHENTICATE, SASL_HANDSHAKE, FakeBroker

SASL_FIELDS = dict(
    security_protocol="SASL_SSL",
    sasl_mechanism="SCRAM-SHA-512",
    sasl_username="kbqe",
    sasl_password=KAFKA_SECRET,
    ssl_ca_location="/etc/kbqe/ca.pem",
)


def librdkafka(conf: dict) -> dict:
    """The librdkafka settings of a client config: without the Python client's ``logger``."""
    return {k: v for k, v in conf.items() if k != "logger"}


def test_every_client_logs_through_the_package_logger_not_stderr():
    assert KafkaSettings("broker:9092").config()["logger"] is CLIENT_LOG


def test_resource_fields_become_librdkafka_settings():
    settings = KafkaResource(bootstrap_servers="broker:9093", **SASL_FIELDS).settings()
    assert librdkafka(settings.config()) == {
        "bootstrap.servers": "broker:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.username": "kbqe",
        "sasl.password": KAFKA_SECRET,
        "ssl.ca.location": "/etc/kbqe/ca.pem",
    }


def test_unset_fields_leave_librdkafka_defaults():
    assert librdkafka(KafkaResource(bootstrap_servers="broker:9092").settings().config()) == {
        "bootstrap.servers": "broker:9092"
    }


def test_consumer_overrides_keep_the_security_settings():
    settings = KafkaSettings(
        "broker:9093", {"security.protocol": "SASL_SSL", "sasl.oauthbearer.method": "oidc"}
    )
    conf = settings.config(**{"group.id": "kbqe-stage", "isolation.level": "read_committed"})
    assert conf["security.protocol"] == "SASL_SSL"
    assert conf["sasl.oauthbearer.method"] == "oidc"
    assert conf["group.id"] == "kbqe-stage"


def test_gcp_environment_resolves_sasl_settings_from_environment_variables(monkeypatch):
    monkeypatch.setenv("KBQE_PIPELINE_CONFIG", "unused.yaml")
    for name, value in {
        "KBQE_KAFKA_BOOTSTRAP_SERVERS": "broker:9093",
        "KBQE_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "KBQE_KAFKA_SASL_MECHANISM": "PLAIN",
        "KBQE_KAFKA_SASL_USERNAME": "kbqe",
        "KBQE_KAFKA_SASL_PASSWORD": KAFKA_SECRET,
    }.items():
        monkeypatch.setenv(name, value)
    resource = resources_for_environment("gcp")["kafka"]
    assert not secrets_in(repr(resource))  # the definitions hold the variable's name only
    with dg.build_resources({"kafka": resource}) as built:
        conf = built.kafka.settings().config()
    assert librdkafka(conf) == {
        "bootstrap.servers": "broker:9093",
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "kbqe",
        "sasl.password": KAFKA_SECRET,
    }


def test_librdkafka_holds_the_settings_of_the_consumer_kbqe_builds(monkeypatch, caplog):
    """librdkafka's configuration dump of read_range's consumer: the security settings are
    set (values of secret properties are redacted by librdkafka itself)."""
    rdkafka_log = logging.getLogger("kbqe.test.rdkafka")
    real_consumer = kafka_module.Consumer
    monkeypatch.setattr(
        kafka_module,
        "Consumer",
        lambda conf: real_consumer({**conf, "debug": "conf", "logger": rdkafka_log}),
    )
    settings = KafkaResource(
        bootstrap_servers="127.0.0.1:9", **{**SASL_FIELDS, "ssl_ca_location": None}
    ).settings()
    with caplog.at_level(logging.DEBUG, logger=rdkafka_log.name):
        with contextlib.suppress(KafkaReadError):
            list(read_range(settings, "t", 0, 0, 1, idle_timeout=0.5))
    dump = [r.getMessage() for r in caplog.records if r.name == rdkafka_log.name]
    assert any(line.endswith("security.protocol = sasl_ssl") for line in dump), dump
    assert any(line.endswith("sasl.mechanisms = SCRAM-SHA-512") for line in dump)
    assert any(line.endswith("sasl.username = [redacted]") for line in dump)
    assert any(line.endswith("sasl.password = [redacted]") for line in dump)
    assert not secrets_in("\n".join(dump))


def _read_one(settings: KafkaSettings) -> None:
    with contextlib.suppress(KafkaReadError, KafkaException):
        list(read_range(settings, "t", 0, 0, 1, idle_timeout=1.0))


def _plan(settings: KafkaSettings) -> None:
    with contextlib.suppress(KafkaReadError, KafkaException):
        watermarks(settings, "t", timeout=1.0)


ENTRY_POINTS = {"stage read (read_range)": _read_one, "planning (watermarks)": _plan}


@pytest.mark.parametrize("entry", ENTRY_POINTS.values(), ids=ENTRY_POINTS.keys())
def test_sasl_plain_credentials_reach_the_broker(entry):
    with FakeBroker() as broker:
        entry(
            KafkaResource(
                bootstrap_servers=broker.bootstrap,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="PLAIN",
                sasl_username="kbqe",
                sasl_password=KAFKA_SECRET,
            ).settings()
        )
        seen = broker.wait()
    # The handshake, then the authentication; a client that reconnects before the fake
    # broker closes may send ApiVersions again afterwards.
    assert (SASL_HANDSHAKE, SASL_AUTHENTICATE) in zip(seen.api_keys, seen.api_keys[1:])
    assert seen.mechanism == "PLAIN"
    assert seen.auth_bytes == b"\x00kbqe\x00" + KAFKA_SECRET.encode()


def test_scram_sends_the_username_and_never_the_password():
    with FakeBroker() as broker:
        _read_one(
            KafkaResource(
                bootstrap_servers=broker.bootstrap,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism="SCRAM-SHA-512",
                sasl_username="kbqe",
                sasl_password=KAFKA_SECRET,
            ).settings()
        )
        seen = broker.wait()
    assert seen.mechanism == "SCRAM-SHA-512"
    assert seen.auth_bytes.startswith(b"n,,n=kbqe,r=")  # SCRAM client-first message
    assert not secrets_in(seen.raw)


@pytest.mark.parametrize("protocol", ["SSL", "SASL_SSL"])
def test_ssl_protocols_open_with_a_tls_handshake(protocol):
    with FakeBroker() as broker:
        _read_one(
            KafkaResource(
                bootstrap_servers=broker.bootstrap,
                security_protocol=protocol,
                sasl_mechanism="PLAIN" if "SASL" in protocol else None,
                sasl_username="kbqe",
                sasl_password=KAFKA_SECRET,
            ).settings()
        )
        seen = broker.wait()
    assert seen.tls_client_hello
    assert seen.api_keys == []  # no Kafka request in clear text
    assert not secrets_in(seen.raw)


def test_plaintext_opens_with_a_kafka_request_in_clear():
    """The control of the two tests above: without a security protocol, no TLS, no SASL."""
    with FakeBroker() as broker:
        _read_one(KafkaResource(bootstrap_servers=broker.bootstrap).settings())
        seen = broker.wait()
    assert not seen.tls_client_hello
    assert seen.api_keys and SASL_HANDSHAKE not in seen.api_keys


def test_ssl_ca_location_is_loaded_by_librdkafka():
    settings = KafkaResource(
        bootstrap_servers="127.0.0.1:9",
        security_protocol="SSL",
        ssl_ca_location="/nonexistent/kbqe-ca.pem",
    ).settings()
    with pytest.raises(KafkaException, match="ssl.ca.location"):
        list(read_range(settings, "t", 0, 0, 1, idle_timeout=0.5))
