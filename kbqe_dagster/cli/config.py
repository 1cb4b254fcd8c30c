"""``kbqe config check`` (is the pipeline file valid? every problem with its key path) and
``kbqe config schema`` (its JSON Schema, for editors). The reader is core/config/pipeline.py,
the schema core/config/schema.py. ``kbqe config dagster-yaml`` prints the Dagster instance's
file for a storage (kbqe_dagster/instance_config.py)."""

from __future__ import annotations

import argparse
import json
from typing import Any

from kbqe_dagster.cli.common import SubParsers, config_option, pipeline_path
from kbqe_dagster.core.errors import ConfigError
from kbqe_dagster.instance_config import STORAGES, instance_yaml

INVALID_EXIT = 1
"""``config check``: the pipeline file has problems (or cannot be read)."""


def add_config(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    config = sub.add_parser("config", parents=[common], help="check the pipeline file; its schema")
    actions = config.add_subparsers(dest="action", required=True)
    check = actions.add_parser(
        "check",
        parents=[common, config_option()],
        help="read the pipeline file and print every problem with its key path",
        description=f"Exit 0 when the pipeline file is valid, {INVALID_EXIT} otherwise. Reads "
        "only the file (and what it names: a json topic's schema file, decoders "
        "and routing functions, imported); Kafka is not asked.",
    )
    check.add_argument("--json", action="store_true", help="print JSON instead of text")
    check.set_defaults(handler=_check)
    schema = actions.add_parser(
        "schema",
        parents=[common],
        help="print the JSON Schema of the pipeline file (for editors: completion, checks)",
    )
    schema.set_defaults(handler=_schema)
    instance = actions.add_parser(
        "dagster-yaml",
        parents=[common],
        help="print the Dagster instance's dagster.yaml for a storage (sqlite or postgres)",
        description="The packaged dagster.yaml (run coordinator, tag limits, pools, "
        "run_monitoring); with --storage postgres followed by a `storage: postgres:` block "
        "whose connection is read from KBQE_DAGSTER_PG_HOST, _PORT, _USER, _PASSWORD and _DB "
        "(docs/runbook.md, 'Dagster on Postgres').",
    )
    instance.add_argument("--storage", choices=STORAGES, default="sqlite")
    instance.set_defaults(handler=_dagster_yaml)


def check_report(path: Any) -> dict[str, Any]:
    """What ``config check`` found in the pipeline file at ``path``: ``ok``, ``problems``
    (``path``: the key path, ``""`` for the file itself), ``warnings``, the topics."""
    from kbqe_dagster.core.config.pipeline import load_pipeline_config

    try:
        config = load_pipeline_config(path)
    except ConfigError as error:
        located = error.problems or (("", str(error).removeprefix(f"{path}: ")),)
        return {
            "config": str(path),
            "ok": False,
            "warnings": [],
            "problems": [{"path": where, "message": message} for where, message in located],
        }
    return {
        "config": str(path),
        "ok": True,
        "problems": [],
        "warnings": list(config.warnings),
        "topics": list(config.topic_names),
        "topic_patterns": [p.match for p in config.topic_patterns],
    }


def render_check(report: dict[str, Any]) -> str:
    if report["ok"]:
        patterns = len(report["topic_patterns"])
        lines = [
            f"{report['config']}: ok ({len(report['topics'])} topic(s)"
            + (f", {patterns} topic pattern(s))" if patterns else ")")
        ]
    else:
        lines = [f"{report['config']}: {len(report['problems'])} problem(s):"]
        lines += [
            f"  - {p['path']}: {p['message']}" if p["path"] else f"  - {p['message']}"
            for p in report["problems"]
        ]
    lines += [f"  warning: {w}" for w in report["warnings"]]
    return "\n".join(lines)


def _check(args: argparse.Namespace) -> int:
    report = check_report(pipeline_path(args))
    print(json.dumps(report, indent=2) if args.json else render_check(report))
    return 0 if report["ok"] else INVALID_EXIT


def _schema(args: argparse.Namespace) -> int:
    from kbqe_dagster.core.config.schema import pipeline_schema

    print(json.dumps(pipeline_schema(), indent=2))
    return 0


def _dagster_yaml(args: argparse.Namespace) -> int:
    print(instance_yaml(args.storage), end="")
    return 0
