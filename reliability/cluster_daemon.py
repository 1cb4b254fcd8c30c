"""The Dagster daemon against a Spark standalone cluster (issue 40, part 1): ``kbqe dev`` on a
driver environment that names the cluster, its sensors launching a ``stage_job`` run for a topic
loaded by load jobs and a stage loop run for a topic delivered through the Storage Write API,
both on the cluster's executors; every message counted once in BigQuery.

    .venv/bin/python -m reliability.cluster_daemon [--messages 600] [--wait 600]

Needs the local stack (``kbqe stack up``) and what the cluster test needs (root, ``ip``,
``unshare``: kbqe_dagster_tests/support/spark_cluster.py). The cluster is that test's: a master
and two one-core workers, one in a network namespace of its own, executors on a second Python
with kbqe_dagster from a wheel and no access to the checkout or this run's files.

On a cluster every Spark application holds its executors while it lives, and by default all
the cores it can get: a stage loop run would hold both workers and leave a stage run none.
So the driver caps each application at one core (``spark.cores.max``), and the loop runs
without a standby (``stage_runs.loop_standby: false``): the loop holds one worker, stage runs
take the other (docs/deployment.md, "The stage loop on a cluster").

Produces ``--messages`` clicks to each of two topics, waits until both tables hold each of
them once (exit 0) or the wait ends (exit 1, with the counts), then reports which runs the
sensors launched and how many workers ran tasks. Stops ``kbqe dev`` and the cluster, deletes
the topics and datasets at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections import Counter
from pathlib import Path

import yaml
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from kbqe_dagster.demo.samples import click_messages, register_click_schema
from kbqe_dagster.localstack.clients import local_bigquery_client
from kbqe_dagster.localstack.endpoints import LOCAL_BUCKET, local_endpoints
from kbqe_dagster.resources.kafka.clients import CLIENT_LOG
from reliability import kbqe_dev

REPO = Path(__file__).resolve().parents[1]
PARTITIONS = 3


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=600, help="clicks per topic")
    parser.add_argument("--wait", type=float, default=600.0, help="catch-up timeout (s)")
    parser.add_argument("--port", type=int, default=3139, help="kbqe dev's web port")
    args = parser.parse_args(argv)

    sys.path.insert(0, str(REPO))
    from kbqe_dagster_tests.support.spark_cluster import (
        checkout_paths,
        cluster_unavailable,
        imported_package_dir,
        start_cluster,
    )

    why_not = cluster_unavailable()
    if why_not:
        print(f"cannot start the cluster: {why_not}", file=sys.stderr)
        return 2
    endpoints = local_endpoints()
    run = uuid.uuid4().hex[:8]
    dataset = f"clusterd_{run}"
    topics = {"load": f"clusterd{run}.clicks", "storage_write": f"clusterd{run}.live_clicks"}
    tables = {"load": f"{dataset}.clicks", "storage_write": f"{dataset}.live_clicks"}
    work = Path(tempfile.mkdtemp(prefix="kbqe-cluster-daemon-"))
    admin = AdminClient({"bootstrap.servers": endpoints.kafka_bootstrap, "logger": CLIENT_LOG})
    for name in topics.values():
        admin.create_topics([NewTopic(name, PARTITIONS, 1)])[name].result(30)
    config = {
        "version": 1,
        "topics": [
            {
                "name": topics[kind],
                "routing": {"mode": "static", "dataset": dataset, "table": tables[kind].split(".")[1]},
                "event_time": {"fields": ["occurredAt"]},
            }
            for kind in topics
        ],
        "tables": {tables["storage_write"]: {"delivery": "storage_write"}},
        "dead_letter": {"dataset": f"{dataset}_dead", "table": "dead_letters"},
        "staging": {"allowed_latency": "10s", "loop_interval": "1s"},
        "stage_runs": {"loop_standby": False},
        "load": {"cadence": "2m", "poll_interval": "20s"},
    }  # fmt: skip
    (work / "pipeline.yaml").write_text(yaml.safe_dump(config))
    home = work / "dagster_home"
    home.mkdir()
    shutil.copyfile(REPO / "dagster.yaml", home / "dagster.yaml")

    cluster = start_cluster(
        hidden=[*checkout_paths(), imported_package_dir(), work],
        forwarded_ports=(endpoints.kafka_port, endpoints.registry_port, endpoints.gcs_port),
    )
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    env.update(
        {
            "KBQE_ENV": "local",
            "KBQE_PIPELINE_CONFIG": str(work / "pipeline.yaml"),
            "KBQE_STAGING_URL": f"gs://{LOCAL_BUCKET}/cluster-daemon-{run}",
            "DAGSTER_HOME": str(home),
            **cluster.driver_environment(),
            "KBQE_SPARK_CONF_spark_cores_max": "1",
        }
    )
    dev = kbqe_dev.start(env, work, args.port, cwd=work)
    print(f"kbqe dev (pid {dev.pid}, log {work / 'kbqe-dev.log'}), cluster {cluster.master_url}")
    client = local_bigquery_client()
    try:
        time.sleep(15)  # the daemon up, as a user's would be before data arrives
        click_id = register_click_schema(endpoints.registry_url)
        producer = Producer({"bootstrap.servers": endpoints.kafka_bootstrap, "logger": CLIENT_LOG})
        for kind, topic in topics.items():
            for i, message in enumerate(click_messages(args.messages, click_id, seed=len(kind))):
                producer.produce(topic, message.value, partition=i % PARTITIONS)
        assert producer.flush(30) == 0
        produced = time.monotonic()
        print(f"produced {args.messages} clicks to each of {', '.join(topics.values())}")
        seen: dict[str, float] = {}
        counts: dict[str, Counter] = {}
        while time.monotonic() - produced < args.wait and len(seen) < len(topics):
            for kind, table in tables.items():
                if kind in seen:
                    continue
                try:
                    rows = client.query_and_wait(
                        f"SELECT _kafka_partition AS p, _kafka_offset AS o FROM `{table}`"
                    )
                    counts[kind] = Counter((r["p"], r["o"]) for r in rows)
                except Exception:  # noqa: BLE001 - the table may not exist yet
                    continue
                if len(counts[kind]) == args.messages:
                    seen[kind] = time.monotonic() - produced
                    print(f"{table} ({kind}): all {args.messages} rows {seen[kind]:.1f}s after "
                          f"the produce, {max(counts[kind].values())} copy of each at most")  # fmt: skip
            time.sleep(2)
        runs = _runs(home)
        print("runs:", ", ".join(f"{job} {status}: {n}" for (job, status), n in runs.items()))
        print(f"workers that ran tasks: {cluster.workers_that_ran_tasks()} of 2")
        once = all(max(c.values()) == 1 for c in counts.values()) and len(seen) == len(topics)
        if not once:
            print(f"NOT every message once within {args.wait:.0f}s: "
                  f"{ {k: (len(c), max(c.values(), default=0)) for k, c in counts.items()} }")  # fmt: skip
        return 0 if once else 1
    finally:
        kbqe_dev.stop(dev)
        cluster.stop()
        shutil.rmtree(cluster.root, ignore_errors=True)
        admin.delete_topics(list(topics.values()))
        for name in (dataset, f"{dataset}_dead"):
            client.delete_dataset(name, delete_contents=True, not_found_ok=True)


def _runs(home: Path) -> Counter:
    import dagster as dg

    with dg.DagsterInstance.from_config(str(home)) as instance:
        return Counter((r.job_name, r.status.value) for r in instance.get_runs())


if __name__ == "__main__":
    sys.exit(main())
