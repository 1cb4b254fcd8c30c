"""In ``KBQE_ENV=gcp`` GCP is configured as in any Dagster project: the BigQuery and GCS
resources have dagster-gcp's fields and ``get_client()`` (not its classes, whose import costs a
stage run ~110 MB: resources/bigquery/resource.py), their ``project``, ``location`` and
``gcp_credentials`` come from environment variables through ``dg.EnvVar``, and the one service account key (base64, as
dagster-gcp takes it) reaches every Google client: BigQuery, its Storage Write API and the
GCS staging store. Nothing here calls GCP: the clients are built, not used."""

from __future__ import annotations

import base64
import json
import pickle
from pathlib import Path

import dagster as dg
import dagster_gcp
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from dagster._core.remote_representation.external_data import RepositorySnap
from dagster._serdes import serialize_value

from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.definitions import build_definitions
from kbqe_dagster.delivery.tables import TableKeeperSettings
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.bigquery.storage_write import _new_client
from kbqe_dagster.resources.environment import (
    gcp_resources,
    resources_for_environment,
    staging_location_for,
)
from kbqe_dagster.resources.gcp_credentials import credentials_from_base64
from kbqe_dagster.resources.staging_store import GcsStagingStore, StagingLocation

REPO = Path(__file__).resolve().parents[2]
ACCOUNT = "kbqe-loader@acme-prod.iam.gserviceaccount.com"


