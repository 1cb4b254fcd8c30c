"""google-cloud clients wired to the local stack's emulators, for tests and dev scripts.

Both clients take the emulator address through ``client_options={"api_endpoint": ...}``
with anonymous credentials, not through ``STORAGE_EMULATOR_HOST``: an environment variable
would redirect every storage client of the process, and google-cloud-bigquery has no such
variable at all. google-cloud-storage uses ``api_endpoint`` for the JSON API and for upload
URLs alike (resumable sessions then follow the ``Location`` fake-gcs-server returns, which
is its ``-external-url``).
"""

from __future__ import annotations

from google.auth.credentials import AnonymousCredentials
from google.cloud import bigquery, storage

from kbqe_dagster.localstack.endpoints import LOCAL_PROJECT, LocalEndpoints, local_endpoints


def local_storage_client(endpoints: LocalEndpoints | None = None) -> storage.Client:
    """A storage client talking to fake-gcs-server."""
    ep = endpoints or local_endpoints()
    return storage.Client(
        project=LOCAL_PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": ep.gcs_url},
    )


def local_bigquery_client(endpoints: LocalEndpoints | None = None) -> bigquery.Client:
    """A BigQuery client talking to the BigQuery emulator, in project ``LOCAL_PROJECT``."""
    ep = endpoints or local_endpoints()
    return bigquery.Client(
        project=LOCAL_PROJECT,
        credentials=AnonymousCredentials(),
        client_options={"api_endpoint": ep.bigquery_url},
    )
