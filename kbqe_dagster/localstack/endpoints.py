"""Ports and URLs of the local stack — one place, read by the stack scripts and by the
``local`` environment's resources. Overridable with ``KBQE_LOCAL_<NAME>_PORT`` when a default
port is taken on a developer machine; read when called, never at import time."""

from __future__ import annotations

import os
from dataclasses import dataclass

HOST = "127.0.0.1"
LOCAL_BUCKET = "kbqe-local"
LOCAL_PROJECT = "kbqe-local"
LOCAL_STAGING_URL = f"gs://{LOCAL_BUCKET}/staging"


def _port(name: str, default: int) -> int:
    return int(os.environ.get(f"KBQE_LOCAL_{name}_PORT", default))


@dataclass(frozen=True)
class LocalEndpoints:
    kafka_port: int
    kafka_controller_port: int
    registry_port: int
    gcs_port: int
    bigquery_port: int
    bigquery_grpc_port: int
    # The on-demand services (``kbqe stack up postgres connect``), never started by default.
    postgres_port: int = 15432
    connect_port: int = 18083

    @property
    def kafka_bootstrap(self) -> str:
        return f"{HOST}:{self.kafka_port}"

    @property
    def registry_url(self) -> str:
        """Apicurio's Confluent-compatible API root (what confluent-kafka's client wants)."""
        return f"http://{HOST}:{self.registry_port}/apis/ccompat/v7"

    @property
    def gcs_url(self) -> str:
        return f"http://{HOST}:{self.gcs_port}"

    @property
    def bigquery_url(self) -> str:
        return f"http://{HOST}:{self.bigquery_port}"

    @property
    def connect_url(self) -> str:
        """The Kafka Connect worker's REST API root."""
        return f"http://{HOST}:{self.connect_port}"


def local_endpoints() -> LocalEndpoints:
    return LocalEndpoints(
        kafka_port=_port("KAFKA", 19092),
        kafka_controller_port=_port("KAFKA_CONTROLLER", 19093),
        registry_port=_port("REGISTRY", 18081),
        gcs_port=_port("GCS", 14443),
        bigquery_port=_port("BIGQUERY", 19050),
        bigquery_grpc_port=_port("BIGQUERY_GRPC", 19060),
        postgres_port=_port("POSTGRES", 15432),
        connect_port=_port("CONNECT", 18083),
    )
