"""The Dagster resource that hands out BigQuery clients, the load interface and the Storage
Write API's settings.

It has dagster-gcp's ``BigQueryResource`` fields and ``get_client()``: ``project``,
``location`` and ``gcp_credentials`` mean what they mean in any Dagster project, and
``get_client()`` works for a user's own assets. What it adds: the load interface (job ids, 409
handling), the local emulator's variant and the Storage Write API's settings, all with the
same credentials.

It is not dagster-gcp's class (a subclass was until issue 42): importing ``dagster_gcp``
imports google-cloud-bigquery, google-cloud-storage, the Dataproc API client and, through
BigQuery's read client, pandas, numpy and pyarrow, ~110 MB of every process that loads the
definitions, a stage run's included, which uses none of them. Google's clients are imported
here when a client is built (``client()``), in the runs and commands that talk to BigQuery."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import dagster as dg
from pydantic import Field

from kbqe_dagster.core.errors import LoadError, StorageWriteError
from kbqe_dagster.resources.bigquery.emulator import EmulatorBigQueryLoads
from kbqe_dagster.resources.bigquery.erasure_tables import EmulatorErasureTables, ErasureTables
from kbqe_dagster.resources.bigquery.google_client import GoogleBigQueryLoads
from kbqe_dagster.resources.bigquery.storage_write import StorageWriter, StorageWriteSettings
from kbqe_dagster.resources.gcp_credentials import credentials_from_base64


class BigQueryResource(dg.ConfigurableResource):
    """BigQuery for load jobs and checks. On GCP: dagster-gcp's ``project``, ``location`` and
    ``gcp_credentials`` (base64 service account key; unset: Application Default Credentials).
    The local stack points ``api_endpoint`` at the emulator with anonymous credentials and
    sets ``emulator``."""

    # Required here (optional in dagster-gcp): job ids, tables and streams are named in it.
    project: str = Field(description="GCP project that runs the load jobs and owns the datasets.")
    location: str | None = Field(
        default=None, description="Default location for jobs, datasets and tables (dagster-gcp's)."
    )
    # repr=False: once Dagster resolves the EnvVar the resource holds the key itself.
    gcp_credentials: str | None = Field(
        default=None,
        repr=False,
        description="Base64-encoded service account JSON key, through dg.EnvVar (dagster-gcp's "
        "convention); None: Application Default Credentials. Never logged.",
    )
    api_endpoint: str | None = Field(
        default=None, description="API endpoint override: the local BigQuery emulator."
    )
    anonymous_credentials: bool = Field(
        default=False, description="No credentials at all (the local emulator only)."
    )
    emulator: bool = Field(
        default=False,
        description=(
            "The endpoint is the local BigQuery emulator: loads take its path, which rebuilds "
            "BigQuery's behaviour where the emulator differs (columns by name, field addition, "
            "rows appended; resources/bigquery/emulator.py). Local stack only."
        ),
    )
    storage_write_endpoint: str | None = Field(
        default=None,
        description=(
            "``host:port`` of the local emulator's gRPC port, where the Storage Write API is "
            "reached over an insecure channel, anonymously. None: BigQuery's own endpoint "
            "with Application Default Credentials. Local stack only."
        ),
    )
    max_bytes_billed: int = Field(
        default=10 * 1024**3,
        description="Cap on the bytes billed by the opt-in duplicate-offset check query.",
    )

    @contextmanager
    def get_client(self) -> Iterator[Any]:
        """A ``google.cloud.bigquery.Client``, as dagster-gcp's ``get_client()`` yields one (for
        a user's own assets): built by :meth:`client`, the key passed to it, not written to a
        temporary ``GOOGLE_APPLICATION_CREDENTIALS`` file."""
        yield self.client()

    def client(self) -> Any:
        from google.cloud import bigquery

        options: dict[str, Any] = {"project": self.project, "location": self.location}
        if self.anonymous_credentials:
            from google.auth.credentials import AnonymousCredentials

            options["credentials"] = AnonymousCredentials()
        elif self.gcp_credentials:
            # dagster-gcp's get_client() swaps GOOGLE_APPLICATION_CREDENTIALS process-wide for
            # this (resources/gcp_credentials.py); the same key, passed to the client instead.
            options["credentials"] = credentials_from_base64(self.gcp_credentials)
        if self.api_endpoint:
            options["client_options"] = {"api_endpoint": self.api_endpoint}
        return bigquery.Client(**options)

    def storage_write_settings(self) -> StorageWriteSettings:
        """How a stage task reaches the Storage Write API: picklable, so the task builds its
        writer in the executor (``.writer()``); the writer itself never travels."""
        if not self.project:
            raise StorageWriteError("the bigquery resource needs a project")
        return StorageWriteSettings(
            project=self.project,
            grpc_endpoint=self.storage_write_endpoint,
            gcp_credentials=self.gcp_credentials,
        )

    def storage_writer(self) -> StorageWriter:
        """A Storage Write API client on the driver (tests, operator commands)."""
        return self.storage_write_settings().writer()

    def loads(self) -> GoogleBigQueryLoads:
        if not self.project:
            raise LoadError("the bigquery resource needs a project")
        kind = EmulatorBigQueryLoads if self.emulator else GoogleBigQueryLoads
        return kind(self.client(), location=self.location, max_bytes_billed=self.max_bytes_billed)

    def erasure_tables(self) -> ErasureTables:
        """BigQuery's side of an erasure (resources/bigquery/erasure_tables.py)."""
        if not self.project:
            raise LoadError("the bigquery resource needs a project")
        kind = EmulatorErasureTables if self.emulator else ErasureTables
        return kind(self.client(), location=self.location)
