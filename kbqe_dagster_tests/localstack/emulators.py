"""The two emulator services for the contract tests, until the session-wide ``local_stack``
fixture (``kbqe_dagster_tests/conftest.py``) exists: when it does, the tests use it; until
then this module starts fake-gcs-server and the BigQuery emulator itself and stops only the
ones it started (by their pid files), leaving a developer's running stack alone.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

import pytest

from kbqe_dagster.localstack.base import LocalService
from kbqe_dagster.localstack.bigquery import BigQueryEmulatorService
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
def emulators(request: pytest.FixtureRequest) -> Iterator[None]:
    try:
        request.getfixturevalue("local_stack")
    except pytest.FixtureLookupError:
        with emulators_running():
            yield
        return
    yield
