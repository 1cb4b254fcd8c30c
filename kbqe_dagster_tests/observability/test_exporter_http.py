"""The exporter over HTTP: ``/metrics`` in the Prometheus text format with the values of the
staging area and the event log, ``/healthcheck`` with 200 or 503, and no secret anywhere."""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from kbqe_dagster.defs.keys import STAGING_KEY
from kbqe_dagster.observability.cache import CachedSource
from kbqe_dagster.observability.collector import KbqeCollector, MetricSources
from kbqe_dagster.observability.health import HealthChecker, default_probes, staging_probe
from kbqe_dagster.observability.lag import LagView, NoTopicReadable
from kbqe_dagster.observability.server import MetricsServer
from kbqe_dagster.resources.kafka.clients import KafkaSettings
from kbqe_dagster.resources.schema_registry import RegistrySettings
from kbqe_dagster_tests.cli.staging_area import build
from kbqe_dagster_tests.observability.conftest import CLOSED, sources_for

KAFKA_PASSWORD = "kafka-pw-7c1f9e"
REGISTRY_PASSWORD = "registry-pw-52ab"


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.fixture(scope="module")
def shared_instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


@pytest.fixture
def instance(shared_instance: dg.DagsterInstance) -> dg.DagsterInstance:
    shared_instance.wipe()  # an empty event log per test, one instance per module
    return shared_instance


def no_kafka() -> LagView:
    raise NoTopicReadable("com.acme.events: KafkaReadError: no broker")


def serve(sources, instance, probes) -> MetricsServer:
    metric_sources = MetricSources(sources, ttl_s=0.1, instance=lambda: instance)
    # No broker in these tests (the real lag source is exercised on the local stack).
    metric_sources.kafka = CachedSource("kafka", no_kafka, ttl_s=0.1)
    checker = HealthChecker(
        probes, metric_sources, max_staging_age_s=7200, timeout_s=1, redact=sources.redactor()
    )
    return MetricsServer(KbqeCollector(metric_sources, wait_s=2.0), checker, port=0).start()


@pytest.fixture
def server(tmp_path: Path, example_pipeline, instance) -> Iterator[MetricsServer]:
    sources = sources_for(build(tmp_path / "staging").root, example_pipeline)
    instance.report_runless_asset_event(
        dg.AssetMaterialization(
            STAGING_KEY,
            metadata={
                "topic": "com.acme.events",
                "messages": 120,
                "dagster/row_count": 117,
                "bytes_written": 9000,
                "bytes_written_by_dataset": dg.MetadataValue.json(
                    {"acme_sales": 8000, "kbqe_dead_letters": 1000}
                ),
                "files_written": 3,
                "orphans_deleted": 1,
                "seconds": 12.5,
                "dead_letters_by_reason": dg.MetadataValue.json({"bad_magic": 3}),
                "skipped_by_reason": dg.MetadataValue.json({}),
                "storage_write_by_table": dg.MetadataValue.json(
                    {"acme_web.clicks": {"rows": 20, "bytes": 1500, "list_price_usd": 0.0}}
                ),
            },
        )
    )
    probes = {
        "kafka": lambda: ("up", None),
        "schema_registry": lambda: ("up", None),
        "staging": lambda: staging_probe(sources.staging.open()),
    }
    srv = serve(sources, instance, probes)
    yield srv
    srv.stop()


