"""Resources by environment, chosen once from ``KBQE_ENV`` (default ``local``).

``local`` points everything at the local stack (``kbqe stack up``): Kafka on 127.0.0.1, the
Apicurio registry, fake-gcs-server as the staging bucket, the BigQuery emulator and Spark
``local[2]``. ``gcp`` reads every connection from environment variables through
``dg.EnvVar`` so secrets are resolved at run time and never appear in the definitions.
Sensor and asset code never branches on the environment: it only sees these resources.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import dagster as dg

from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT, local_endpoints
from kbqe_dagster.resources.bigquery import BigQueryResource
from kbqe_dagster.resources.configurable import (
    KafkaResource,
    PipelineResource,
    SchemaRegistryResource,
    StagingResource,
)
from kbqe_dagster.resources.spark import spark_config_from_environment, spark_resource

ENVIRONMENTS = ("local", "gcp")
REPO = Path(__file__).resolve().parents[2]
DEFAULT_PIPELINE = REPO / "examples" / "pipeline.yaml"


def current_environment() -> str:
    env = os.environ.get("KBQE_ENV", "local")
    if env not in ENVIRONMENTS:
        raise ConfigError(f"KBQE_ENV={env!r}: expected one of {', '.join(ENVIRONMENTS)}")
    return env


def pipeline_config_path() -> str:
    return os.environ.get("KBQE_PIPELINE_CONFIG", str(DEFAULT_PIPELINE))


def local_resources(pipeline: PipelineResource | None = None) -> dict:
    ends = local_endpoints()
    # Spark binds the driver to loopback only; no other address is needed on one machine.
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    return {
        "pipeline": pipeline or PipelineResource(config_path=pipeline_config_path()),
        "kafka": KafkaResource(bootstrap_servers=ends.kafka_bootstrap),
        "schema_registry": SchemaRegistryResource(url=ends.registry_url),
        "staging": StagingResource(
            url=os.environ.get("KBQE_STAGING_URL", f"gs://{LOCAL_BUCKET}/staging"),
            gcs_endpoint=ends.gcs_url,
            gcs_project=LOCAL_PROJECT,
        ),
        "pyspark": spark_resource(spark_config_from_environment("local[2]")),
        # The emulator: anonymous, and its own load path (resources/bigquery/emulator.py).
        "bigquery": BigQueryResource(
            project=LOCAL_PROJECT,
            api_endpoint=ends.bigquery_url,
            anonymous_credentials=True,
            emulator=True,
        ),
    }


def _optional_env(name: str) -> dg.EnvVar | None:
    """An EnvVar when the variable is set (its value stays out of the definitions), else None."""
    return dg.EnvVar(name) if name in os.environ else None


def gcp_resources(pipeline: PipelineResource | None = None) -> dict:
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
        "staging": StagingResource(
            url=dg.EnvVar("KBQE_STAGING_URL"), gcs_project=dg.EnvVar("KBQE_GCP_PROJECT")
        ),
        "pyspark": spark_resource(spark_config_from_environment("local[*]")),
        # Application Default Credentials; load job statistics are the row figures.
        "bigquery": BigQueryResource(
            project=dg.EnvVar("KBQE_GCP_PROJECT"),
            location=_optional_env("KBQE_BIGQUERY_LOCATION"),
        ),
    }


def resources_for_environment(env: str | None = None,
                              pipeline: PipelineResource | None = None) -> dict:
    """The resources of ``env`` (default ``KBQE_ENV``); ``pipeline``: the definitions' own
    (the file as they parsed it), else one that reads ``KBQE_PIPELINE_CONFIG``."""
    env = env or current_environment()
    return local_resources(pipeline) if env == "local" else gcp_resources(pipeline)


DAGSTER_HOME_ENV = "DAGSTER_HOME"


def local_dagster_home() -> Path:
    """The local Dagster instance: ``.kbqe-local/dagster_home`` with the repo's dagster.yaml
    (``kbqe demo``, ``kbqe dev`` and ``kbqe run`` without ``$DAGSTER_HOME``)."""
    from kbqe_dagster.localstack.base import stack_home

    home = stack_home() / "dagster_home"
    home.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
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
