"""Resources by environment, chosen once from ``KBQE_ENV`` (default ``local``).

``local`` points everything at the local stack (``kbqe stack up``): Kafka on 127.0.0.1, the
Apicurio registry, fake-gcs-server as the staging bucket, the BigQuery emulator and Spark
``local[2]``. ``gcp`` reads every connection from environment variables through
``dg.EnvVar`` so secrets are resolved at run time and never appear in the definitions.
Sensor and asset code never branches on the environment: it only sees these resources.

Which GCS a ``gs://`` staging URL means is decided here, once, for the runs and for every
operator command (``cli/common.py``): :func:`gcs_endpoint_for`. So is how Kafka and the
registry authenticate, in both environments: the named variables (``KBQE_KAFKA_SASL_*``, ...)
and any client property as ``KBQE_KAFKA_CONF_<name>`` / ``KBQE_SCHEMA_REGISTRY_CONF_<name>``
(``core/client_properties.py``): :func:`kafka_resource`, :func:`registry_resource`.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import dagster as dg

from kbqe_dagster.core.client_properties import (
    KAFKA_CONF_PREFIX,
    REGISTRY_CONF_PREFIX,
    property_variables,
)
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
    GCSResource,
    KafkaResource,
    PipelineResource,
    SchemaRegistryResource,
    StagingResource,
)
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.spark import (
    is_local_master,
    refuse_local_staging_on_a_cluster,
    spark_config_from_environment,
    spark_resource,
)
from kbqe_dagster.resources.staging_store import StagingLocation

ENVIRONMENTS = ("local", "gcp")
STAGING_ENV = "KBQE_STAGING_URL"
GCS_ENDPOINT_ENV = "KBQE_GCS_ENDPOINT"
GCP_PROJECT_ENV = "KBQE_GCP_PROJECT"
GCP_CREDENTIALS_ENV = "KBQE_GCP_CREDENTIALS"
"""dagster-gcp's ``gcp_credentials``: a base64 service account key (``base64 -w0 key.json``)."""
BIGQUERY_LOCATION_ENV = "KBQE_BIGQUERY_LOCATION"
KAFKA_BOOTSTRAP_ENV = "KBQE_KAFKA_BOOTSTRAP_SERVERS"
REGISTRY_URL_ENV = "KBQE_SCHEMA_REGISTRY_URL"
KAFKA_VARIABLES = {
    "KBQE_KAFKA_SECURITY_PROTOCOL": "security.protocol",
    "KBQE_KAFKA_SASL_MECHANISM": "sasl.mechanism",
    "KBQE_KAFKA_SASL_USERNAME": "sasl.username",
    "KBQE_KAFKA_SASL_PASSWORD": "sasl.password",
    "KBQE_KAFKA_SSL_CA_LOCATION": "ssl.ca.location",
}
"""The named Kafka variables and the librdkafka property each sets (the resource field of the
same name with ``_`` for ``.``); any other property is ``KBQE_KAFKA_CONF_<name>``."""
REGISTRY_VARIABLES = {
    "KBQE_SCHEMA_REGISTRY_BASIC_AUTH": "basic.auth.user.info",
    "KBQE_SCHEMA_REGISTRY_SSL_CA_LOCATION": "ssl.ca.location",
}
"""The named registry variables; any other client property is
``KBQE_SCHEMA_REGISTRY_CONF_<name>`` (``SSL_CERTIFICATE_LOCATION``, ``SSL_KEY_LOCATION``,
``SSL_KEY_PASSWORD`` for a client certificate)."""
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
    spark = spark_config_from_environment("local[2]")
    if is_local_master(spark["spark.master"]):
        # Spark binds the driver to loopback only; no other address is needed on one machine.
        # A cluster's executors must reach the driver: its address is then Spark's choice.
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    staging_url = os.environ.get(STAGING_ENV, LOCAL_STAGING_URL)
    refuse_local_staging_on_a_cluster(spark["spark.master"], staging_url)
    staging = staging_location_for(staging_url, "local")
    return {
        "pipeline": pipeline or PipelineResource(config_path=pipeline_config_path()),
        "kafka": kafka_resource(ends.kafka_bootstrap),
        "schema_registry": registry_resource(ends.registry_url),
        "staging": StagingResource(
            url=staging.url,
            gcs_endpoint=staging.gcs_endpoint,
            gcs_project=staging.gcs_project,
        ),
        "pyspark": spark_resource(spark),
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


def kafka_resource(
    bootstrap_servers: str | dg.EnvVar, environ: Mapping[str, str] = os.environ
) -> KafkaResource:
    """Kafka at ``bootstrap_servers``, authenticated as the environment says, in either
    environment: the named ``KBQE_KAFKA_*`` variables as the resource's fields (through
    ``dg.EnvVar``), every ``KBQE_KAFKA_CONF_<name>`` as a property read from its variable
    when a client is built. Two variables for one property are a ConfigError naming both.
    The properties reach every client: the stage tasks (``KafkaSettings`` travels to the
    executors), the sensors, the runner and the operator commands, which all build their
    settings from this resource; kbqe's own consumer settings (``read_committed``, no
    commits, ``clients.consumer_config``) still win over any of them."""
    variables = property_variables(
        environ,
        KAFKA_CONF_PREFIX,
        KAFKA_VARIABLES,
        reserved={"bootstrap.servers": f"{KAFKA_BOOTSTRAP_ENV} (local: the local stack's)"},
    )
    return KafkaResource(
        bootstrap_servers=bootstrap_servers,
        **_named_fields(variables, KAFKA_VARIABLES),
        client_config_variables=_unnamed(variables, KAFKA_VARIABLES),
    )


def registry_resource(
    url: str | dg.EnvVar, environ: Mapping[str, str] = os.environ
) -> SchemaRegistryResource:
    """The schema registry at ``url``, authenticated as the environment says (both
    environments): ``KBQE_SCHEMA_REGISTRY_BASIC_AUTH`` and ``_SSL_CA_LOCATION`` through
    ``dg.EnvVar``, any client property as ``KBQE_SCHEMA_REGISTRY_CONF_<name>`` (a client
    certificate: ``SSL_CERTIFICATE_LOCATION``, ``SSL_KEY_LOCATION``, ``SSL_KEY_PASSWORD``)."""
    variables = property_variables(
        environ,
        REGISTRY_CONF_PREFIX,
        REGISTRY_VARIABLES,
        reserved={"url": f"{REGISTRY_URL_ENV} (local: the local stack's)"},
    )
    return SchemaRegistryResource(
        url=url,
        **_named_fields(variables, REGISTRY_VARIABLES),
        client_config_variables=_unnamed(variables, REGISTRY_VARIABLES),
    )


def _named_fields(variables: Mapping[str, str], named: Mapping[str, str]) -> dict:
    """The named variables among ``variables`` (``{property: variable}``) as resource fields:
    each property's field is its name with ``_`` for ``.``, its value the variable's EnvVar."""
    return {p.replace(".", "_"): dg.EnvVar(v) for p, v in variables.items() if v in named}


def _unnamed(variables: Mapping[str, str], named: Mapping[str, str]) -> dict[str, str]:
    return {p: v for p, v in variables.items() if v not in named}


R = TypeVar("R", bound=dg.ConfigurableResource)


def resolved(resource: R) -> R:
    """A copy of ``resource`` whose ``dg.EnvVar`` fields hold their values (Dagster resolves
    them only inside a run; an operator command runs outside any), nested resources resolved
    alike."""
    fields = {}
    for name in type(resource).model_fields:
        value = getattr(resource, name)
        if isinstance(value, dg.ConfigurableResource):
            value = resolved(value)
        fields[name] = value.get_value() if isinstance(value, dg.EnvVar) else value
    return type(resource)(**fields)


def kafka_settings_for(
    bootstrap_servers: str | None = None,
    env: str | None = None,
    environ: Mapping[str, str] = os.environ,
) -> KafkaSettings:
    """The Kafka settings the runs of ``env`` (default ``KBQE_ENV``) use, for an operator
    command outside a run: ``bootstrap_servers`` (a command's ``--bootstrap-servers``) in
    place of the environment's, with the same authentication."""
    env = env or current_environment(environ)
    if not bootstrap_servers:
        bootstrap_servers = (
            local_endpoints().kafka_bootstrap
            if env == "local"
            else environ.get(KAFKA_BOOTSTRAP_ENV)
        )
    if not bootstrap_servers:
        raise ConfigError(f"{KAFKA_BOOTSTRAP_ENV} is not set (or give --bootstrap-servers)")
    return resolved(kafka_resource(bootstrap_servers, environ)).settings()


def gcp_resources(pipeline: PipelineResource | None = None) -> dict:
    """GCP the way any Dagster project configures it: dagster-gcp's resources, their
    ``project``, ``location`` and ``gcp_credentials`` from environment variables (unset
    ``KBQE_GCP_CREDENTIALS``: Application Default Credentials), for BigQuery, its Storage
    Write API and the GCS staging area alike."""
    gcp_project = dg.EnvVar(GCP_PROJECT_ENV)
    credentials = _optional_env(GCP_CREDENTIALS_ENV)
    spark = spark_config_from_environment("local[*]")
    refuse_local_staging_on_a_cluster(spark["spark.master"], os.environ.get(STAGING_ENV))
    return {
        "pipeline": pipeline or PipelineResource(config_path=pipeline_config_path()),
        "kafka": kafka_resource(dg.EnvVar(KAFKA_BOOTSTRAP_ENV)),
        "schema_registry": registry_resource(dg.EnvVar(REGISTRY_URL_ENV)),
        # The URL is resolved at run time; the endpoint (real GCS unless KBQE_GCS_ENDPOINT)
        # is the commands' decision too, so runs and commands see one staging area.
        "staging": StagingResource(
            url=dg.EnvVar(STAGING_ENV),
            gcs_project=gcp_project,
            gcp_credentials=credentials,
            gcs_endpoint=gcs_endpoint_for("gcp"),
        ),
        # dagster-gcp's GCS resource's field and client, as a Dagster user expects them (for
        # their own assets); the staging store's client is built the same way
        # (resources/staging_store.py).
        "gcs": GCSResource(project=gcp_project),
        "pyspark": spark_resource(spark),
        # dagster-gcp's BigQueryResource's fields; load job statistics are the row figures.
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