def test_metrics_carry_the_staging_area_and_the_event_log(server) -> None:
    status, text = get(server.url + "/metrics")
    values = samples(text)

    assert status == 200
    expected = {
        (
            "kbqe_staging_pending_files",
            (("dataset", "acme_sales"), ("table", "orders"), ("state", "loadable")),
        ): 4,
        (
            "kbqe_staging_pending_files",
            (("dataset", "acme_sales"), ("table", "orders"), ("state", "quarantined")),
        ): 1,
        ("kbqe_staging_uncommitted_avro_files", ()): 1,
        ("kbqe_staging_quarantined_tables", ()): 1,
        (
            "kbqe_load_jobs",
            (("dataset", "acme_web"), ("table", "page_views"), ("status", "planned")),
        ): 1,
        ("kbqe_load_jobs_failed_total", (("dataset", "acme_sales"), ("table", "orders"))): 1,
        ("kbqe_messages_consumed_total", (("topic", "com.acme.events"),)): 120,
        ("kbqe_records_staged_total", (("topic", "com.acme.events"),)): 117,
        (
            "kbqe_bytes_written_total",
            (("topic", "com.acme.events"), ("dataset", "acme_sales")),
        ): 8000,
        ("kbqe_dead_letters_total", (("topic", "com.acme.events"), ("reason", "bad_magic"))): 3,
        ("kbqe_storage_write_bytes_total", (("dataset", "acme_web"), ("table", "clicks"))): 1500,
        ("kbqe_storage_write_rows_total", (("dataset", "acme_web"), ("table", "clicks"))): 20,
        ("kbqe_orphan_avro_files_deleted_total", (("topic", "com.acme.events"),)): 1,
        ("kbqe_stage_run_seconds_count", (("topic", "com.acme.events"),)): 1,
        ("kbqe_stage_run_seconds_bucket", (("topic", "com.acme.events"), ("le", "15.0"))): 1,
        ("kbqe_stage_run_seconds_sum", (("topic", "com.acme.events"),)): 12.5,
        ("kbqe_stage_run_seconds_bucket", (("topic", "com.acme.events"), ("le", "5.0"))): 0,
        ("kbqe_exporter_source_up", (("source", "staging"),)): 1,
        ("kbqe_exporter_source_up", (("source", "dagster"),)): 1,
        ("kbqe_exporter_source_up", (("source", "kafka"),)): 0,
    }
    got = {k: values.get((k[0], frozenset(k[1]))) for k in expected}
    assert got == expected


def test_healthcheck_answers_503_with_every_check_when_a_table_is_quarantined(server) -> None:
    status, body = get(server.url + "/healthcheck")
    doc = json.loads(body)

    assert status == 503
    assert doc["healthy"] is False
    assert list(doc["checks"]) == [
        "kafka",
        "schema_registry",
        "staging",
        "quarantine",
        "stage_path",
        "staging_freshness",
    ]
    assert [n for n, c in doc["checks"].items() if not c["ok"]] == ["quarantine"]


def test_healthcheck_answers_200_when_every_check_passes(
    tmp_path, example_pipeline, instance
) -> None:
    sources = sources_for(tmp_path, example_pipeline)
    srv = serve(sources, instance, {"staging": lambda: staging_probe(sources.staging.open())})
    try:
        status, body = get(srv.url + "/healthcheck")
    finally:
        srv.stop()

    assert status == 200 and json.loads(body)["healthy"] is True


@pytest.mark.parametrize(("path", "status"), [("/", 200), ("/nothing", 404)])
def test_other_paths(server, path: str, status: int) -> None:
    assert get(server.url + path)[0] == status


def test_no_connection_secret_appears_in_metrics_health_or_logs(
    tmp_path, example_pipeline, instance, caplog
) -> None:
    sources = sources_for(
        tmp_path,
        example_pipeline,
        kafka=KafkaSettings(
            CLOSED,
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "kbqe",
                "sasl.password": KAFKA_PASSWORD,
            },
        ),
        registry=RegistrySettings(
            f"http://{CLOSED}", basic_auth_user_info=f"kbqe:{REGISTRY_PASSWORD}"
        ),
    )
    probes = default_probes(sources, timeout_s=1)
    # A client library that echoes its configuration in an error, as some do.
    probes["echo"] = lambda: (_ for _ in ()).throw(
        RuntimeError(
            f"login kbqe/{KAFKA_PASSWORD} refused; registry kbqe:{REGISTRY_PASSWORD} at "
            f"http://kbqe:{REGISTRY_PASSWORD}@registry/"
        )
    )
    caplog.set_level(logging.DEBUG)
    srv = serve(sources, instance, probes)
    try:
        _, health = get(srv.url + "/healthcheck")
        _, metrics = get(srv.url + "/metrics")
    finally:
        srv.stop()

    doc = json.loads(health)
    assert doc["checks"]["echo"]["detail"] == (
        "RuntimeError: login kbqe/*** refused; registry *** at http://***@registry/"
    )
    assert not doc["checks"]["kafka"]["ok"] and not doc["checks"]["schema_registry"]["ok"]
    for secret in (KAFKA_PASSWORD, REGISTRY_PASSWORD):
        assert secret not in health
        assert secret not in metrics
        assert secret not in caplog.text
    assert "kafka" in caplog.text, "the failures were logged (redacted)"
