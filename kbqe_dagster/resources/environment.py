"""Resources by environment, chosen once from ``KBQE_ENV`` (default ``local``).

``local`` points everything at the local stack (``kbqe stack up``): Kafka on 127.0.0.1, the
Apicurio registry, fake-gcs-server as the staging bucket, the BigQuery emulator and Spark
``local[2]``. ``gcp`` reads every connection from environment variables through
``dg.EnvVar`` so secrets are resolved at run time and never appear in the definitions.
Sensor and asset code never branches on the environment: it only sees these resources.

Which GCS a ``gs://`` staging URL means is decided here, once, for the runs and for every
operator command (``cli/common.py``): :func:`gcs_endpoint_for`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

import dagster as dg
import dagster_gcp

from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.localstack.endpoints import (
    HOST,
    LOCAL_PROJECT,
    LOCAL_STAGING_URL,
    local_endpoints,
)
from kbqe_dagster.packaged import data_file
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.configurable import (
    KafkaResource,
    PipelineResource,
    SchemaRegistryResource,
    StagingResource,
)
from kbqe_dagster.resources.spark import spark_config_from_environment, spark_resource
from kbqe_dagster.resources.staging_store import StagingLocation

ENVIRONMENTS = ("local", "gcp")
STAGING_ENV = "KBQE_STAGING_URL"
GCS_ENDPOINT_ENV = "KBQE_GCS_ENDPOINT"
GCP_PROJECT_ENV = "KBQE_GCP_PROJECT"
GCP_CREDENTIALS_ENV = "KBQE_GCP_CREDENTIALS"
"""dagster-gcp's ``gcp_credentials``: a base64 service account key (``base64 -w0 key.json``)."""
BIGQUERY_LOCATION_ENV = "KBQE_BIGQUERY_LOCATION"
DEFAULT_PIPELINE = data_file("pipeline.yaml")
"""The sample pipeline (``examples/pipeline.yaml`` in a checkout, packaged in a wheel)."""


def current_environment(environ: Mapping[str, str] = os.environ) -> str:
    env = environ.get("KBQE_ENV", "local")
    if env not in ENVIRONMENTS:
        raise ConfigError(f"KBQE_ENV={env!r}: expected one of {', '.join(ENVIRONMENTS)}")
    return env


def pipeline_config_path() -> str:
    return os.environ.get("KBQE_PIPELINE_CONFIG", str(DEFAULT_PIPELINE))


def gcs_endpoint_for(
    env: str, explicit: str | None = None, environ: Mapping[str, str] = os.environ
) -> str | None:
    """The GCS API endpoint a ``gs://`` staging URL is read and written through, for the runs
    and every command of ``env`` alike: ``explicit`` (a command's ``--gcs-endpoint``), else
    ``$KBQE_GCS_ENDPOINT``, else in ``local`` the local stack's fake-gcs-server (so
    ``gs://kbqe-local/<prefix>`` is the emulator's bucket whoever reads it), else ``None``:
    real GCS with Application Default Credentials."""
    if explicit:
        return explicit
    if environ.get(GCS_ENDPOINT_ENV):
        return environ[GCS_ENDPOINT_ENV]
    return local_endpoints().gcs_url if env == "local" else None


