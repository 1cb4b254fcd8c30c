"""Schema registry basic auth: ``SchemaLookup`` with ``RegistrySettings(basic_auth_user_info)``
reads schemas from a registry that requires it, and without (or with wrong) credentials fails
loudly with the 401 — never as "unknown schema id", which would dead-letter good messages.

Against the real Apicurio 3.0.9 with HTTP basic auth (``authenticated_registry.py``) and, for
fast unit runs, a stdlib stub of the ccompat ``/schemas/ids/{id}`` endpoint.
"""

from __future__ import annotations

import json

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.resources.schema_registry import (
    RegistrySettings,
    RegistryUnavailableError,
    SchemaLookup,
)
from kbqe_dagster_tests.security.conftest import (
    REGISTRY_SECRET,
    REGISTRY_USER,
    STUB_SCHEMA,
    STUB_SCHEMA_ID,
    WRONG_SECRET,
    secrets_in,
)

RIGHT = f"{REGISTRY_USER}:{REGISTRY_SECRET}"
WRONG = f"{REGISTRY_USER}:{WRONG_SECRET}"
ORDER = {
    "type": "record",
    "name": "AuthOrder",
    "namespace": "com.acme.corpus",
    "fields": [{"name": "orderId", "type": "string"}],
}


# --- unit: the stub registry ---------------------------------------------------------------------
def test_credentials_are_sent_as_basic_auth_and_the_schema_is_found(stub_registry):
    found = SchemaLookup(RegistrySettings(stub_registry.url, RIGHT)).get(STUB_SCHEMA_ID)
    assert (found.schema_id, found.schema_type) == (STUB_SCHEMA_ID, "AVRO")
    assert found.schema == STUB_SCHEMA
    assert stub_registry.authorizations[-1].startswith("Basic ")


@pytest.mark.parametrize("user_info", [None, WRONG], ids=["no credentials", "wrong password"])
def test_refused_credentials_fail_loudly_and_name_401(stub_registry, user_info):
    lookup = SchemaLookup(RegistrySettings(stub_registry.url, user_info))
    with pytest.raises(RegistryUnavailableError, match="401") as refused:
        lookup.get(STUB_SCHEMA_ID)
    assert not secrets_in(str(refused.value))


def test_an_unknown_id_behind_auth_is_missing_not_an_error(stub_registry):
    assert SchemaLookup(RegistrySettings(stub_registry.url, RIGHT)).get(999) is None


def test_credentials_in_the_url_are_moved_to_basic_auth(stub_registry):
    host = stub_registry.url.removeprefix("http://")
    settings = RegistrySettings(f"http://{REGISTRY_USER}:{REGISTRY_SECRET}@{host}")
    assert settings.url == stub_registry.url
    assert settings.basic_auth_user_info == RIGHT
    assert SchemaLookup(settings).get(STUB_SCHEMA_ID).schema == STUB_SCHEMA


def test_credentials_given_twice_are_a_config_error():
    with pytest.raises(ConfigError, match="both in the URL and as basic_auth_user_info") as twice:
        RegistrySettings(f"http://{RIGHT}@registry:8081", WRONG)
    assert not secrets_in(str(twice.value))


# --- integration: Apicurio 3.0.9 with HTTP basic auth --------------------------------------------
@pytest.fixture(scope="module")
def registered_id(authenticated_registry) -> int:
    client = SchemaRegistryClient(
        {"url": authenticated_registry.endpoint, "basic.auth.user.info": RIGHT}
    )
    return client.register_schema("kbqe-auth-order", Schema(json.dumps(ORDER), "AVRO"))


@pytest.mark.integration
def test_apicurio_refuses_requests_without_credentials(authenticated_registry, registered_id):
    """The premise: this registry really enforces auth, so the next test proves something."""
    status, _ = authenticated_registry.request(
        "GET", f"/schemas/ids/{registered_id}", user_info=None
    )
    assert status == 401
    status, body = authenticated_registry.request("GET", f"/schemas/ids/{registered_id}")
    assert status == 200 and json.loads(body["schema"])["name"] == "AuthOrder"


@pytest.mark.integration
def test_schema_lookup_with_basic_auth_reads_apicurio(authenticated_registry, registered_id):
    lookup = SchemaLookup(RegistrySettings(authenticated_registry.endpoint, RIGHT))
    found = lookup.get(registered_id)
    assert found.schema_type == "AVRO"
    assert found.schema["name"] == "AuthOrder"


@pytest.mark.integration
@pytest.mark.parametrize("user_info", [None, WRONG], ids=["no credentials", "wrong password"])
def test_schema_lookup_without_valid_credentials_gets_401_from_apicurio(
    authenticated_registry, registered_id, user_info
):
    lookup = SchemaLookup(RegistrySettings(authenticated_registry.endpoint, user_info))
    with pytest.raises(RegistryUnavailableError, match="401") as refused:
        lookup.get(registered_id)
    assert not secrets_in(str(refused.value))
