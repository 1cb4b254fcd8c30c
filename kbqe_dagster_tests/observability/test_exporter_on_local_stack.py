"""``kbqe metrics serve`` as a process against the real local stack: on a fresh topic the lag
equals what was produced; once the topic is staged (one range per partition, as the stage
tasks do, without Spark) and the run is recorded in the Dagster instance as the staging asset
records it, the lag is zero and the counters equal what was staged."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections import Counter, defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import dagster as dg
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from kbqe_dagster.core.protocol.naming import AvroFileName, parse_name
from kbqe_dagster.core.protocol.offsets import OffsetRange, RangePlan
from kbqe_dagster.defs.keys import STAGING_KEY
from kbqe_dagster.defs.staging.metadata import stage_metadata
from kbqe_dagster.resources.kafka.cluster import watermarks
from kbqe_dagster.resources.staging_store import StagingLocation
from kbqe_dagster.staging.job import StageSummary
from kbqe_dagster.staging.prepare import Preparation
from kbqe_dagster.staging.task import stage_range
from kbqe_dagster_tests.staging.conftest import make_demo_topic

pytestmark = [pytest.mark.integration]
KBQE = str(Path(sys.executable).parent / "kbqe")
CACHE_S = 0.5


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=15) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def scrape(url: str) -> dict[tuple[str, frozenset], float]:
    _, text = get(url + "/metrics")
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(values: dict, name: str, **labels: object) -> float | None:
    return values.get((name, frozenset((k, str(v)) for k, v in labels.items())))


def scrape_until(url: str, ready, timeout: float = 30.0) -> dict:
    deadline = time.monotonic() + timeout
    while True:
        values = scrape(url)
        if ready(values) or time.monotonic() > deadline:
            return values
        time.sleep(CACHE_S)


@pytest.fixture
def exporter(local_stack, tmp_path: Path):
    """A fresh demo topic, an empty staging directory, an empty Dagster instance, and
    ``kbqe metrics serve`` on a free port configured for them through the environment."""
    demo = make_demo_topic(local_stack, count=300)
    staging, home = tmp_path / "staging", tmp_path / "dagster_home"
    staging.mkdir()
    home.mkdir()
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(
        yaml.safe_dump(
            {
                "version": 1,
                "topics": [
                    {
                        "name": demo.topic,
                        "routing": {"mode": "fields"},
                        "event_time": {"fields": ["eventTime", "occurredAt"]},
                    }
                ],
                "allowed_destinations": ["acme_sales.*", "acme_web.*"],
            }
        )
    )
    port = free_port()
    env = {
        **os.environ,
        "KBQE_ENV": "local",
        "KBQE_STAGING_URL": str(staging),
        "KBQE_PIPELINE_CONFIG": str(pipeline),
        "DAGSTER_HOME": str(home),
    }
    log = tmp_path / "exporter.log"
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            [KBQE, "metrics", "serve", "--port", str(port), "--cache-seconds", str(CACHE_S)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                get(url + "/")
                break
            except OSError:
                assert proc.poll() is None, log.read_text()
                assert time.monotonic() < deadline, log.read_text()
                time.sleep(0.2)
        yield demo, staging, home, url
    finally:
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(15)
    assert code == 0, log.read_text()


def test_lag_then_staged_counters_and_health_on_the_local_stack(exporter) -> None:
    demo, staging, home, url = exporter
    produced = Counter(partition for partition, _ in demo.placed)

    before = scrape_until(url, lambda v: value(v, "kbqe_exporter_source_up", source="kafka") == 1)

    for p, n in produced.items():
        assert value(before, "kbqe_kafka_lag_messages", topic=demo.topic, partition=p) == n
        assert value(before, "kbqe_kafka_high_watermark", topic=demo.topic, partition=p) == n
    assert value(before, "kbqe_exporter_source_up", source="dagster") == 1
    assert value(before, "kbqe_messages_consumed_total", topic=demo.topic) is None
    status, body = get(url + "/healthcheck")
    assert status == 200, body
    assert all(c["ok"] for c in json.loads(body)["checks"].values())
    assert set(json.loads(body)["checks"]) == {
        "kafka",
        "schema_registry",
        "staging",
        "bigquery",
        "quarantine",
        "stage_path",
        "staging_freshness",
    }

    # Stage every partition as one range, and record the run as the staging asset does.
    ctx = demo.context(StagingLocation(str(staging)))
    ends = {w.partition: w.high for w in watermarks(demo.kafka, demo.topic)}
    # One task per partition, in parallel, as the Spark stage job runs them.
    with ThreadPoolExecutor(len(ends)) as pool:
        results = tuple(
            pool.map(
                lambda item: stage_range(ctx, OffsetRange(demo.topic, item[0], 0, item[1])),
                ends.items(),
            )
        )
    summary = StageSummary(demo.topic, Preparation((), (), (), RangePlan((), ())), results, 3.0)
    instance = dg.DagsterInstance.from_config(str(home))
    instance.report_runless_asset_event(
        dg.AssetMaterialization(STAGING_KEY, metadata=stage_metadata(summary))
    )

    # Each source refreshes on its own cache clock: wait until all three show the stage.
    after = scrape_until(
        url,
        lambda v: (
            value(v, "kbqe_messages_consumed_total", topic=demo.topic) is not None
            and all(
                value(v, "kbqe_kafka_lag_messages", topic=demo.topic, partition=p) == 0
                for p in ends
            )
            and value(
                v,
                "kbqe_staging_pending_files",
                dataset="acme_sales",
                table="orders",
                state="loadable",
            )
            is not None
        ),
    )

    for p, end in ends.items():
        assert value(after, "kbqe_kafka_lag_messages", topic=demo.topic, partition=p) == 0
        assert value(after, "kbqe_staging_next_offset", topic=demo.topic, partition=p) == end
    assert value(after, "kbqe_messages_consumed_total", topic=demo.topic) == len(demo.placed)
    assert value(after, "kbqe_records_staged_total", topic=demo.topic) == len(demo.good)
    reasons = Counter(m.expect_reason for m in demo.bad.values())
    for reason, n in reasons.items():
        assert value(after, "kbqe_dead_letters_total", topic=demo.topic, reason=reason) == n

    bytes_by_dataset: Counter[str] = Counter()
    files_by_table: dict[tuple[str, str], int] = defaultdict(int)
    for path in staging.iterdir():
        parsed = parse_name(path.name)
        if isinstance(parsed, AvroFileName):
            bytes_by_dataset[parsed.key.dataset] += path.stat().st_size
            files_by_table[parsed.key.table_id] += 1
    assert set(bytes_by_dataset) == {"acme_sales", "acme_web", "kbqe_dead_letters"}
    for dataset, n in bytes_by_dataset.items():
        assert value(after, "kbqe_bytes_written_total", topic=demo.topic, dataset=dataset) == n
    for (dataset, table), n in files_by_table.items():
        assert (
            value(
                after, "kbqe_staging_pending_files", dataset=dataset, table=table, state="loadable"
            )
            == n
        )
    assert value(after, "kbqe_avro_files_written_total", topic=demo.topic) == sum(
        files_by_table.values()
    )
    assert get(url + "/healthcheck")[0] == 200