def staging_location_for(
    url: str,
    env: str | None = None,
    *,
    gcs_endpoint: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> StagingLocation:
    """Where the staging area ``url`` (``gs://bucket/prefix`` or a directory) lives in ``env``
    (default ``$KBQE_ENV``): a ``gs://`` URL gets the endpoint of :func:`gcs_endpoint_for`
    and the project of the environment (the local stack's, else ``$KBQE_GCP_PROJECT``), and
    in ``gcp`` the runs' credentials (``$KBQE_GCP_CREDENTIALS``, else Application Default)."""
    if not url.startswith("gs://"):
        return StagingLocation(url)
    env = env or current_environment(environ)
    if env == "local":
        return StagingLocation(url, gcs_endpoint_for(env, gcs_endpoint, environ), LOCAL_PROJECT)
    return StagingLocation(
        url,
        gcs_endpoint_for(env, gcs_endpoint, environ),
        environ.get(GCP_PROJECT_ENV) or None,
        environ.get(GCP_CREDENTIALS_ENV) or None,
    )


def local_resources(pipeline: PipelineResource | None = None) -> dict:
    ends = local_endpoints()
    # Spark binds the driver to loopback only; no other address is needed on one machine.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    staging = staging_location_for(os.environ.get(STAGING_ENV, LOCAL_STAGING_URL), "local")
    return {
        "pipeline": pipeline or PipelineResource(config_path=pipeline_config_path()),
        "kafka": KafkaResource(bootstrap_servers=ends.kafka_bootstrap),
        "schema_registry": SchemaRegistryResource(url=ends.registry_url),
        "staging": StagingResource(
            url=staging.url,
            gcs_endpoint=staging.gcs_endpoint,
            gcs_project=staging.gcs_project,
        ),
        "pyspark": spark_resource(spark_config_from_environment("local[2]")),
        # The emulator: anonymous, and its own load path (resources/bigquery/emulator.py).
        "bigquery": BigQueryResource(
            project=LOCAL_PROJECT,
            api_endpoint=ends.bigquery_url,
            anonymous_credentials=True,
            emulator=True,
            # The emulator serves the Storage Write API on its gRPC port, not on the REST one.
            storage_write_endpoint=f"{HOST}:{ends.bigquery_grpc_port}",
        ),
    }


def _optional_env(name: str) -> dg.EnvVar | None:
    """An EnvVar when the variable is set (its value stays out of the definitions), else None."""
    return dg.EnvVar(name) if name in os.environ else None


def gcp_resources(pipeline: PipelineResource | None = None) -> dict:
    """GCP the way any Dagster project configures it: dagster-gcp's resources, their
    ``project``, ``location`` and ``gcp_credentials`` from environment variables (unset
    ``KBQE_GCP_CREDENTIALS``: Application Default Credentials), for BigQuery, its Storage
    Write API and the GCS staging area alike."""
    gcp_project = dg.EnvVar(GCP_PROJECT_ENV)
    credentials = _optional_env(GCP_CREDENTIALS_ENV)
    return {
        "pipeline": pipeline or PipelineResource(config_path=pipeline_config_path()),
        "kafka": KafkaResource(
            bootstrap_servers=dg.EnvVar("KBQE_KAFKA_BOOTSTRAP_SERVERS"),
            security_protocol=_optional_env("KBQE_KAFKA_SECURITY_PROTOCOL"),
            sasl_mechanism=_optional_env("KBQE_KAFKA_SASL_MECHANISM"),
            sasl_username=_optional_env("KBQE_KAFKA_SASL_USERNAME"),
            sasl_password=_optional_env("KBQE_KAFKA_SASL_PASSWORD"),
            ssl_ca_location=_optional_env("KBQE_KAFKA_SSL_CA_LOCATION"),
        ),
        "schema_registry": SchemaRegistryResource(
            url=dg.EnvVar("KBQE_SCHEMA_REGISTRY_URL"),
            basic_auth_user_info=_optional_env("KBQE_SCHEMA_REGISTRY_BASIC_AUTH"),
            ssl_ca_location=_optional_env("KBQE_SCHEMA_REGISTRY_SSL_CA_LOCATION"),
        ),
        # The URL is resolved at run time; the endpoint (real GCS unless KBQE_GCS_ENDPOINT)
        # is the commands' decision too, so runs and commands see one staging area.
        "staging": StagingResource(
            url=dg.EnvVar(STAGING_ENV),
            gcs_project=gcp_project,
            gcp_credentials=credentials,
            gcs_endpoint=gcs_endpoint_for("gcp"),
        ),
        # dagster-gcp's GCS resource, as a Dagster user expects it (for their own assets); the
        # staging store's client is built the same way (resources/staging_store.py).
        "gcs": dagster_gcp.GCSResource(project=gcp_project),
        "pyspark": spark_resource(spark_config_from_environment("local[*]")),
        # dagster-gcp's BigQueryResource (a subclass); load job statistics are the row figures.
        "bigquery": BigQueryResource(
            project=gcp_project,
            location=_optional_env(BIGQUERY_LOCATION_ENV),
            gcp_credentials=credentials,
        ),
    }


def resources_for_environment(
    env: str | None = None, pipeline: PipelineResource | None = None
) -> dict:
    """The resources of ``env`` (default ``KBQE_ENV``); ``pipeline``: the definitions' own
    (the file as they parsed it), else one that reads ``KBQE_PIPELINE_CONFIG``."""
    env = env or current_environment()
    return local_resources(pipeline) if env == "local" else gcp_resources(pipeline)


DAGSTER_HOME_ENV = "DAGSTER_HOME"


def local_dagster_home() -> Path:
    """The local Dagster instance: ``.kbqe-local/dagster_home`` with the packaged dagster.yaml
    (the repository's; ``kbqe demo``, ``kbqe dev`` and ``kbqe run`` without ``$DAGSTER_HOME``)."""
    from kbqe_dagster.localstack.base import stack_home

    home = stack_home() / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(data_file("dagster.yaml"), home / "dagster.yaml")
    return home


def default_dagster_home(env: str) -> str | None:
    """``$DAGSTER_HOME``; for the local stack, the instance ``kbqe demo``/``kbqe dev`` use."""
    home = os.environ.get(DAGSTER_HOME_ENV)
    if home:
        return home
    if env == "local":
        from kbqe_dagster.localstack.base import stack_home

        local = stack_home() / "dagster_home"
        if (local / "dagster.yaml").is_file():
            return str(local)
    return None
