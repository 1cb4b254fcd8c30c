"""``kbqe metrics serve`` and ``kbqe health``: the exporter and its one-shot health check.

Both read the connections of
the current environment's Dagster resources (``KBQE_ENV``, default ``local``) — run them
with the same environment as ``dagster-daemon``. See ``docs/operations.md``, "Metrics and
health".
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
from typing import Any

from kbqe_dagster.cli.common import SubParsers

log = logging.getLogger("kbqe")


def _quiet_http_clients() -> None:
    # httpx (the registry client) logs every request line at INFO: noise for an exporter
    # that probes every few seconds, even with -v, and a URL is the one place a credential
    # could ride.
    logging.getLogger("httpx").setLevel(logging.WARNING)


def _check_options() -> argparse.ArgumentParser:
    opts = argparse.ArgumentParser(add_help=False)
    opts.add_argument(
        "--check-timeout",
        type=float,
        default=3.0,
        metavar="SECONDS",
        help="answer time allowed to each health check (default 3)",
    )
    opts.add_argument(
        "--max-staging-age",
        type=float,
        metavar="SECONDS",
        help="staging is unhealthy when a committed file has waited longer for "
        "a load (default: 3 load cadences of the pipeline file)",
    )
    opts.add_argument(
        "--dagster-home",
        metavar="PATH",
        help="the Dagster instance the runs report to (default: $DAGSTER_HOME; "
        "locally .kbqe-local/dagster_home)",
    )
    return opts


# --- kbqe metrics serve --------------------------------------------------------------------
def add_metrics(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    metrics = sub.add_parser("metrics", parents=[common], help="the Prometheus exporter")
    actions = metrics.add_subparsers(dest="metrics_action", required=True, metavar="{serve}")
    serve = actions.add_parser(
        "serve",
        parents=[common, _check_options()],
        help="serve /metrics and /healthcheck until stopped (Ctrl-C, SIGTERM)",
        description="A long-lived exporter computing metrics at scrape time from the Dagster "
        "event log, the staging area, the load state file and Kafka.",
    )
    serve.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to bind (default 127.0.0.1; 0.0.0.0 exposes it)",
    )
    serve.add_argument("--port", type=int, default=9108, help="port (default 9108)")
    serve.add_argument(
        "--cache-seconds",
        type=float,
        default=15.0,
        metavar="SECONDS",
        help="how long a source's reading is reused across scrapes (default 15)",
    )
    serve.set_defaults(handler=_metrics_serve)


def _metrics_serve(args: argparse.Namespace) -> int:
    from kbqe_dagster.observability.server import build_server
    from kbqe_dagster.observability.sources import sources_from_environment

    _quiet_http_clients()
    sources = sources_from_environment(dagster_home=args.dagster_home)
    server = build_server(
        sources,
        host=args.host,
        port=args.port,
        ttl_s=args.cache_seconds,
        timeout_s=args.check_timeout,
        max_staging_age_s=args.max_staging_age,
    )
    if not sources.dagster_home:
        log.warning("no Dagster instance (DAGSTER_HOME unset): stage and load counters are off")

    def stop(signum: int, _frame: Any) -> None:
        log.info("signal %d: stopping", signum)
        threading.Thread(target=server.stop, daemon=True).start()  # not from the serving thread

    signal.signal(signal.SIGTERM, stop)
    log.info(
        "serving %s/metrics and %s/healthcheck (staging %s)",
        server.url,
        server.url,
        sources.staging.url,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        server.stop()
    return 0


# --- kbqe health ---------------------------------------------------------------------------
def add_health(sub: SubParsers, common: argparse.ArgumentParser) -> None:
    health = sub.add_parser(
        "health",
        parents=[common, _check_options()],
        help="check Kafka, registry, staging, BigQuery, quarantine and staging age once",
        description="Run the exporter's health checks once; exit 0 when healthy, 1 otherwise.",
    )
    health.add_argument(
        "--json", action="store_true", help="print the JSON /healthcheck answers instead of text"
    )
    health.set_defaults(handler=_health)


def _health(args: argparse.Namespace) -> int:
    from kbqe_dagster.observability.collector import MetricSources
    from kbqe_dagster.observability.server import build_checker
    from kbqe_dagster.observability.sources import sources_from_environment

    _quiet_http_clients()
    sources = sources_from_environment(dagster_home=args.dagster_home)
    checker = build_checker(
        sources,
        MetricSources(sources),
        timeout_s=args.check_timeout,
        max_staging_age_s=args.max_staging_age,
    )
    report = checker.check()
    if args.json:
        print(json.dumps(report.to_json(), indent=2))
    else:
        print(render_health(report.to_json()))
    return 0 if report.healthy else 1


def render_health(doc: dict[str, Any]) -> str:
    checks = doc["checks"]
    width = max(len(name) for name in checks)
    lines = [
        f"{_verdict(c)}  {name.ljust(width)}  {c['seconds']:5.2f}s  {c['detail']}"
        for name, c in checks.items()
    ]
    degraded = doc.get("degraded") or []
    lines.append(
        ("healthy" if doc["healthy"] else "UNHEALTHY")
        + (f" (degraded: {', '.join(degraded)})" if degraded else "")
    )
    return "\n".join(lines)


def _verdict(check: dict[str, Any]) -> str:
    if not check["ok"]:
        return "FAIL"
    return "WARN" if check.get("degraded") else "ok  "
