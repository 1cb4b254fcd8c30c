"""Client properties as environment variables: ``KBQE_KAFKA_CONF_<name>`` and
``KBQE_SCHEMA_REGISTRY_CONF_<name>`` spell a property with ``_`` for a dot and ``__`` for an
underscore; two variables for one property, or one for a property set elsewhere, are refused
naming both; and which properties are secret."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.client_properties import (
    KAFKA_CONF_PREFIX,
    REGISTRY_CONF_PREFIX,
    is_secret_property,
    property_name,
    property_variables,
    redacted,
)
from kbqe_dagster.core.errors import ConfigError

NAMED = {
    "KBQE_KAFKA_SASL_PASSWORD": "sasl.password",
    "KBQE_KAFKA_SSL_CA_LOCATION": "ssl.ca.location",
}


@pytest.mark.parametrize(
    ("variable", "prop"),
    [
        ("KBQE_KAFKA_CONF_SSL_CERTIFICATE_LOCATION", "ssl.certificate.location"),
        ("KBQE_KAFKA_CONF_SSL_KEY_PASSWORD", "ssl.key.password"),
        ("KBQE_KAFKA_CONF_SASL_OAUTHBEARER_CONFIG", "sasl.oauthbearer.config"),
        (
            "KBQE_KAFKA_CONF_ENABLE_SASL_OAUTHBEARER_UNSECURE_JWT",
            "enable.sasl.oauthbearer.unsecure.jwt",
        ),
        ("KBQE_KAFKA_CONF_CLIENT_ID", "client.id"),
        ("KBQE_KAFKA_CONF_ACKS", "acks"),
        # __ keeps an underscore: a property that holds one stays reachable
        ("KBQE_KAFKA_CONF_PLUGIN__LIBRARY_PATHS", "plugin_library.paths"),
        ("KBQE_KAFKA_CONF_A__B_C", "a_b.c"),
        ("KBQE_KAFKA_CONF_TRAILING__", "trailing_"),
        # lower case given is kept as is
        ("KBQE_KAFKA_CONF_ssl_key_location", "ssl.key.location"),
    ],
)
def test_a_variable_spells_its_property(variable, prop):
    assert property_name(variable, KAFKA_CONF_PREFIX) == prop


def test_the_registry_prefix_spells_alike():
    assert property_name("KBQE_SCHEMA_REGISTRY_CONF_SSL_KEY_LOCATION", REGISTRY_CONF_PREFIX) == (
        "ssl.key.location"
    )


@pytest.mark.parametrize(
    "variable",
    [
        "KBQE_KAFKA_CONF_",
        "KBQE_KAFKA_CONF_SSL_",
        "KBQE_KAFKA_CONF__SSL",
        "KBQE_KAFKA_CONF_SSL__KEY_",
    ],
)
def test_a_variable_that_spells_no_property_is_refused_by_name(variable):
    with pytest.raises(ConfigError, match=variable):
        property_name(variable, KAFKA_CONF_PREFIX)


def test_properties_of_the_prefix_and_the_named_variables_that_are_set():
    environ = {
        "KBQE_KAFKA_SASL_PASSWORD": "s3cret",
        "KBQE_KAFKA_CONF_SSL_CERTIFICATE_LOCATION": "/etc/kbqe/client.pem",
        "KBQE_KAFKA_CONF_SSL_KEY_LOCATION": "/etc/kbqe/client.key",
        "KBQE_SCHEMA_REGISTRY_CONF_SSL_KEY_LOCATION": "/etc/kbqe/registry.key",  # not Kafka's
        "KBQE_KAFKA_BOOTSTRAP_SERVERS": "broker:9093",  # not a property variable
    }
    assert property_variables(environ, KAFKA_CONF_PREFIX, NAMED) == {
        "sasl.password": "KBQE_KAFKA_SASL_PASSWORD",
        "ssl.certificate.location": "KBQE_KAFKA_CONF_SSL_CERTIFICATE_LOCATION",
        "ssl.key.location": "KBQE_KAFKA_CONF_SSL_KEY_LOCATION",
    }


def test_a_named_variable_and_a_conf_variable_for_one_property_are_refused_naming_both():
    environ = {"KBQE_KAFKA_SASL_PASSWORD": "first-pw", "KBQE_KAFKA_CONF_SASL_PASSWORD": "second-pw"}
    with pytest.raises(ConfigError) as refused:
        property_variables(environ, KAFKA_CONF_PREFIX, NAMED)
    message = str(refused.value)
    assert "KBQE_KAFKA_SASL_PASSWORD" in message
    assert "KBQE_KAFKA_CONF_SASL_PASSWORD" in message
    assert "sasl.password" in message
    assert "first-pw" not in message and "second-pw" not in message  # values never shown


def test_two_spellings_of_one_property_are_refused_naming_both():
    environ = {"KBQE_KAFKA_CONF_CLIENT_ID": "a", "KBQE_KAFKA_CONF_client_id": "b"}
    with pytest.raises(
        ConfigError, match="KBQE_KAFKA_CONF_CLIENT_ID and KBQE_KAFKA_CONF_client_id"
    ):
        property_variables(environ, KAFKA_CONF_PREFIX)


def test_a_reserved_property_is_refused_naming_what_sets_it():
    environ = {"KBQE_KAFKA_CONF_BOOTSTRAP_SERVERS": "elsewhere:9092"}
    with pytest.raises(
        ConfigError, match="KBQE_KAFKA_CONF_BOOTSTRAP_SERVERS.*KBQE_KAFKA_BOOTSTRAP_SERVERS"
    ):
        property_variables(
            environ,
            KAFKA_CONF_PREFIX,
            reserved={"bootstrap.servers": "KBQE_KAFKA_BOOTSTRAP_SERVERS"},
        )


@pytest.mark.parametrize(
    "prop",
    [
        "sasl.password",
        "ssl.key.password",
        "ssl.key.pem",
        "ssl.keystore.password",
        "sasl.oauthbearer.config",
        "sasl.oauthbearer.client.secret",
        "sasl.jaas.config",
        "sasl.kerberos.keytab",
        "basic.auth.user.info",
        "bearer.auth.token",
        "SASL.PASSWORD",
    ],
)
def test_secret_properties(prop):
    assert is_secret_property(prop)


@pytest.mark.parametrize(
    "prop",
    [
        "security.protocol",
        "sasl.mechanism",
        "ssl.certificate.location",
        "ssl.ca.location",
        "client.id",
    ],
)
def test_properties_that_are_not_secret(prop):
    assert not is_secret_property(prop)


def test_redacted_hides_secret_values_and_shows_the_others():
    shown = redacted(
        {"ssl.key.password": "s3cret", "sasl.oauthbearer.config": "principal=x", "acks": "all"}
    )
    assert shown == {"ssl.key.password": "***", "sasl.oauthbearer.config": "***", "acks": "all"}
