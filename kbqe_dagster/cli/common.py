"""What the ``kbqe`` commands share: the command-adder types, where the staging area and the
pipeline file are, the options that name them, and printing a report (``--json`` prints
``report.to_json()``, otherwise a renderer of ``cli/render.py``).

Where things are, each decided here and nowhere else:
- staging area: ``--staging`` > ``KBQE_STAGING_URL`` > with ``KBQE_ENV=local`` (the
  default) the local stack's bucket, with ``gcp`` an error naming ``KBQE_STAGING_URL``; a
  local directory or ``gs://bucket/prefix``. Which GCS a ``gs://`` URL means is the runs'
  decision (``resources/environment.py`` ``gcs_endpoint_for``): ``--gcs-endpoint`` >
  ``KBQE_GCS_ENDPOINT`` > with ``local`` the local stack's emulator, with ``gcp`` real GCS
  (Application Default Credentials, ``KBQE_GCP_PROJECT``);
- pipeline file: ``--config`` > ``KBQE_PIPELINE_CONFIG`` > the sample pipeline
  (``examples/pipeline.yaml``, packaged as ``kbqe_dagster/data/pipeline.yaml``);
- Kafka and the schema registry (``produce-sample``): the options, else the local stack.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kbqe_dagster.core.errors import OperatorCommandError
from kbqe_dagster.localstack.endpoints import LOCAL_STAGING_URL
from kbqe_dagster.packaged import data_file
from kbqe_dagster.resources.staging_store import StagingLocation, StagingStore

SubParsers = Any  # argparse's _SubParsersAction, which has no public name
CommandAdder = Callable[[SubParsers, argparse.ArgumentParser], None]
"""Adds one command group's sub-parsers; each sets ``handler`` to ``(args) -> exit code``."""

STAGING_ENV = "KBQE_STAGING_URL"
GCS_ENDPOINT_ENV = "KBQE_GCS_ENDPOINT"
PIPELINE_ENV = "KBQE_PIPELINE_CONFIG"
DEFAULT_PIPELINE = data_file("pipeline.yaml")


# --- where things are ----------------------------------------------------------------------
def staging_location(
    url: str | None, gcs_endpoint: str | None, environ: Mapping[str, str] = os.environ
) -> StagingLocation:
    """The staging location from the options, else ``$KBQE_STAGING_URL``, else the one of
    the ``KBQE_ENV`` environment (see :func:`environment_staging`). A ``gs://`` location is
    where the runs of the environment find it (``staging_location_for``)."""
    # Lazy: resources/environment.py imports Dagster, which `kbqe --help` need not load.
    from kbqe_dagster.resources.environment import staging_location_for

    url = url or environ.get(STAGING_ENV)
    if not url:
        return environment_staging(gcs_endpoint, environ)
    if url.startswith("gs://"):
        return staging_location_for(url, gcs_endpoint=gcs_endpoint, environ=environ)
    if "://" in url:
        raise OperatorCommandError(
            f"staging location {url!r}: expected a local directory or gs://bucket/prefix"
        )
    if not Path(url).is_dir():
        raise OperatorCommandError(
            f"staging directory {url} does not exist (create it first for a new staging area)"
        )
    return StagingLocation(url)


def environment_staging(
    gcs_endpoint: str | None = None, environ: Mapping[str, str] = os.environ
) -> StagingLocation:
    """The staging area the ``KBQE_ENV`` environment's runs use when no location is named:
    ``local`` (the default) is the local stack's bucket, as for the Dagster runs and
    ``kbqe health``; ``gcp`` has no default, so the error names the variable to set."""
    from kbqe_dagster.resources.environment import current_environment, staging_location_for

    env = current_environment(environ)
    if env != "local":
        raise OperatorCommandError(
            f"no staging location: KBQE_ENV={env} needs {STAGING_ENV} (gs://bucket/prefix) "
            "or --staging"
        )
    return staging_location_for(LOCAL_STAGING_URL, env, gcs_endpoint=gcs_endpoint, environ=environ)


def open_store(args: argparse.Namespace) -> StagingStore:
    return staging_location(args.staging, args.gcs_endpoint).open()


def pipeline_path(args: argparse.Namespace) -> str | Path:
    """The pipeline file the options name: ``--config`` > ``$KBQE_PIPELINE_CONFIG`` > default."""
    return args.config or os.environ.get(PIPELINE_ENV) or DEFAULT_PIPELINE


def pipeline_config(args: argparse.Namespace) -> Any:
    from kbqe_dagster.core.config.pipeline import load_pipeline_config

    return load_pipeline_config(pipeline_path(args))


def now() -> datetime:
    return datetime.now(UTC)


def emit(args: argparse.Namespace, report: Any, render: Callable[[Any], str]) -> None:
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render(report))


# --- options shared by several commands ----------------------------------------------------
def staging_options() -> argparse.ArgumentParser:
    opts = argparse.ArgumentParser(add_help=False)
    opts.add_argument(
        "--staging",
        metavar="URL",
        help=f"staging location: a directory or gs://bucket/prefix "
        f"(default: ${STAGING_ENV}, else with KBQE_ENV=local the local "
        f"stack's {LOCAL_STAGING_URL})",
    )
    opts.add_argument(
        "--gcs-endpoint",
        metavar="URL",
        help=f"GCS emulator endpoint for gs:// locations (default: "
        f"${GCS_ENDPOINT_ENV}, else with KBQE_ENV=local the local stack's "
        "emulator, else real GCS)",
    )
    opts.add_argument("--json", action="store_true", help="print JSON instead of text")
    return opts


def config_option() -> argparse.ArgumentParser:
    opts = argparse.ArgumentParser(add_help=False)
    opts.add_argument(
        "--config",
        metavar="PATH",
        help=f"pipeline file (default: ${PIPELINE_ENV}, else examples/pipeline.yaml)",
    )
    return opts
