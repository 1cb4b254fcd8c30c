"""The Dagster resource that hands out BigQuery clients and the load interface."""

from __future__ import annotations

from typing import Any

import dagster as dg
from pydantic import Field

from kbqe_dagster.core.errors import LoadError
from kbqe_dagster.resources.bigquery.emulator import EmulatorBigQueryLoads
from kbqe_dagster.resources.bigquery.google_client import GoogleBigQueryLoads


class BigQueryResource(dg.ConfigurableResource):
    """BigQuery for load jobs and checks. Production uses Application Default Credentials;
    the local stack points ``api_endpoint`` at the emulator with anonymous credentials and
    sets ``emulator``."""

    project: str = Field(description="GCP project that runs the load jobs and owns the datasets.")
    location: str | None = Field(
        default=None, description="Dataset and job location (US, EU, europe-west1, ...)."
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
    max_bytes_billed: int = Field(
        default=10 * 1024**3,
        description="Cap on the bytes billed by the opt-in duplicate-offset check query.",
    )

    def client(self) -> Any:
        from google.cloud import bigquery

        options: dict[str, Any] = {"project": self.project, "location": self.location}
        if self.anonymous_credentials:
            from google.auth.credentials import AnonymousCredentials

            options["credentials"] = AnonymousCredentials()
        if self.api_endpoint:
            options["client_options"] = {"api_endpoint": self.api_endpoint}
        return bigquery.Client(**options)

    def loads(self) -> GoogleBigQueryLoads:
        if not self.project:
            raise LoadError("the bigquery resource needs a project")
        kind = EmulatorBigQueryLoads if self.emulator else GoogleBigQueryLoads
        return kind(self.client(), location=self.location,
                    max_bytes_billed=self.max_bytes_billed)
