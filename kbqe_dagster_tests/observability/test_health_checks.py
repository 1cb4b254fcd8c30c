"""The health checks: each bounded by its timeout, never piling up on a system that does not
answer, judged by the documented rules (no quarantined table, staging not too old)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kbqe_dagster.cli.observability import render_health
from kbqe_dagster.observability.collector import MetricSources
from kbqe_dagster.observability.health import HealthChecker, Prober, kafka_probe, staging_probe
from kbqe_dagster.observability.redact import Redactor
from kbqe_dagster_tests.cli.staging_area import AGE_SECONDS, build
from kbqe_dagster_tests.observability.conftest import sources_for


def ok(detail: str = "fine"):
    return lambda: (detail, None)


def test_a_probe_that_does_not_answer_fails_at_the_timeout() -> None:
    release = threading.Event()
    prober = Prober(timeout_s=0.3, redact=Redactor())

    started = time.monotonic()
    results = prober.run({"kafka": lambda: release.wait(10) and ("late", None), "bq": ok()})
    took = time.monotonic() - started
    release.set()

    assert took < 1.0
    kafka, _ = results["kafka"]
    assert (kafka.ok, kafka.detail) == (False, "no answer within 0.3s")
    assert results["bq"][0].ok


def test_a_probe_still_running_is_not_started_again() -> None:
    calls, release = [], threading.Event()

    def hanging():
        calls.append(1)
        release.wait(10)
        return "late", None

    prober = Prober(timeout_s=0.2, redact=Redactor())
    prober.run({"registry": hanging})
    second, _ = prober.run({"registry": hanging})["registry"]
    release.set()

    assert len(calls) == 1
    assert not second.ok and "still running" in second.detail


def test_a_failure_names_the_error_without_the_secrets_it_echoes() -> None:
    prober = Prober(timeout_s=1, redact=Redactor.of(["svc:s3cr3t-pw"]))

    def leaky():
        raise ConnectionError("auth failed for svc:s3cr3t-pw at https://svc:s3cr3t-pw@host/")

    result, _ = prober.run({"schema_registry": leaky})["schema_registry"]

    assert not result.ok
    assert "s3cr3t" not in result.detail
    assert result.detail.startswith("ConnectionError: auth failed for ***")


def checker(tmp_path: Path, pipeline, *, max_age: float, area: bool = True) -> HealthChecker:
    root = build(tmp_path / "staging").root if area else tmp_path
    sources = sources_for(root, pipeline)
    probes = {
        "kafka": ok(),
        "schema_registry": ok(),
        "staging": lambda: staging_probe(sources.staging.open()),
    }
    return HealthChecker(
        probes,
        MetricSources(sources),
        max_staging_age_s=max_age,
        timeout_s=2,
        redact=sources.redactor(),
    )


def test_a_quarantined_table_makes_the_pipeline_unhealthy(tmp_path, example_pipeline) -> None:
    report = checker(tmp_path, example_pipeline, max_age=7200).check()
    checks = {c.name: c for c in report.checks}

    assert not report.healthy
    assert not checks["quarantine"].ok
    assert "acme_sales.orders" in checks["quarantine"].detail
    assert [name for name, c in checks.items() if not c.ok] == ["quarantine"]


@pytest.mark.parametrize(("max_age", "fresh"), [(AGE_SECONDS / 4, False), (AGE_SECONDS * 2, True)])
def test_staging_freshness_compares_the_oldest_waiting_file_with_the_limit(
    tmp_path, example_pipeline, max_age: float, fresh: bool
) -> None:
    report = checker(tmp_path, example_pipeline, max_age=max_age).check()
    freshness = next(c for c in report.checks if c.name == "staging_freshness")

    assert freshness.ok is fresh
    assert f"limit {max_age:.0f}s" in freshness.detail


def test_an_empty_reachable_staging_area_is_healthy(tmp_path, example_pipeline) -> None:
    report = checker(tmp_path, example_pipeline, max_age=60, area=False).check()

    assert report.healthy, report.to_json()
    assert report.to_json()["thresholds"] == {
        "check_timeout_seconds": 2,
        "max_staging_age_seconds": 60,
    }


def test_an_unreadable_staging_area_fails_staging_and_leaves_quarantine_unknown(
    tmp_path, example_pipeline
) -> None:
    sources = sources_for(tmp_path, example_pipeline)
    (tmp_path / "_kbqe").mkdir()
    (tmp_path / "_kbqe" / "load_state.json").write_text("{ not json")
    probes = {"staging": lambda: staging_probe(sources.staging.open())}
    report = HealthChecker(
        probes, None, max_staging_age_s=60, timeout_s=2, redact=Redactor()
    ).check()
    checks = {c.name: c for c in report.checks}

    assert not checks["staging"].ok and "not valid JSON" in checks["staging"].detail
    assert not checks["quarantine"].ok and checks["quarantine"].detail.startswith("unknown")


def test_a_failing_check_is_logged_when_it_starts_failing_and_when_it_recovers(caplog) -> None:
    outcomes = iter([ConnectionError("refused"), ConnectionError("refused"), None])

    def flaky():
        outcome = next(outcomes)
        if outcome is not None:
            raise outcome
        return "up", None

    prober = Prober(timeout_s=1, redact=Redactor())
    caplog.set_level("INFO", logger="kbqe_dagster.observability.health")
    for _ in range(3):
        prober.run({"kafka": flaky})

    assert [(r.levelname, r.getMessage()) for r in caplog.records] == [
        ("WARNING", "health check kafka failed: ConnectionError: refused"),
        ("INFO", "health check kafka passes again"),
    ]


def test_health_says_which_stage_path_runs_and_is_never_unhealthy_for_it(monkeypatch) -> None:
    from kbqe_dagster.observability.health import stage_path_result

    monkeypatch.setenv("KBQE_STAGE_KERNEL", "off")
    result = stage_path_result()
    assert result.ok and result.name == "stage_path"
    assert result.detail == "python (KBQE_STAGE_KERNEL=off)"


class _Metadata:
    """What ``AdminClient.list_topics`` answers: brokers and the topics the cluster holds."""

    def __init__(self, topics: set[str]) -> None:
        self.brokers = {1: "broker"}
        self.topics = {name: object() for name in topics}


class _Admin:
    def __init__(self, topics: set[str]) -> None:
        self.topics = topics

    def list_topics(self, timeout: float):
        return _Metadata(self.topics)


def kafka_holding(tmp_path: Path, pipeline, topics: set[str]) -> HealthChecker:
    sources = sources_for(tmp_path, pipeline)
    probes = {
        "kafka": lambda: kafka_probe(_Admin(topics), sources, 1.0),
        "staging": lambda: staging_probe(sources.staging.open()),
    }
    return HealthChecker(probes, None, max_staging_age_s=60, timeout_s=2, redact=sources.redactor())


def test_a_configured_topic_kafka_does_not_hold_is_healthy_but_degraded_naming_it(
    tmp_path, example_pipeline
) -> None:
    report = kafka_holding(tmp_path, example_pipeline, {"other.topic"}).check()
    kafka = next(c for c in report.checks if c.name == "kafka")

    assert report.healthy and report.degraded == ("kafka",)
    assert kafka.ok and kafka.degraded
    assert kafka.detail == (
        "1 broker(s) answered; configured topic(s) missing in Kafka (not created yet, or "
        "deleted; not staged until they exist): com.acme.audit, com.acme.events"
    )
    doc = report.to_json()
    assert doc["degraded"] == ["kafka"] and doc["checks"]["kafka"]["degraded"] is True
    assert "WARN  kafka" in render_health(doc)
    assert render_health(doc).splitlines()[-1] == "healthy (degraded: kafka)"


def test_every_configured_topic_present_is_neither_degraded_nor_named(
    tmp_path, example_pipeline
) -> None:
    report = kafka_holding(
        tmp_path, example_pipeline, {"com.acme.events", "com.acme.audit"}
    ).check()
    kafka = next(c for c in report.checks if c.name == "kafka")

    assert report.healthy and report.degraded == ()
    assert (kafka.ok, kafka.degraded, kafka.detail) == (True, False, "1 broker(s) answered")
    assert render_health(report.to_json()).splitlines()[-1] == "healthy"
