"""The exporter's HTTP server: ``/metrics`` (Prometheus text format), ``/healthcheck`` (JSON,
200 when healthy, 503 otherwise) and ``/`` (what is served where).

A small threaded WSGI server from the standard library: a slow health check never blocks a
scrape. ``/metrics`` is prometheus-client's own WSGI app (content negotiation, gzip, ``name[]``
filters) over a registry holding only the kbqe collector. Binds 127.0.0.1 unless told
otherwise; request lines are logged at DEBUG, never to stderr directly.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from kbqe_dagster.observability.cache import CachedSource
from kbqe_dagster.observability.collector import DEFAULT_TTL_S, KbqeCollector, MetricSources
from kbqe_dagster.observability.health import (
    DEFAULT_TIMEOUT_S,
    HealthChecker,
    HealthReport,
    default_probes,
)
from kbqe_dagster.observability.sources import ExporterSources

log = logging.getLogger(__name__)

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 9108
HEALTH_TTL_S = 5.0
POLL_S = 0.1  # how soon serve_forever notices stop()
INDEX = (
    "kbqe_dagster exporter\n"
    "  /metrics      Prometheus metrics (docs/operations.md, 'Metrics and health')\n"
    "  /healthcheck  JSON health report: 200 healthy, 503 not\n"
)


class _ThreadingServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a hung request never keeps the exporter from stopping


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - base signature
        log.debug("%s %s", self.address_string(), format % args)


class ExporterApp:
    """The WSGI application."""

    def __init__(self, registry: CollectorRegistry, health: Callable[[], HealthReport | None]):
        self._metrics = make_wsgi_app(registry)
        self._health = health

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return self._metrics(environ, start_response)
        if path == "/healthcheck":
            report = self._health()
            if report is None:
                body = {
                    "healthy": False,
                    "error": "the health check could not run; see the exporter's log",
                }
            else:
                body = report.to_json()
            status = "200 OK" if body["healthy"] else "503 Service Unavailable"
            return _respond(
                start_response, status, "application/json", json.dumps(body, indent=2) + "\n"
            )
        if path == "/":
            return _respond(start_response, "200 OK", "text/plain; charset=utf-8", INDEX)
        return _respond(
            start_response, "404 Not Found", "text/plain; charset=utf-8", "not found; see /\n"
        )


def _respond(start_response: Callable, status: str, content_type: str, text: str) -> list[bytes]:
    body = text.encode()
    start_response(
        status,
        [
            ("Content-Type", content_type),
            ("Content-Length", str(len(body))),
            ("Cache-Control", "no-store"),
        ],
    )
    return [body]


def cached_health(
    checker: HealthChecker, ttl_s: float = HEALTH_TTL_S
) -> Callable[[], HealthReport | None]:
    """The checker behind a short cache: a burst of health requests runs the checks once."""
    source: CachedSource[HealthReport] = CachedSource(
        "health", checker.check, ttl_s, describe_error=lambda e: checker.prober.redact(e)
    )
    return lambda: source.read(checker.timeout_s + 2.0).value


class MetricsServer:
    """The exporter on ``host:port`` (port 0: any free port), served from a thread."""

    def __init__(
        self,
        collector: KbqeCollector,
        checker: HealthChecker,
        *,
        host: str = DEFAULT_HOST,
        port: int = DEFAULT_PORT,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        app = ExporterApp(self.registry, cached_health(checker))
        self._server = make_server(
            host, port, app, server_class=_ThreadingServer, handler_class=_QuietHandler
        )
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> MetricsServer:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(POLL_S,), name="kbqe-exporter", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        self._server.serve_forever(POLL_S)

    def stop(self) -> None:
        """Stop serving (callable from any thread but the serving one) and close the socket."""
        self._server.shutdown()
        self._server.server_close()
        if self._thread is not None:
            self._thread.join(5)


def build_server(
    sources: ExporterSources,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    ttl_s: float = DEFAULT_TTL_S,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_staging_age_s: float | None = None,
) -> MetricsServer:
    """The exporter for ``sources``; not serving until ``start()`` or ``serve_forever()``."""
    metric_sources = MetricSources(sources, ttl_s=ttl_s)
    checker = build_checker(
        sources, metric_sources, timeout_s=timeout_s, max_staging_age_s=max_staging_age_s
    )
    return MetricsServer(KbqeCollector(metric_sources), checker, host=host, port=port)


def build_checker(
    sources: ExporterSources,
    metric_sources: MetricSources,
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_staging_age_s: float | None = None,
) -> HealthChecker:
    """The health checks of ``sources``; the staging age limit defaults to the staging
    freshness asset check's (``FRESHNESS_CADENCES`` load cadences)."""
    from kbqe_dagster.core.load.pending import freshness_limit_s

    limit = (
        max_staging_age_s
        if max_staging_age_s is not None
        else freshness_limit_s(sources.pipeline.load.cadence)
    )
    return HealthChecker(
        default_probes(sources, timeout_s),
        metric_sources,
        max_staging_age_s=limit,
        timeout_s=timeout_s,
        redact=sources.redactor(),
    )
