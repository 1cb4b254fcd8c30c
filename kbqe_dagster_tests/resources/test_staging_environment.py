"""Which GCS a ``gs://`` staging URL means: one decision (resources/environment.py), taken
alike for the runs' resources and every operator command. In ``local`` it is the local
stack's emulator; in ``gcp`` real GCS unless ``KBQE_GCS_ENDPOINT`` names another; an
explicit endpoint (a command's ``--gcs-endpoint``) wins over both."""

from __future__ import annotations

import pytest

from kbqe_dagster.resources.environment import (
    gcs_endpoint_for,
    local_resources,
    staging_location_for,
)
from kbqe_dagster.resources.staging_store import StagingLocation

EMULATOR = "http://127.0.0.1:14443"


@pytest.fixture(autouse=True)
def default_ports(monkeypatch):
    monkeypatch.delenv("KBQE_LOCAL_GCS_PORT", raising=False)


@pytest.mark.parametrize(
    ("env", "explicit", "environ", "endpoint"),
    [
        ("local", None, {}, EMULATOR),
        ("gcp", None, {}, None),
        ("gcp", None, {"KBQE_GCS_ENDPOINT": "http://env:1"}, "http://env:1"),
        ("local", None, {"KBQE_GCS_ENDPOINT": "http://env:1"}, "http://env:1"),
        ("gcp", "http://opt:2", {"KBQE_GCS_ENDPOINT": "http://env:1"}, "http://opt:2"),
        ("local", "http://opt:2", {}, "http://opt:2"),
        ("gcp", None, {"KBQE_GCS_ENDPOINT": ""}, None),  # set but empty: not an endpoint
    ],
    ids=[
        "local",
        "gcp",
        "gcp-variable",
        "local-variable",
        "gcp-explicit",
        "local-explicit",
        "gcp-empty-variable",
    ],
)
def test_the_gcs_endpoint_of_each_environment(env, explicit, environ, endpoint) -> None:
    assert gcs_endpoint_for(env, explicit, environ) == endpoint


def test_the_local_emulator_follows_a_moved_gcs_port(monkeypatch) -> None:
    monkeypatch.setenv("KBQE_LOCAL_GCS_PORT", "24443")
    assert gcs_endpoint_for("local", None, {}) == "http://127.0.0.1:24443"


@pytest.mark.parametrize(
    ("url", "env", "environ", "expected"),
    [
        (
            "gs://kbqe-local/second",
            "local",
            {},
            StagingLocation("gs://kbqe-local/second", EMULATOR, "kbqe-local"),
        ),
        (
            "gs://acme-staging/kbqe",
            "gcp",
            {"KBQE_GCP_PROJECT": "acme-prod"},
            StagingLocation("gs://acme-staging/kbqe", None, "acme-prod"),
        ),
        ("/data/staging", "local", {}, StagingLocation("/data/staging")),
        (
            "/data/staging",
            "gcp",
            {"KBQE_GCS_ENDPOINT": "http://env:1"},
            StagingLocation("/data/staging"),
        ),
        # The environment itself comes from KBQE_ENV when not given (default local).
        (
            "gs://kbqe-local/second",
            None,
            {},
            StagingLocation("gs://kbqe-local/second", EMULATOR, "kbqe-local"),
        ),
        ("gs://b/p", None, {"KBQE_ENV": "gcp"}, StagingLocation("gs://b/p")),
    ],
)
def test_a_staging_url_in_an_environment(url, env, environ, expected) -> None:
    assert staging_location_for(url, env, environ=environ) == expected


def test_the_local_runs_take_the_same_location_as_the_commands(monkeypatch) -> None:
    monkeypatch.setenv("KBQE_STAGING_URL", "gs://kbqe-local/second-pipeline")
    monkeypatch.delenv("KBQE_GCS_ENDPOINT", raising=False)
    run_side = local_resources()["staging"].location()
    assert run_side == staging_location_for("gs://kbqe-local/second-pipeline", "local")
    assert run_side.gcs_endpoint == EMULATOR
