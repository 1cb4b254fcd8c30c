"""Operator commands of ``kbqe`` over a staging area: ``staging status``, ``load plan``,
``load release``, ``retention plan``, ``bootstrap``, ``dead-letters`` and ``produce-sample``.

This module registers them (see :data:`OPERATOR_COMMANDS`, appended to ``cli.COMMANDS``),
resolves where the staging area, the pipeline file and the local services are, and prints
the reports of ``kbqe_dagster/operations/``: ``--json`` prints ``report.to_json()``,
otherwise ``cli_render`` formats them for a terminal. Results go to stdout; errors are
raised as :class:`KbqeError` and reported by ``cli.main`` in one line.

Where things are, each decided here and nowhere else:
- staging area: ``--staging`` > ``KBQE_STAGING_URL``; a local directory or
  ``gs://bucket/prefix``; for ``gs://``, ``--gcs-endpoint`` > ``KBQE_GCS_ENDPOINT`` points at
  an emulator (none: real GCS, Application Default Credentials, ``KBQE_GCP_PROJECT``);
- pipeline file: ``--config`` > ``KBQE_PIPELINE_CONFIG`` > ``examples/pipeline.yaml``;
- Kafka and the schema registry (``produce-sample``): the options, else the local stack.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Mapping

from kbqe_dagster import cli_render
from kbqe_dagster.core.errors import OperatorCommandError
from kbqe_dagster.resources.staging_store import StagingLocation, StagingStore

SubParsers = Any  # argparse's _SubParsersAction, which has no public name
CommandAdder = Callable[[SubParsers, argparse.ArgumentParser], None]

STAGING_ENV = "KBQE_STAGING_URL"
GCS_ENDPOINT_ENV = "KBQE_GCS_ENDPOINT"
GCP_PROJECT_ENV = "KBQE_GCP_PROJECT"
PIPELINE_ENV = "KBQE_PIPELINE_CONFIG"
DEFAULT_PIPELINE = Path(__file__).resolve().parents[1] / "examples" / "pipeline.yaml"
PAUSE_REMINDER = (
    "kbqe: note: pause the load_cycle and poll_load_jobs schedules (and let their runs end) "
    "while the load state is edited: the load op is a singleton inside Dagster, this command "
    "runs outside it"
)


# --- where things are ----------------------------------------------------------------------
def staging_location(
    url: str | None, gcs_endpoint: str | None, environ: Mapping[str, str] = os.environ
) -> StagingLocation:
    """The staging location from the options, else the environment; an error that says how
    to set it when neither names one."""
    url = url or environ.get(STAGING_ENV)
    if not url:
        raise OperatorCommandError(
            f"no staging location: pass --staging (a directory or gs://bucket/prefix) or set "
            f"{STAGING_ENV}; for the local stack: --staging gs://kbqe-local/staging "
            "--gcs-endpoint http://127.0.0.1:14443"
        )
    if url.startswith("gs://"):
        endpoint = gcs_endpoint or environ.get(GCS_ENDPOINT_ENV) or None
        return StagingLocation(url, endpoint, environ.get(GCP_PROJECT_ENV) or None)
    if "://" in url:
        raise OperatorCommandError(
            f"staging location {url!r}: expected a local directory or gs://bucket/prefix"
        )
    if not Path(url).is_dir():
        raise OperatorCommandError(
            f"staging directory {url} does not exist (create it first for a new staging area)"
        )
    return StagingLocation(url)


def open_store(args: argparse.Namespace) -> StagingStore:
    return staging_location(args.staging, args.gcs_endpoint).open()


def pipeline_config(args: argparse.Namespace) -> Any:
    from kbqe_dagster.core.config import load_pipeline_config

    return load_pipeline_config(args.config or os.environ.get(PIPELINE_ENV) or DEFAULT_PIPELINE)


def _now() -> datetime:
    return datetime.now(timezone.utc)


def _emit(args: argparse.Namespace, report: Any, render: Callable[[Any], str]) -> None:
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render(report))


# --- options shared by several commands ----------------------------------------------------
def _staging_options() -> argparse.ArgumentParser:
    opts = argparse.ArgumentParser(add_help=False)
    opts.add_argument("--staging", metavar="URL",
                      help=f"staging location: a directory or gs://bucket/prefix "
                           f"(default: ${STAGING_ENV})")
    opts.add_argument("--gcs-endpoint", metavar="URL",
                      help=f"GCS emulator endpoint for gs:// locations (default: "
                           f"${GCS_ENDPOINT_ENV}; unset: real GCS)")
    opts.add_argument("--json", action="store_true", help="print JSON instead of text")
    return opts


def _config_option() -> argparse.ArgumentParser:
    opts = argparse.ArgumentParser(add_help=False)
    opts.add_argument("--config", metavar="PATH",
                      help=f"pipeline file (default: ${PIPELINE_ENV}, else examples/pipeline.yaml)")
    return opts


# --- kbqe staging status -------------------------------------------------------------------
def _add_staging(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    staging = sub.add_parser("staging", parents=[common], help="inspect the staging area")
    actions = staging.add_subparsers(dest="staging_action", required=True, metavar="{status}")
    status = actions.add_parser(
        "status", parents=[common, _staging_options()],
        help="next offsets, committed ranges, pending files per partition and table",
    )
    status.set_defaults(handler=_staging_status)


def _staging_status(args: argparse.Namespace) -> int:
    from kbqe_dagster.operations.staging_status import staging_status

    _emit(args, staging_status(open_store(args), _now()), cli_render.staging_status)
    return 0


# --- kbqe load plan, kbqe load release -----------------------------------------------------
def _add_load(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    load = sub.add_parser("load", parents=[common], help="BigQuery load jobs")
    actions = load.add_subparsers(dest="load_action", required=True, metavar="{plan,release}")
    plan = actions.add_parser(
        "plan", parents=[common, _staging_options(), _config_option()],
        help="dry run of the next load cycle: the jobs it would submit, in order",
    )
    plan.set_defaults(handler=_load_plan)

    release = actions.add_parser(
        "release", parents=[common, _staging_options()],
        help="release a table's quarantined files so the next load cycle retries them",
        description="Remove files of a table from the quarantine of the load state, so the "
                    "next load cycle plans them again. A dry run unless --yes is given. Pause "
                    "the load schedules first: this command runs outside Dagster.",
    )
    release.add_argument("--table", required=True, metavar="DATASET.TABLE",
                         help="the table whose quarantined files are released")
    release.add_argument("--file", action="append", default=[], metavar="NAME", dest="files",
                         help="only this quarantined file (repeatable; default: all of the "
                              "table's)")
    release.add_argument("--yes", action="store_true",
                         help="write the load state (without it: show what would be released)")
    release.set_defaults(handler=_load_release)


def _load_plan(args: argparse.Namespace) -> int:
    from kbqe_dagster.operations.load_plan import load_plan

    config = pipeline_config(args)
    _emit(args, load_plan(open_store(args), config), cli_render.load_plan)
    return 0


def _load_release(args: argparse.Namespace) -> int:
    from kbqe_dagster.operations.load_release import release

    report = release(open_store(args), args.table, args.files, dry_run=not args.yes)
    _emit(args, report, cli_render.load_release)
    print(PAUSE_REMINDER, file=sys.stderr)
    return 0


# --- kbqe retention plan -------------------------------------------------------------------
def _add_retention(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    retention = sub.add_parser("retention", parents=[common], help="done-file retention")
    actions = retention.add_subparsers(dest="retention_action", required=True, metavar="{plan}")
    plan = actions.add_parser(
        "plan", parents=[common, _staging_options()],
        help="dry run: which done files retention would delete, and why the rest stay",
    )
    plan.set_defaults(handler=_retention_plan)


def _retention_plan(args: argparse.Namespace) -> int:
    from kbqe_dagster.operations.retention_plan import retention_plan

    _emit(args, retention_plan(open_store(args)), cli_render.retention_plan)
    return 0


# --- kbqe bootstrap ------------------------------------------------------------------------
def _add_bootstrap(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    boot = sub.add_parser(
        "bootstrap", parents=[common, _staging_options()],
        help="make partitions of a topic start at given offsets (writes bootstrap markers)",
        description="Write bootstrap markers so each partition resumes at the given offset. "
                    "A partition can only move forward; nothing is written if one is refused.",
    )
    boot.add_argument("--topic", required=True, help="the Kafka topic")
    boot.add_argument("--offsets", required=True, metavar="P=OFFSET[,P=OFFSET...]",
                      help="next offset per partition, e.g. 0=2787665,1=2828379")
    boot.set_defaults(handler=_bootstrap)


def _bootstrap(args: argparse.Namespace) -> int:
    from kbqe_dagster.operations.bootstrap import bootstrap, parse_partition_offsets

    offsets = parse_partition_offsets(args.offsets)
    report = bootstrap(open_store(args), args.topic, offsets, _now())
    _emit(args, report, cli_render.bootstrap)
    return 0


# --- kbqe dead-letters ---------------------------------------------------------------------
def _add_dead_letters(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    dl = sub.add_parser(
        "dead-letters", parents=[common, _staging_options(), _config_option()],
        help="list and inspect dead-letter records still in the staging area",
    )
    dl.add_argument("--reason", help="only records with this reason (e.g. bad_magic)")
    dl.add_argument("--topic", help="only records of this source topic")
    dl.add_argument("--limit", type=int, default=20, metavar="N",
                    help="show at most N records (default 20; 0 shows only the counts)")
    dl.set_defaults(handler=_dead_letters)


def _dead_letters(args: argparse.Namespace) -> int:
    from kbqe_dagster.operations.dead_letters import dead_letters

    if args.limit < 0:
        raise OperatorCommandError(f"--limit must be 0 or more, got {args.limit}")
    config = pipeline_config(args)
    report = dead_letters(
        open_store(args), config.dead_letter, reason=args.reason, topic=args.topic,
        limit=args.limit,
    )
    _emit(args, report, cli_render.dead_letters)
    return 0


# --- kbqe produce-sample -------------------------------------------------------------------
def _add_produce_sample(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    ps = sub.add_parser(
        "produce-sample", parents=[common],
        help="put demo events (two tables, a schema evolution, bad messages) on a topic",
    )
    ps.add_argument("--count", type=int, default=1000, help="good messages (default 1000)")
    ps.add_argument("--topic", help="target topic (default: the demo topic com.acme.events)")
    ps.add_argument("--partitions", type=int, default=3,
                    help="partitions when the topic is created (default 3)")
    ps.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    ps.add_argument("--bootstrap-servers", metavar="HOST:PORT",
                    help="Kafka (default: the local stack)")
    ps.add_argument("--registry-url", metavar="URL",
                    help="schema registry (default: the local stack's Apicurio ccompat API)")
    ps.add_argument("--json", action="store_true", help="print JSON instead of text")
    ps.set_defaults(handler=_produce_sample)


def _produce_sample(args: argparse.Namespace) -> int:
    from kbqe_dagster.demo.samples import DEMO_TOPIC
    from kbqe_dagster.localstack.endpoints import local_endpoints
    from kbqe_dagster.operations.produce_sample import produce_sample

    ends = local_endpoints()
    report = produce_sample(
        args.bootstrap_servers or ends.kafka_bootstrap,
        args.registry_url or ends.registry_url,
        topic=args.topic or DEMO_TOPIC, count=args.count, partitions=args.partitions,
        seed=args.seed,
    )
    _emit(args, report, cli_render.produce_sample)
    return 0


OPERATOR_COMMANDS: list[CommandAdder] = [
    _add_staging, _add_load, _add_retention, _add_bootstrap, _add_dead_letters,
    _add_produce_sample,
]
