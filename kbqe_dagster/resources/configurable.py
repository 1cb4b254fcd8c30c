"""Dagster resources: typed, configured per environment in ``defs/resources.py``.

Each resource is a thin, picklable description of a connection that hands out the plain
settings objects the stage and load code uses (those travel to Spark executors). Secrets
arrive through ``dg.EnvVar`` fields, or through ``client_config_variables`` (any client
property, named by the environment variable that holds it and read the same way when the
settings are built), and are never logged (the settings objects redact them).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

import dagster as dg
from pydantic import Field

from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings, property_value
from kbqe_dagster.resources.staging_store import StagingLocation, StagingStore


class StagingResource(dg.ConfigurableResource):
    """The staging area: ``gs://bucket/prefix`` or a local directory. On GCP the client is
    dagster-gcp's ``GCSResource``'s (resources/staging_store.py), for ``gcs_project`` (the
    project of the definitions' ``gcs`` resource), with dagster-gcp's ``gcp_credentials``
    convention: the bigquery resource's key (resources/gcp_credentials.py). Not a nested
    ``GCSResource`` field: a nested resource makes this one a generator, which every sensor,
    check and op test would then have to open as a context manager for a project name."""

    url: str = Field(description="gs://bucket/prefix, or a local directory path.")
    gcs_endpoint: str | None = Field(
        default=None, description="GCS API endpoint override (the local fake-gcs-server)."
    )
    gcs_project: str | None = Field(default=None, description="GCP project for the GCS client.")
    gcp_credentials: str | None = Field(  # repr=False: see KafkaResource.sasl_password
        default=None,
        repr=False,
        description="Base64-encoded service account JSON key, through dg.EnvVar; None: "
        "Application Default Credentials. Never logged.",
    )

    def location(self) -> StagingLocation:
        return StagingLocation(self.url, self.gcs_endpoint, self.gcs_project, self.gcp_credentials)

    def store(self) -> StagingStore:
        return self.location().open()


_VARIABLES_DOC = (
    "{client property: environment variable}: each property's value is read from its "
    "variable whenever the settings are built (a run, a sensor tick, an operator command), as "
    "a dg.EnvVar is resolved: the definitions hold the variables' names, never their values. "
    "resources/environment.py fills it from the KBQE_*_CONF_<name> variables."
)


def _from_variables(what: str, variables: Mapping[str, str], given: Mapping[str, object]) -> dict:
    """The values of ``variables`` (``{property: variable}``) in this process's environment;
    ``given``: the properties the resource's own fields set, which no variable may set too."""
    values = {}
    for prop, variable in variables.items():
        if given.get(prop):
            raise ConfigError(
                f"{what}: the property {prop} is set both by a field of the resource and by "
                f"{variable}; set it once"
            )
        value = os.environ.get(variable)
        if value is None:
            raise ConfigError(
                f"{what}: {variable} (the property {prop}) is not set in this process; it was "
                "when the definitions were loaded"
            )
        values[prop] = value
    return values


class KafkaResource(dg.ConfigurableResource):
    """A Kafka cluster: its named SASL/SSL fields, and any librdkafka property through
    ``client_config_variables`` (client certificates, OAUTHBEARER, ...)."""

    bootstrap_servers: str = Field(description="host:port[,host:port...]")
    security_protocol: str | None = Field(default=None, description="PLAINTEXT, SSL, SASL_SSL, ...")
    sasl_mechanism: str | None = Field(default=None, description="PLAIN, SCRAM-SHA-512, ...")
    sasl_username: str | None = Field(default=None, description="Use dg.EnvVar.")
    # repr=False: once Dagster resolves the EnvVar, the resource holds the secret itself, and
    # pydantic's repr (what a log line or an error shows) would print it.
    sasl_password: str | None = Field(
        default=None, repr=False, description="Use dg.EnvVar; never logged."
    )
    ssl_ca_location: str | None = Field(default=None, description="CA bundle path for SSL.")
    client_config_variables: dict[str, str] = Field(
        default_factory=dict, description="librdkafka properties: " + _VARIABLES_DOC
    )

    def settings(self) -> KafkaSettings:
        named = {
            "security.protocol": self.security_protocol,
            "sasl.mechanism": self.sasl_mechanism,
            "sasl.username": self.sasl_username,
            "sasl.password": self.sasl_password,
            "ssl.ca.location": self.ssl_ca_location,
        }
        config = {k: v for k, v in named.items() if v}
        config.update(_from_variables("Kafka", self.client_config_variables, named))
        return KafkaSettings(self.bootstrap_servers, config)


class SchemaRegistryResource(dg.ConfigurableResource):
    """A Confluent-compatible schema registry (Confluent, Apicurio ccompat, Karapace, ...)."""

    url: str = Field(description="Registry root, e.g. http://host:8081 or .../apis/ccompat/v7")
    basic_auth_user_info: str | None = Field(  # repr=False: see KafkaResource.sasl_password
        default=None, repr=False, description="user:password, through dg.EnvVar; never logged."
    )
    ssl_ca_location: str | None = Field(default=None, description="CA bundle path for TLS.")
    client_config_variables: dict[str, str] = Field(
        default_factory=dict,
        description="SchemaRegistryClient properties (ssl.certificate.location, "
        "ssl.key.location, ssl.key.password, ...): " + _VARIABLES_DOC,
    )

    def settings(self) -> RegistrySettings:
        # The properties RegistrySettings holds in fields of its own may come from a variable
        # too (KBQE_SCHEMA_REGISTRY_CONF_SSL_CA_LOCATION): they go to their field.
        own: dict[str, str | None] = {
            "url": self.url,
            "basic.auth.user.info": self.basic_auth_user_info,
            "ssl.ca.location": self.ssl_ca_location,
        }
        properties = []
        variables = _from_variables("schema registry", self.client_config_variables, own)
        for prop, text in variables.items():
            if prop in own:
                own[prop] = text
            else:
                properties.append((prop, property_value(prop, text)))
        return RegistrySettings(
            self.url,
            own["basic.auth.user.info"],
            own["ssl.ca.location"],
            client_properties=tuple(sorted(properties)),
        )


class PipelineResource(dg.ConfigurableResource):
    """The pipeline configuration (topics, routing, event time, policies, knobs).

    Built by the definitions with ``content``, the file's text as it was parsed when the code
    location loaded: every sensor tick, op and check of one load of the definitions then sees
    the pipeline its assets, checks and schedules were built from. An edited file takes
    effect when the code location is reloaded, all at once, never in the sensors first. So
    do the topics ``topic_patterns`` found in Kafka then (``discovered_topics``); the backlog
    sensor alone also looks for new ones at every tick (defs/staging/sensors.py).
    Without ``content`` (a resource built by hand), the file is read at each ``load()``."""

    config_path: str = Field(description="Path of the pipeline YAML file.")
    content: str | None = Field(
        default=None,
        description="The file's text as parsed when the definitions loaded (see the class doc).",
    )
    discovered_topics: list[str] | None = Field(
        default=None,
        description="The topics the file's topic_patterns took in Kafka when the definitions "
        "loaded (core/config/discovery.py): load() returns them among the topics, as if listed.",
    )

    def setup_for_execution(self, context: dg.InitResourceContext) -> None:
        # In a run's worker (every kbqe job's ops read this resource): tag the run with the
        # worker's identity, so that run monitoring can tell a worker that died unseen
        # (kbqe_dagster/run_launcher.py). Outside a run (sensors, checks) there is no run id.
        from kbqe_dagster.run_launcher import record_run_worker

        record_run_worker(context.instance, context.run.run_id if context.run else None)

    def load(self):
        from kbqe_dagster.core.config.pipeline import load_pipeline_config, parse_pipeline_text

        if self.content is not None:
            config = parse_pipeline_text(self.content, source=self.config_path)
        else:
            config = load_pipeline_config(self.config_path)
        return config.discover(self.discovered_topics) if self.discovered_topics else config


class GCSResource(dg.ConfigurableResource):
    """dagster-gcp's ``GCSResource`` as the definitions carry it (``gcs``, for a user's own
    assets): the same ``project`` field, and ``get_client()`` is dagster-gcp's, imported when
    called. Not dagster-gcp's class itself: importing ``dagster_gcp`` costs every process
    that loads the definitions ~110 MB (resources/bigquery/resource.py), a stage run's
    included, which never uses this resource."""

    project: str | None = Field(default=None, description="GCP project of the client.")

    def get_client(self) -> Any:
        """A ``google.cloud.storage.Client``, built by dagster-gcp's ``GCSResource``."""
        import dagster_gcp

        return dagster_gcp.GCSResource(project=self.project).get_client()
