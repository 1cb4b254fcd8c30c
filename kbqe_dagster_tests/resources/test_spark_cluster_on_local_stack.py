"""The stage job on a real Spark standalone cluster, not ``local[2]`` in the run's process:
``kbqe run --until-idle`` stages a topic of every format through the cluster's executors: Avro
(two tables, bad input dead-lettered), JSON, JSON Schema and Protobuf (their schemas from the
registry), raw bytes, a user's decoder (shipped to the executors as spark-submit ships Python
files, ``spark.submit.pyFiles``) and a keyed compacted topic, every message exactly once in
BigQuery; then every executor is SIGKILLed mid-stage, and the next run stages what was left,
exactly once.

The cluster (kbqe_dagster_tests/support/spark_cluster.py) is as far from the driver as one
machine allows:

- a master and two workers of one core each, each its own JVM from the ``spark-class`` that
  pyspark ships, bound to this machine's addresses only, each worker with a work dir and
  ``SPARK_LOCAL_DIRS`` of its own, and an environment of its own: nothing of the test's (no
  PYTHONPATH, no KBQE_* variable) reaches an executor unless the driver sends it;
- worker 1 in a network namespace of its own, joined to the host by a veth pair: the driver's
  loopback is not reachable from its executors, as from another host, so the driver binds and
  advertises the host's end of the veth (``KBQE_SPARK_DRIVER_HOST``,
  ``KBQE_SPARK_DRIVER_BIND_ADDRESS``), and so does the master;
- the local stack's services listen on the host's 127.0.0.1 only and advertise it (Kafka's
  metadata, the GCS emulator's URLs), so the namespace gets the same addresses: a forwarder in
  this test process listens inside the namespace on its own 127.0.0.1 (the listening socket
  made there through setns) and connects out in the host's namespace, for Kafka, the registry
  and GCS — what DNS names of the services would give on a real network, and the only way in;
- the executors run a second Python environment (``KBQE_SPARK_EXECUTOR_PYTHON``) where
  kbqe_dagster is installed from a wheel built from this checkout; it borrows the heavy
  packages (pyspark, the native kernel, fastavro, confluent-kafka) from this environment's
  site-packages through a .pth line, never kbqe_dagster; the driver's environment also has a
  PYSPARK_PYTHON naming its own interpreter (as a local session or an image leaves it), which
  the named one must beat (resources/spark.py: before issue 40 part 1, the inherited one won);
- each worker runs in a mount namespace of its own where the checkout (every directory of it
  but the one holding this environment, when that is inside it, as CI's ``.venv``), the
  directory this environment imports kbqe_dagster from and the driver's temporary files (the pipeline file,
  the JSON topic's .avsc beside it, the zip of the decoder's module, the Dagster home) are
  empty: a task that read a driver-local path, or imported kbqe_dagster or the decoder from
  anywhere but the wheel and the shipped zip, would fail. The driver runs from a directory
  outside the checkout.

Staging is a bucket on the GCS emulator, as a cluster requires. The cluster is started once
for the module; the two tests run in order (the second uses the first's topics).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import uuid
import zipfile
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest
import yaml
from confluent_kafka import Producer
from confluent_kafka.schema_registry import Schema, SchemaReference, SchemaRegistryClient

from examples.fix.messages import order_flow
from kbqe_dagster.core.protocol.naming import parse_listing
from kbqe_dagster.demo.compacted import CompactedTopic
from kbqe_dagster.demo.samples import (
    SampleMessage,
    bad_messages,
    placed_bad,
    placed_good,
    produce,
    register_schemas,
)
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, LOCAL_PROJECT, LocalEndpoints
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG, KafkaSettings
from kbqe_dagster.resources.kafka.cluster import watermarks
from kbqe_dagster.resources.staging_store import GcsStagingStore, StagingLocation
from kbqe_dagster_tests.kbqe_run import KBQE, REPO, create_topic, drop_datasets, until_idle
from kbqe_dagster_tests.support import json_schema_format, protobuf_format
from kbqe_dagster_tests.support.demo_messages import good_messages
from kbqe_dagster_tests.support.framing import json_framed, protobuf_framed
from kbqe_dagster_tests.support.json_format import SCHEMA as CLICK_SCHEMA
from kbqe_dagster_tests.support.spark_cluster import (
    SparkCluster,
    checkout_paths,
    cluster_unavailable,
    imported_package_dir,
    start_cluster,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 3
JSON_MESSAGES = 120
FIRST_BATCH = 300  # good Avro messages of the first run, both tables (and every bad kind)
FAULT_BATCH = 300  # the Avro topic's second batch, 15 ranges of 20: the kill lands mid-stage
RANGE = 20
OTHER_FORMATS = 30  # messages of each of the JSON Schema, Protobuf and raw topics
FIX_ORDERS = 10  # a NewOrderSingle and two ExecutionReports each
DECODER_MODULES = ("examples/__init__.py", "examples/fix/__init__.py", "examples/fix/decoder.py")


@pytest.fixture(scope="module")
def spark_cluster(local_stack: LocalEndpoints, tmp_path_factory) -> Iterator[SparkCluster]:
    why_not = cluster_unavailable()
    if why_not:
        pytest.skip(why_not)
    hidden = [*checkout_paths(), imported_package_dir(), tmp_path_factory.getbasetemp()]
    cluster = start_cluster(
        hidden=hidden,
        forwarded_ports=(local_stack.kafka_port, local_stack.registry_port, local_stack.gcs_port),
    )
    try:
        yield cluster
    finally:
        cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)


@dataclass
class Topics:
    run: str
    avro: str
    json: str
    keyed: CompactedTopic
    formats: dict[str, str]
    """The JSON Schema, Protobuf, raw and decoder topics, by format."""
    placed: dict[tuple[int, int], SampleMessage]
    env: dict[str, str]
    cwd: Path
    home: Path

    @property
    def datasets(self) -> tuple[str, ...]:
        r = self.run
        return (
            f"acme_sales_{r}",
            f"acme_web_{r}",
            f"web_{r}",
            f"keyed_{r}",
            f"dead_{r}",
            *(f"{kind}_{r}" for kind in self.formats),
        )

    @property
    def staging_url(self) -> str:
        return self.env["KBQE_STAGING_URL"]


@pytest.fixture(scope="module")
def topics(spark_cluster, local_stack, tmp_path_factory) -> Iterator[Topics]:
    """This module's topics, the pipeline file and the environment of a driver that stages them
    on the cluster."""
    run = uuid.uuid4().hex[:8]
    driver = tmp_path_factory.mktemp("driver")
    avro, json_topic = f"cluster{run}.orders", f"cluster{run}.clicks"
    keyed = CompactedTopic(local_stack, f"cluster{run}.customers")
    formats = {kind: f"cluster{run}.{kind}" for kind in ("json_schema", "protobuf", "raw", "fix")}
    for name in (avro, json_topic, *formats.values()):
        create_topic(local_stack.kafka_bootstrap, name, PARTITIONS)
    (driver / "clicks.avsc").write_text(json.dumps(CLICK_SCHEMA))
    # The decoder's module as a user ships it: a zip the driver imports (PYTHONPATH) and names
    # as spark-submit would (spark.submit.pyFiles); the executors cannot see the checkout, nor
    # this directory, so they can only have it from the driver.
    decoders = driver / "decoders.zip"
    with zipfile.ZipFile(decoders, "w") as packed:
        for module in DECODER_MODULES:
            packed.write(REPO / module, module)

    def static(kind: str, table: str) -> dict:
        return {"mode": "static", "dataset": f"{kind}_{run}", "table": table}

    pipeline = {
        "version": 1,
        "topics": [
            {
                "name": avro,
                "event_time": {"fields": ["eventTime", "occurredAt"]},
                "staging": {"max_messages_per_range": RANGE},
            },
            {"name": json_topic, "format": "json", "schema": "clicks.avsc",
             "event_time": {"fields": ["at"]}},
            {
                "name": keyed.name,
                "routing": {"mode": "static", "dataset": f"keyed_{run}", "table": "customers"},
                "event_time": {"fields": [], "kafka_timestamp_fallback": True},
                "keyed": {"key_from": "kafka_key", "deletes": "hard"},
            },
            {"name": formats["json_schema"], "format": "json_schema",
             "routing": static("json_schema", "orders"), "event_time": {"fields": ["placed_at"]}},
            {"name": formats["protobuf"], "format": "protobuf",
             "routing": static("protobuf", "orders"), "event_time": {"fields": ["placed_at"]}},
            {"name": formats["raw"], "format": "raw", "routing": static("raw", "events")},
            {"name": formats["fix"], "format": "decoder",
             "decoder": "examples.fix.decoder:decode_fix",
             "routing": {"mode": "schema_name", "dataset": f"fix_{run}"},
             "event_time": {"fields": ["transact_time"], "date_rule": "utc"}},
        ],
        "allowed_destinations": [
            f"acme_sales_{run}.*", f"acme_web_{run}.*", f"web_{run}.*", f"fix_{run}.*"
        ],
        "dead_letter": {"dataset": f"dead_{run}", "table": "dead_letters"},
        "load": {"max_retries": 1},
    }  # fmt: skip
    (driver / "pipeline.yaml").write_text(yaml.safe_dump(pipeline))
    home = driver / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")
    # A user's environment: SPARK_LOCAL_IP, which a local[2] session in this process may have
    # set, is no user's. A PYSPARK_PYTHON naming the driver's own interpreter is (a local
    # session's, an image's): KBQE_SPARK_EXECUTOR_PYTHON must win over it, or the executors
    # would run this environment's Python, whose kbqe_dagster they cannot see.
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    env.update(
        {
            "PYSPARK_PYTHON": sys.executable,
            "KBQE_ENV": "local",
            "KBQE_PIPELINE_CONFIG": str(driver / "pipeline.yaml"),
            "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/cluster-{run}",
            "DAGSTER_HOME": str(home),
            "PYTHONPATH": str(decoders),
            "KBQE_SPARK_CONF_spark_submit_pyFiles": str(decoders),
            **spark_cluster.driver_environment(),
        }
    )
    made = Topics(run, avro, json_topic, keyed, formats, {}, env, driver, home)
    yield made
    keyed.delete()
    drop_datasets(local_bigquery_client(), *made.datasets)


def produce_clicks(bootstrap: str, topic: str, dataset: str, count: int) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOG})
    for i in range(count):
        value = {"datasetName": dataset, "tableName": "clicks", "url": f"/p/{i}",
                 "at": 1_726_238_205_123 + i}  # fmt: skip
        producer.produce(topic, json.dumps(value).encode(), partition=i % PARTITIONS)
    assert producer.flush(30) == 0


def produce_other_formats(registry_url: str, bootstrap: str, topics: dict[str, str]) -> dict:
    """JSON Schema and Protobuf values under schemas registered for their topics (Protobuf's
    importing another subject), raw bytes of any kind and FIX messages: the messages produced,
    by format."""
    registry = SchemaRegistryClient({"url": registry_url})
    js_id = registry.register_schema(
        f"{topics['json_schema']}-value", Schema(json.dumps(json_schema_format.V1), "JSON")
    )
    common = f"{topics['protobuf']}-acme-common"
    registry.register_schema(common, Schema(protobuf_format.COMMON, "PROTOBUF"))
    reference = SchemaReference("acme/common.proto", common, 1)
    pb_id = registry.register_schema(
        f"{topics['protobuf']}-value", Schema(protobuf_format.V1, "PROTOBUF", [reference])
    )
    values = {
        "json_schema": [
            json_framed(js_id, {**json_schema_format.GOOD, "id": i + 1})
            for i in range(OTHER_FORMATS)
        ],
        "protobuf": [
            protobuf_framed(pb_id, protobuf_format.order(i=i + 1)) for i in range(OTHER_FORMATS)
        ],
        "raw": [b"\xff\x00raw %d" % i for i in range(OTHER_FORMATS)],
        "fix": [sample.value for sample in order_flow(FIX_ORDERS, seed=7)],
    }
    producer = Producer({"bootstrap.servers": bootstrap, "logger": CLIENT_LOG})
    for kind, batch in values.items():
        for i, value in enumerate(batch):
            producer.produce(topics[kind], value, partition=i % PARTITIONS)
    assert producer.flush(30) == 0
    return values


def offsets_in(client, table: str, topic: str) -> Counter[tuple[int, int]]:
    rows = client.query_and_wait(
        f"SELECT _kafka_partition AS p, _kafka_offset AS o FROM `{table}`"
        f" WHERE _kafka_topic = '{topic}'"
    )
    return Counter((r["p"], r["o"]) for r in rows)


def assert_avro_rows_exactly_once(client, topics: Topics) -> None:
    good = placed_good(topics.placed)
    tables = {".".join(m.expect_table) for m in good.values()}
    assert tables == {f"acme_sales_{topics.run}.orders", f"acme_web_{topics.run}.page_views"}
    for table in tables:
        expected = {w for w, m in good.items() if ".".join(m.expect_table) == table}
        seen = offsets_in(client, table, topics.avro)
        assert set(seen) == expected and max(seen.values()) == 1, (
            f"{table}: {len(expected - set(seen))} missing, "
            f"{sum(n > 1 for n in seen.values())} more than once"
        )


def stage_runs(home: Path) -> list[dg.DagsterRun]:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        return [r for r in instance.get_runs() if r.job_name == "stage_job"]


def test_every_format_stages_on_the_cluster_each_message_once(
    spark_cluster, topics, local_endpoints
) -> None:
    t = topics
    ids = register_schemas(local_endpoints.registry_url)
    messages = good_messages(t.run, ids)[:FIRST_BATCH] + bad_messages(ids)
    t.placed.update(produce(local_endpoints.kafka_bootstrap, t.avro, messages, PARTITIONS))
    produce_clicks(local_endpoints.kafka_bootstrap, t.json, f"web_{t.run}", JSON_MESSAGES)
    others = produce_other_formats(
        local_endpoints.registry_url, local_endpoints.kafka_bootstrap, t.formats
    )
    for id_ in range(1, 6):
        t.keyed.put(id_, f"c{id_}")
    t.keyed.put(2, "c2 v2", "gold")
    t.keyed.put(3, None)

    report = json.loads(until_idle(t.env, cwd=t.cwd).stdout)

    good, bad = placed_good(t.placed), placed_bad(t.placed)
    assert report["topics"][t.avro]["staged"] == len(good)
    assert report["topics"][t.avro]["dead_lettered"] == len(bad)
    assert report["topics"][t.json]["staged"] == JSON_MESSAGES
    client = local_bigquery_client()
    assert_avro_rows_exactly_once(client, t)
    clicks = offsets_in(client, f"web_{t.run}.clicks", t.json)
    assert len(clicks) == JSON_MESSAGES and max(clicks.values()) == 1
    dead = client.query_and_wait(
        f"SELECT `partition` AS p, `offset` AS o FROM `dead_{t.run}.dead_letters`"
    )
    assert sorted((r["p"], r["o"]) for r in dead) == sorted(bad)
    current = client.query_and_wait(f"SELECT id, name, tier FROM `keyed_{t.run}.customers`")
    assert {tuple(r.values()) for r in current} == t.keyed.as_table() != set()
    # Each of the other formats' messages once, in the table its format's stager made of it.
    r = t.run
    for kind, tables in (
        ("json_schema", [f"json_schema_{r}.orders"]),
        ("protobuf", [f"protobuf_{r}.orders"]),
        ("raw", [f"raw_{r}.events"]),
        ("fix", [f"fix_{r}.new_order_single", f"fix_{r}.execution_report"]),
    ):
        topic, sent = t.formats[kind], len(others[kind])
        assert report["topics"][topic]["staged"] == sent, (kind, report["topics"][topic])
        seen = sum((offsets_in(client, table, topic) for table in tables), Counter())
        assert len(seen) == sent and max(seen.values()) == 1, (kind, sent, seen)
    orders = client.query_and_wait(f"SELECT id, total.units AS units FROM `protobuf_{r}.orders`")
    assert sorted((row["id"], row["units"]) for row in orders) == [
        (i, 10 * i) for i in range(1, OTHER_FORMATS + 1)
    ]
    raw = client.query_and_wait(f"SELECT value FROM `raw_{r}.events`")
    assert sorted(row["value"] for row in raw) == sorted(others["raw"])
    # The runs were Dagster's stage_job runs, on the cluster's executors (both workers').
    runs = stage_runs(t.home)
    assert runs and all(r.status == dg.DagsterRunStatus.SUCCESS for r in runs)
    assert spark_cluster.workers_that_ran_tasks() == 2


def test_executors_killed_mid_stage_leave_the_next_run_each_range_once(
    spark_cluster, topics, local_endpoints
) -> None:
    """Every executor SIGKILLed as the batch's first range commits (as when their hosts go):
    the stage run fails (one attempt per task, resources/spark.py), whatever the dead tasks
    uploaded stays uncommitted, and the next run stages the rest of the batch, each offset
    once."""
    t = topics
    ids = register_schemas(local_endpoints.registry_url)
    kafka = KafkaSettings(local_endpoints.kafka_bootstrap)
    before = {w.partition: w.high for w in watermarks(kafka, t.avro)}
    batch = good_messages(t.run, ids)[FIRST_BATCH : FIRST_BATCH + FAULT_BATCH]
    t.placed.update(produce(local_endpoints.kafka_bootstrap, t.avro, batch, PARTITIONS))
    store = GcsStagingStore(StagingLocation(t.staging_url, local_endpoints.gcs_url, LOCAL_PROJECT))

    def batch_ranges_done() -> list[tuple[int, int, int]]:
        """(partition, first, last) of the batch's committed ranges."""
        listing = parse_listing(f.name for f in store.list())
        return sorted(
            {
                (d.key.partition, d.first_offset, d.last_offset)
                for d in listing.done
                if d.key.topic == t.avro and d.first_offset >= before[d.key.partition]
            }
        )

    log = t.cwd / "killed-run.log"  # a file, not a pipe nobody reads while the run logs
    with log.open("w") as stderr:
        driver = subprocess.Popen(
            [KBQE, "run", "--until-idle", "--json"],
            env=t.env,
            cwd=t.cwd,
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
        )
    try:
        deadline = time.monotonic() + 300
        while not (done_at_kill := batch_ranges_done()):
            assert driver.poll() is None, f"the run ended before staging: {log.read_text()}"
            assert time.monotonic() < deadline, "no range of the batch committed in 300s"
            time.sleep(0.05)
        killed = spark_cluster.kill_executors()
        out, _ = driver.communicate(timeout=300)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()
    err = log.read_text()
    ranges = FAULT_BATCH // RANGE
    assert killed and len(done_at_kill) < ranges, (killed, done_at_kill)
    assert driver.returncode == 1, err[-3000:]
    assert json.loads(out)["error"].startswith(f"{t.avro}: stage run "), out
    committed = batch_ranges_done()
    assert len(committed) < ranges, "the stage run went on after its executors were killed"

    report = json.loads(until_idle(t.env, cwd=t.cwd).stdout)

    left = FAULT_BATCH - sum(last - first + 1 for _, first, last in committed)
    assert report["topics"][t.avro]["staged"] == left > 0
    assert_avro_rows_exactly_once(local_bigquery_client(), t)
    runs = stage_runs(t.home)
    assert [r.status for r in runs].count(dg.DagsterRunStatus.FAILURE) == 1
