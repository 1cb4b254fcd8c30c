"""A registry reached over plain HTTP gets no CA bundle: confluent-kafka's client builds a TLS
context for every client, and loading the default bundle was most of a stage worker's first
range's registry cost (~16 of its 33 ms of CPU). Anything that may use TLS keeps the verified default."""

from __future__ import annotations

import ssl

import pytest
from confluent_kafka.schema_registry import SchemaRegistryClient

from kbqe_dagster.resources.schema_registry import RegistrySettings


@pytest.fixture(autouse=True)
def no_proxy(monkeypatch):
    for name in (
        "HTTP_PROXY",
        "http_proxy",
        "HTTPS_PROXY",
        "https_proxy",
        "ALL_PROXY",
        "all_proxy",
    ):
        monkeypatch.delenv(name, raising=False)


def test_a_plain_http_registry_gets_an_empty_tls_context_that_no_request_uses():
    config = RegistrySettings("http://registry:8081").client_config()
    assert config["ssl.ca.location"] is False
    context = SchemaRegistryClient(config)._rest_client.verify
    assert context.cert_store_stats()["x509_ca"] == 0  # the CA bundle was not loaded


@pytest.mark.parametrize("url", ["https://registry:8081", "http://a:8081,https://b:8081"])
def test_a_registry_that_may_use_tls_keeps_the_verified_default(url):
    config = RegistrySettings(url).client_config()
    assert "ssl.ca.location" not in config
    context = SchemaRegistryClient(config)._rest_client.verify
    assert context.verify_mode == ssl.CERT_REQUIRED


def test_a_configured_ca_bundle_is_passed_as_given_even_over_http():
    config = RegistrySettings("http://registry:8081", ssl_ca_location="/etc/ca.pem").client_config()
    assert config["ssl.ca.location"] == "/etc/ca.pem"


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "https_proxy", "ALL_PROXY"])
def test_a_proxy_from_the_environment_keeps_the_verified_default(monkeypatch, variable):
    # httpx reads proxies from the environment and may reach an https:// proxy with the
    # client's TLS context even when the registry's URL is http://.
    monkeypatch.setenv(variable, "https://proxy:3128")
    assert "ssl.ca.location" not in RegistrySettings("http://registry:8081").client_config()
