"""``kbqe produce-sample``: the demo's events (``demo/samples.py``) on a topic."""

from __future__ import annotations

import argparse

from kbqe_dagster.cli import render
from kbqe_dagster.cli.common import SubParsers, emit


def add_produce_sample(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    ps = sub.add_parser(
        "produce-sample",
        parents=[common],
        help="put demo events (two tables, a schema evolution, bad messages) on a topic",
    )
    ps.add_argument("--count", type=int, default=1000, help="good messages (default 1000)")
    ps.add_argument("--topic", help="target topic (default: the demo topic com.acme.events)")
    ps.add_argument(
        "--partitions", type=int, default=3, help="partitions when the topic is created (default 3)"
    )
    ps.add_argument(
        "--clicks",
        type=int,
        default=0,
        help="also this many clicks: rows of acme_web.clicks, the sample "
        "pipeline's storage_write table, in BigQuery in seconds under `kbqe dev` "
        "(default 0)",
    )
    ps.add_argument("--seed", type=int, default=7, help="random seed (default 7)")
    ps.add_argument(
        "--bootstrap-servers", metavar="HOST:PORT", help="Kafka (default: the local stack)"
    )
    ps.add_argument(
        "--registry-url",
        metavar="URL",
        help="schema registry (default: the local stack's Apicurio ccompat API)",
    )
    ps.add_argument("--json", action="store_true", help="print JSON instead of text")
    ps.set_defaults(handler=_produce_sample)


def _produce_sample(args: argparse.Namespace) -> int:
    from kbqe_dagster.demo.produce import produce_sample
    from kbqe_dagster.demo.samples import DEMO_TOPIC
    from kbqe_dagster.localstack.endpoints import local_endpoints

    ends = local_endpoints()
    report = produce_sample(
        args.bootstrap_servers or ends.kafka_bootstrap,
        args.registry_url or ends.registry_url,
        topic=args.topic or DEMO_TOPIC,
        count=args.count,
        partitions=args.partitions,
        seed=args.seed,
        clicks=args.clicks,
    )
    emit(args, report, render.produce_sample)
    return 0
