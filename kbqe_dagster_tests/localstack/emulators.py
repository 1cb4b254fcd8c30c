"""Only the two emulator services, for tests that need GCS and BigQuery but no Kafka: it
starts fake-gcs-server and the BigQuery emulator when they are not running and stops only
the ones it started (by their pid files), leaving a developer's running stack — or the
session's ``local_stack`` — alone. Starting the whole stack for these tests would cost two
JVMs and fail whenever another process holds a Kafka port.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from google.cloud import bigquery, storage

from kbqe_dagster.localstack.base import LocalService
from kbqe_dagster.localstack.bigquery import BigQueryEmulatorService
from kbqe_dagster.localstack.clients import local_bigquery_client, local_storage_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET
from kbqe_dagster.localstack.gcs import GcsService


@contextmanager
def emulators_running() -> Iterator[None]:
    started: list[LocalService] = []
    try:
        for service in (GcsService(), BigQueryEmulatorService()):
            if service.pid() is None:
                started.append(service)
            service.up()
        yield
    finally:
        for service in reversed(started):
            service.down()


@pytest.fixture(scope="module")
def emulators() -> Iterator[None]:
    with emulators_running():
        yield


@pytest.fixture(scope="module")
def bq(emulators: None) -> bigquery.Client:
    """A client of the BigQuery emulator."""
    return local_bigquery_client()


@pytest.fixture(scope="module")
def bucket(emulators: None) -> storage.Bucket:
    """The local stack's bucket on fake-gcs-server."""
    return local_storage_client().bucket(LOCAL_BUCKET)


@contextmanager
def emulator_dataset(bq: bigquery.Client, bucket: storage.Bucket, prefix: str) -> Iterator[str]:
    """A new dataset ``<prefix>_<random>`` on the BigQuery emulator, dropped afterwards with
    the objects its test staged under ``gs://<bucket>/<dataset>/``."""
    name = f"{prefix}_{uuid.uuid4().hex[:10]}"
    bq.create_dataset(name)
    try:
        yield name
    finally:
        bq.delete_dataset(name, delete_contents=True, not_found_ok=True)
        for blob in bucket.list_blobs(prefix=f"{name}/"):
            blob.delete()