@pytest.fixture(scope="module")
def key() -> str:
    """A service account key as ``base64 -w0 key.json`` prints it (a fresh RSA key)."""
    pem = (
        rsa.generate_private_key(public_exponent=65537, key_size=2048)
        .private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
        .decode()
    )
    info = {
        "type": "service_account",
        "project_id": "acme-prod",
        "private_key_id": "k1",
        "private_key": pem,
        "client_email": ACCOUNT,
        "client_id": "1",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    return base64.b64encode(json.dumps(info).encode()).decode()


@pytest.fixture
def gcp_env(monkeypatch, key):
    values = {
        "KBQE_GCP_PROJECT": "acme-prod",
        "KBQE_BIGQUERY_LOCATION": "EU",
        "KBQE_GCP_CREDENTIALS": key,
        "KBQE_STAGING_URL": "gs://acme-staging/kbqe",
        "KBQE_KAFKA_BOOTSTRAP_SERVERS": "broker:9093",
        "KBQE_SCHEMA_REGISTRY_URL": "https://registry:8081",
    }
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("KBQE_GCS_ENDPOINT", raising=False)
    return values


def _resolved(resources: dict) -> dg.ConfigurableResource:
    """The resources as an op receives them: EnvVars replaced by their values."""
    with dg.build_resources(resources) as built:
        return built


def test_gcp_resources_have_dagster_gcps_fields_with_their_environment_variables(gcp_env, key):
    resources = gcp_resources()
    # Every field of dagster-gcp's resources means the same here (a user's resource config
    # written for dagster-gcp still applies).
    assert set(dagster_gcp.BigQueryResource.model_fields) <= set(
        type(resources["bigquery"]).model_fields
    )
    assert set(dagster_gcp.GCSResource.model_fields) <= set(type(resources["gcs"]).model_fields)
    # Unresolved, the definitions hold the variables' names, not their values.
    assert resources["bigquery"].gcp_credentials == dg.EnvVar("KBQE_GCP_CREDENTIALS")
    assert resources["bigquery"].project == dg.EnvVar("KBQE_GCP_PROJECT")
    assert resources["gcs"].project == dg.EnvVar("KBQE_GCP_PROJECT")
    assert resources["staging"].gcs_project == dg.EnvVar("KBQE_GCP_PROJECT")

    built = _resolved({"bigquery": resources["bigquery"], "staging": resources["staging"]})
    bigquery, staging = built.bigquery, built.staging
    assert (bigquery.project, bigquery.location, bigquery.gcp_credentials) == (
        "acme-prod",
        "EU",
        key,
    )
    assert not bigquery.emulator and bigquery.api_endpoint is None
    assert staging.location() == StagingLocation("gs://acme-staging/kbqe", None, "acme-prod", key)
    # context.resources.bigquery is our resource, not a client built at resource
    # initialisation (dagster-gcp's default, which would look up credentials in every run).
    assert isinstance(bigquery, BigQueryResource)


def test_without_a_key_every_client_uses_application_default_credentials(gcp_env, monkeypatch):
    monkeypatch.delenv("KBQE_GCP_CREDENTIALS")
    resources = resources_for_environment("gcp")
    built = _resolved({"bigquery": resources["bigquery"], "staging": resources["staging"]})
    assert built.bigquery.gcp_credentials is None
    assert built.bigquery.storage_write_settings().gcp_credentials is None
    assert built.staging.location().gcp_credentials is None
    # The staging store's GCS client is then dagster-gcp's GCSResource's, for its project.
    monkeypatch.setattr(
        dagster_gcp.GCSResource, "get_client", lambda self: _FakeStorageClient(self.project)
    )
    assert GcsStagingStore(built.staging.location()).bucket.client.project == "acme-prod"
    # And so is the one the definitions' gcs resource hands a user's own asset.
    assert _resolved({"gcs": resources["gcs"]}).gcs.get_client().project == "acme-prod"


def test_get_client_yields_a_bigquery_client_as_dagster_gcps_does(gcp_env):
    bigquery = _resolved({"bigquery": gcp_resources()["bigquery"]}).bigquery
    with bigquery.get_client() as client:
        assert type(client).__module__.startswith("google.cloud.bigquery")
        assert (client.project, client.location) == ("acme-prod", "EU")
        assert client._credentials.service_account_email == ACCOUNT


class _FakeStorageClient:
    def __init__(self, project):
        self.project = project

    def bucket(self, name):
        return type("Bucket", (), {"client": self, "name": name})()


def test_the_one_key_reaches_bigquery_storage_write_and_gcs(gcp_env):
    resources = gcp_resources()
    built = _resolved({"bigquery": resources["bigquery"], "staging": resources["staging"]})
    bigquery_client = built.bigquery.client()
    assert bigquery_client.project == "acme-prod"
    assert bigquery_client._credentials.service_account_email == ACCOUNT
    assert bigquery_client.location == "EU"

    settings = built.bigquery.storage_write_settings()
    assert settings.grpc_endpoint is None
    # The settings travel to Spark executors: the key travels with them, and builds there.
    travelled = pickle.loads(pickle.dumps(settings))
    write_client = _new_client(travelled)
    assert write_client._transport._credentials.service_account_email == ACCOUNT

    # The stage task's table keeper (Storage Write tables), rebuilt in the executor.
    keeper_settings = pickle.loads(pickle.dumps(TableKeeperSettings.of(built.bigquery)))
    keeper_client = keeper_settings.keeper().loads.client
    assert keeper_client._credentials.service_account_email == ACCOUNT

    store = GcsStagingStore(pickle.loads(pickle.dumps(built.staging.location())))
    assert store.bucket.client._credentials.service_account_email == ACCOUNT
    assert store.bucket.client.project == "acme-prod"
    assert store.bucket.name == "acme-staging"


def test_operator_commands_read_the_same_key(gcp_env, key):
    location = staging_location_for("gs://acme-staging/kbqe", "gcp")
    assert location == StagingLocation("gs://acme-staging/kbqe", None, "acme-prod", key)
    local = staging_location_for("gs://kbqe-local/x", "local")
    assert local.gcp_credentials is None  # the emulator is anonymous


def test_the_metrics_exporter_resolves_the_same_resources(gcp_env, key):
    """``kbqe metrics serve`` / ``kbqe health`` resolve the resources outside any run."""
    from kbqe_dagster.observability.sources import sources_from_environment

    sources = sources_from_environment("gcp")
    assert sources.staging == StagingLocation("gs://acme-staging/kbqe", None, "acme-prod", key)
    assert (sources.bigquery.project, sources.bigquery.gcp_credentials) == ("acme-prod", key)


def test_the_key_is_in_no_repr_and_not_in_the_definitions(gcp_env, key):
    built = _resolved(
        {"bigquery": gcp_resources()["bigquery"], "staging": gcp_resources()["staging"]}
    )
    shown = " ".join(
        repr(x)
        for x in (
            built.bigquery,
            built.staging,
            built.staging.location(),
            built.bigquery.storage_write_settings(),
            TableKeeperSettings.of(built.bigquery),
        )
    )
    assert "acme-prod" in shown  # control: the resolved settings are what is shown
    assert key not in shown and key[:40] not in shown
    defs = build_definitions(str(REPO / "examples" / "pipeline.yaml"), env="gcp")
    snapshot = serialize_value(RepositorySnap.from_def(defs.get_repository_def()))
    assert "KBQE_GCP_CREDENTIALS" in snapshot
    assert key[:40] not in snapshot


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("not base64 at all!", "does not decode"),
        (base64.b64encode(b"{not json").decode(), "does not decode"),
        (
            base64.b64encode(json.dumps({"type": "authorized_user"}).encode()).decode(),
            "not a service account key",
        ),
        (
            base64.b64encode(json.dumps({"type": "service_account"}).encode()).decode(),
            "not a usable service account key",
        ),
    ],
    ids=["not-base64", "not-json", "user-credentials", "incomplete-key"],
)
def test_a_bad_key_is_refused_without_showing_it(value, message):
    with pytest.raises(ConfigError, match=message) as refused:
        credentials_from_base64(value)
    assert "gcp_credentials" in str(refused.value)
    assert value not in str(refused.value)


def test_no_key_means_application_default_credentials():
    assert credentials_from_base64(None) is None
    assert credentials_from_base64("") is None


def test_the_local_stack_keeps_its_emulators():
    local = resources_for_environment("local")
    bigquery = local["bigquery"]
    assert isinstance(bigquery, BigQueryResource)
    assert (bigquery.emulator, bigquery.anonymous_credentials, bigquery.gcp_credentials) == (
        True,
        True,
        None,
    )
    assert "gcs" not in local and local["staging"].gcs_endpoint
